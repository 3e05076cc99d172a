// nbrmm.mr.CudaAsyncMemoryResource (rmm/mr/cuda_async_memory_resource.hpp): a new CUDA
// memory pool served by cudaMallocFromPoolAsync / cudaFreeAsync.
#include "resources/adaptor.hpp"

#include <rmm/mr/cuda_async_memory_resource.hpp>

#include <cstdint>
#include <optional>

namespace nbrmm {
namespace {

using async_resource = rmm::mr::cuda_async_memory_resource;
using handle_type    = async_resource::allocation_handle_type;

struct CudaAsyncMemoryResource : DeviceMemoryResource {};

}  // namespace

void bind_cuda_async_memory_resource(nb::module_& m)
{
  resource_class<CudaAsyncMemoryResource>(m, "CudaAsyncMemoryResource", R"doc(
Memory resource that allocates from a new CUDA memory pool (``cudaMallocFromPoolAsync``).

The resource owns the pool (it is destroyed with the last copy of the resource);
:meth:`pool_handle` returns it, for ``CudaAsyncViewMemoryResource`` or other libraries.

Parameters
----------
initial_pool_size : int or str, optional
    Bytes to allocate and free at once, so that the pool starts with that much memory.
    By default the pool starts empty.
release_threshold : int or str, optional
    Memory the pool keeps across synchronizations; the rest is released to the system.
    By default the pool keeps everything it has.
enable_ipc : bool, optional
    Allow exporting allocations to other processes through POSIX file descriptors.
enable_fabric : bool, optional
    Allow exporting allocations through fabric handles (multi-node NVLink).

Raises
------
nbrmm.LogicError
    If the driver does not support memory pools or the requested export handles.)doc")
    .def(
      "__init__",
      [](CudaAsyncMemoryResource* self, nb::handle initial_pool_size, nb::handle release_threshold,
         nb::handle enable_ipc, nb::handle enable_fabric) {
        init_guard const guard{self};
        auto const initial   = parse_optional_size(initial_pool_size, "initial_pool_size");
        auto const threshold = parse_optional_size(release_threshold, "release_threshold");
        bool const ipc       = bool_arg(enable_ipc, "enable_ipc");
        bool const fabric    = bool_arg(enable_fabric, "enable_fabric");
        std::optional<handle_type> handles;
        if (ipc || fabric) {
          std::int32_t bits = 0;
          if (ipc) { bits |= static_cast<std::int32_t>(handle_type::posix_file_descriptor); }
          if (fabric) { bits |= static_cast<std::int32_t>(handle_type::fabric); }
          handles = static_cast<handle_type>(bits);
        }
        require_gpu("CudaAsyncMemoryResource");
        int const device = current_device();
        init_resource(
          self,
          make_resource([&] { return async_resource{initial, threshold, handles}; }, true),
          device);
      },
      nb::arg("initial_pool_size") = nb::none(), nb::arg("release_threshold") = nb::none(),
      nb::arg("enable_ipc") = false, nb::arg("enable_fabric") = false,
      nb::sig("def __init__(self, initial_pool_size: int | str | None = None, "
              "release_threshold: int | str | None = None, enable_ipc: bool = False, "
              "enable_fabric: bool = False) -> None"))
    .def(
      "pool_handle",
      method<CudaAsyncMemoryResource>("pool_handle", [](CudaAsyncMemoryResource& self) {
        return reinterpret_cast<std::uintptr_t>(resource_as<async_resource>(self).pool_handle());
      }),
      "The ``cudaMemPool_t`` of the pool, as an int.");
  register_typed_wrapper<CudaAsyncMemoryResource, async_resource>();
  register_gpu_resource_type(nb::type<CudaAsyncMemoryResource>());
}

}  // namespace nbrmm
