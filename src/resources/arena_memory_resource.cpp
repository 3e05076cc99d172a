// nbrmm.mr.ArenaMemoryResource (rmm/mr/arena_memory_resource.hpp): a global arena split
// into per-thread and per-stream arenas, built to avoid fragmentation and contention.
#include "resources/adaptor.hpp"

#include <rmm/mr/arena_memory_resource.hpp>

#include <string>

namespace nbrmm {
namespace {

using arena_resource = rmm::mr::arena_memory_resource;

struct ArenaMemoryResource : UpstreamResourceAdaptor {};

/// The smallest and largest arena librmm accepts (the global arena starts as one superblock).
constexpr std::size_t minimum_arena_size = std::size_t{1} << 20;
constexpr std::size_t maximum_arena_size = std::size_t{1} << 40;

}  // namespace

void bind_arena_memory_resource(nb::module_& m)
{
  resource_class<ArenaMemoryResource, UpstreamResourceAdaptor>(m, "ArenaMemoryResource", R"doc(
Suballocator with a global arena and per-thread / per-stream arenas.

The global arena takes ``arena_size`` bytes from ``upstream_mr`` at once and hands out
superblocks (1 MiB or more) to the arenas of threads (default streams) and of other
streams; larger requests are served by the global arena directly. It limits
fragmentation and scales with many threads. Memory returns to the upstream when the
resource is destroyed.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource the arena takes its memory from; created on the current device.
arena_size : int or str, optional
    Size of the global arena (1 MiB to 1 TiB; rounded down to a multiple of 256). By
    default half of the device's free memory.
dump_log_on_failure : bool, optional
    Write the arenas' state to the rmm log when an allocation fails.

Notes
-----
The resource cannot report its upstream when it was created by C++ code: librmm's
arena does not expose it (``upstream_mr`` is then None).)doc")
    .def(
      "__init__",
      [](ArenaMemoryResource* self, nb::handle upstream_mr, nb::handle arena_size,
         nb::handle dump_log_on_failure) {
        init_guard const guard{self};
        auto const size = parse_optional_size(arena_size, "arena_size");
        if (size && (*size < minimum_arena_size || *size > maximum_arena_size)) {
          throw nb::value_error(("arena_size: must be between 1 MiB and 1 TiB, got " +
                                 std::to_string(*size) + " bytes")
                                  .c_str());
        }
        bool const dump = bool_arg(dump_log_on_failure, "dump_log_on_failure");
        resource_on_device(upstream_mr, "upstream_mr", current_device());
        require_gpu_for(upstream_mr, "ArenaMemoryResource");
        if (!size) {
          require_gpu("ArenaMemoryResource without arena_size (the default is half of the "
                      "device's free memory)");
        }
        init_adaptor(
          self, upstream_mr,
          [&](device_resource up) { return arena_resource{std::move(up), size, dump}; }, true);
      },
      nb::arg("upstream_mr"), nb::arg("arena_size") = nb::none(),
      nb::arg("dump_log_on_failure") = false,
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, "
              "arena_size: int | str | None = None, dump_log_on_failure: bool = False) -> None"));
  register_typed_wrapper<ArenaMemoryResource, arena_resource>();
}

}  // namespace nbrmm
