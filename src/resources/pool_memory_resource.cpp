// nbrmm.mr.PoolMemoryResource (rmm/mr/pool_memory_resource.hpp): a coalescing best-fit
// suballocator over memory taken from the upstream in large chunks.
#include "resources/adaptor.hpp"
#include "core/rmm_compat.hpp"

#include <rmm/aligned.hpp>
#include <rmm/cuda_device.hpp>
#include <rmm/mr/pool_memory_resource.hpp>

#include <algorithm>
#include <optional>
#include <string>

namespace nbrmm {
namespace {

using pool_resource = rmm::mr::pool_memory_resource;

struct PoolMemoryResource : UpstreamResourceAdaptor {};

void require_aligned(std::optional<std::size_t> size, char const* param)
{
  if (size && !rmm::is_aligned(*size, rmm::CUDA_ALLOCATION_ALIGNMENT)) {
    throw_invalid_argument(std::string{param} + ": must be a multiple of " +
                           std::to_string(rmm::CUDA_ALLOCATION_ALIGNMENT) + " bytes, got " +
                           std::to_string(*size));
  }
}

}  // namespace

void bind_pool_memory_resource(nb::module_& m)
{
  resource_class<PoolMemoryResource, UpstreamResourceAdaptor>(m, "PoolMemoryResource", R"doc(
Coalescing best-fit suballocator over a pool of memory taken from ``upstream_mr``.

The pool starts with ``initial_pool_size`` bytes and grows, when it must, by taking
further chunks from the upstream (at least as large as the pool already is, within
``maximum_pool_size``). Memory returns to the upstream when the resource is destroyed.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource the pool takes its memory from; created on the current device.
initial_pool_size : int or str, optional
    Bytes to take at once (a multiple of 256). By default half of the device's free
    memory, as in rmm (no more than ``maximum_pool_size`` when that is given).
maximum_pool_size : int or str, optional
    Most bytes the pool may hold (a multiple of 256); unlimited by default.

Raises
------
nbrmm.InvalidArgumentError
    If a size is not a multiple of 256, or ``initial_pool_size`` exceeds
    ``maximum_pool_size`` (a ``ValueError``, and a ``RuntimeError`` as in rmm).
ValueError
    If a size string does not parse.
MemoryError
    If the upstream cannot provide the initial pool.)doc")
    .def(
      "__init__",
      [](PoolMemoryResource* self, nb::handle upstream_mr, nb::handle initial_pool_size,
         nb::handle maximum_pool_size) {
        init_guard const guard{self};
        resource_on_device(upstream_mr, "upstream_mr", current_device());
        auto initial       = parse_optional_size(initial_pool_size, "initial_pool_size");
        auto const maximum = parse_optional_size(maximum_pool_size, "maximum_pool_size");
        require_aligned(initial, "initial_pool_size");
        require_aligned(maximum, "maximum_pool_size");
        if (initial && maximum && *maximum < *initial) {
          throw_invalid_argument("initial_pool_size: the initial pool size (" +
                                 std::to_string(*initial) +
                                 " bytes) exceeds the maximum pool size (" +
                                 std::to_string(*maximum) + " bytes)");
        }
        require_gpu_for(upstream_mr, "PoolMemoryResource");
        if (!initial) {
          require_gpu("PoolMemoryResource without initial_pool_size (the default is half of "
                      "the device's free memory)");
          {
            gil_release release;
            initial = rmm::percent_of_free_device_memory(50);
          }
          initial = rmm::align_down(std::min(*initial, maximum.value_or(*initial)),
                                    rmm::CUDA_ALLOCATION_ALIGNMENT);
        }
        init_adaptor(
          self, upstream_mr,
          [&](device_resource up) { return pool_resource{std::move(up), *initial, maximum}; },
          true);
      },
      nb::arg("upstream_mr"), nb::arg("initial_pool_size") = nb::none(),
      nb::arg("maximum_pool_size") = nb::none(),
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, "
              "initial_pool_size: int | str | None = None, "
              "maximum_pool_size: int | str | None = None) -> None"))
    .def(
      "pool_size",
      method<PoolMemoryResource>("pool_size", [](PoolMemoryResource& self) {
        return resource_as<pool_resource>(self).pool_size();
      }),
      "Bytes the pool currently holds from its upstream (in use or free).");
  register_adaptor_wrapper<PoolMemoryResource, pool_resource>();
}

}  // namespace nbrmm
