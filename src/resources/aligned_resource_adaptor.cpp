// nbrmm.mr.AlignedResourceAdaptor (rmm/mr/aligned_resource_adaptor.hpp): allocations
// aligned to more than CUDA's 256 bytes.
#include "resources/adaptor.hpp"

#include <rmm/aligned.hpp>
#include <rmm/mr/aligned_resource_adaptor.hpp>

#include <string>

namespace nbrmm {
namespace {

using aligned_adaptor = rmm::mr::aligned_resource_adaptor;

struct AlignedResourceAdaptor : UpstreamResourceAdaptor {};

}  // namespace

void bind_aligned_resource_adaptor(nb::module_& m)
{
  resource_class<AlignedResourceAdaptor, UpstreamResourceAdaptor>(
    m, "AlignedResourceAdaptor", R"doc(
Adaptor that aligns allocations of at least ``alignment_threshold`` bytes to
``alignment``. (Not in rmm's Python API.)

It over-allocates from the upstream by ``alignment - 256`` bytes and returns an aligned
pointer inside the block. Smaller allocations, and all of them when ``alignment`` is
256, pass through unchanged.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource that serves the allocations; created on the current device.
alignment : int, optional
    A power of two; values below 256 mean 256 (the default).
alignment_threshold : int or str, optional
    Allocations smaller than this are not aligned (0 by default: all are).)doc")
    .def(
      "__init__",
      [](AlignedResourceAdaptor* self, nb::handle upstream_mr, nb::handle alignment,
         nb::handle alignment_threshold) {
        init_guard const guard{self};
        std::size_t const align     = parse_size(alignment, "alignment");
        std::size_t const threshold = parse_size(alignment_threshold, "alignment_threshold");
        if (align == 0 || !rmm::is_pow2(align)) {
          throw nb::value_error(
            ("alignment: must be a power of two, got " + std::to_string(align)).c_str());
        }
        if (align > (std::size_t{1} << 40)) {
          throw nb::value_error(
            ("alignment: " + std::to_string(align) + " bytes is too large").c_str());
        }
        init_adaptor(self, upstream_mr, [&](device_resource up) {
          return aligned_adaptor{std::move(up), align, threshold};
        });
      },
      nb::arg("upstream_mr"), nb::arg("alignment") = rmm::CUDA_ALLOCATION_ALIGNMENT,
      nb::arg("alignment_threshold") = aligned_adaptor::default_alignment_threshold,
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, alignment: int = 256, "
              "alignment_threshold: int | str = 0) -> None"))
    .def_prop_ro(
      "alignment",
      getter<AlignedResourceAdaptor>("alignment",
                                     [](AlignedResourceAdaptor& self) {
                                       return resource_as<aligned_adaptor>(self).get().get_alignment();
                                     }),
      "The alignment in bytes (at least 256).")
    .def_prop_ro(
      "alignment_threshold",
      getter<AlignedResourceAdaptor>(
        "alignment_threshold",
        [](AlignedResourceAdaptor& self) {
          return resource_as<aligned_adaptor>(self).get().get_alignment_threshold();
        }),
      "The size from which allocations are aligned.");
  register_adaptor_wrapper<AlignedResourceAdaptor, aligned_adaptor>();
}

}  // namespace nbrmm
