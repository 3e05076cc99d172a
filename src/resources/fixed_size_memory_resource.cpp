// nbrmm.mr.FixedSizeMemoryResource (rmm/mr/fixed_size_memory_resource.hpp): blocks of
// one size, carved from chunks taken from the upstream.
#include "resources/adaptor.hpp"

#include <rmm/aligned.hpp>
#include <rmm/mr/fixed_size_memory_resource.hpp>

#include <limits>
#include <string>

namespace nbrmm {
namespace {

using fixed_resource = rmm::mr::fixed_size_memory_resource;

struct FixedSizeMemoryResource : UpstreamResourceAdaptor {};

}  // namespace

void bind_fixed_size_memory_resource(nb::module_& m)
{
  resource_class<FixedSizeMemoryResource, UpstreamResourceAdaptor>(
    m, "FixedSizeMemoryResource", R"doc(
Memory resource that hands out blocks of a single size.

It takes chunks of ``block_size * blocks_to_preallocate`` bytes from ``upstream_mr`` (one
at construction, another whenever all blocks are in use) and serves every request of at
most ``block_size`` bytes with one block. Larger requests raise ``MemoryError``. Memory
returns to the upstream when the resource is destroyed.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource the chunks come from; created on the current device.
block_size : int or str, optional
    The block size, rounded up to a multiple of 256 (1 MiB by default).
blocks_to_preallocate : int, optional
    Blocks per chunk taken from the upstream (128 by default, at least 1).)doc")
    .def(
      "__init__",
      [](FixedSizeMemoryResource* self, nb::handle upstream_mr, nb::handle block_size,
         nb::handle blocks_to_preallocate) {
        init_guard const guard{self};
        std::size_t const block = parse_size(block_size, "block_size");
        std::size_t const count = parse_size(blocks_to_preallocate, "blocks_to_preallocate");
        if (block == 0) { throw nb::value_error("block_size: must be positive"); }
        if (count == 0) { throw nb::value_error("blocks_to_preallocate: must be at least 1"); }
        constexpr auto max = std::numeric_limits<std::size_t>::max();
        if (block > max - rmm::CUDA_ALLOCATION_ALIGNMENT ||
            rmm::align_up(block, rmm::CUDA_ALLOCATION_ALIGNMENT) > max / count) {
          throw nb::value_error(("blocks_to_preallocate: " + std::to_string(count) +
                                 " blocks of " + std::to_string(block) +
                                 " bytes do not fit in the address space")
                                  .c_str());
        }
        resource_on_device(upstream_mr, "upstream_mr", current_device());
        require_gpu_for(upstream_mr, "FixedSizeMemoryResource");
        init_adaptor(
          self, upstream_mr,
          [&](device_resource up) { return fixed_resource{std::move(up), block, count}; }, true);
      },
      nb::arg("upstream_mr"), nb::arg("block_size") = fixed_resource::default_block_size,
      nb::arg("blocks_to_preallocate") = fixed_resource::default_blocks_to_preallocate,
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, "
              "block_size: int | str = 1048576, blocks_to_preallocate: int = 128) -> None"))
    .def(
      "get_block_size",
      method<FixedSizeMemoryResource>("get_block_size", [](FixedSizeMemoryResource& self) {
        return resource_as<fixed_resource>(self).get_block_size();
      }),
      "The block size in bytes (the requested size rounded up to a multiple of 256).");
  register_adaptor_wrapper<FixedSizeMemoryResource, fixed_resource>();
}

}  // namespace nbrmm
