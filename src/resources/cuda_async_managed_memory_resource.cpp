// nbrmm.mr.experimental.CudaAsyncManagedMemoryResource
// (rmm/mr/cuda_async_managed_memory_resource.hpp): stream-ordered managed memory from the
// device's default managed memory pool.
#include "resources/adaptor.hpp"

#include <rmm/mr/cuda_async_managed_memory_resource.hpp>

#include <cstdint>

namespace nbrmm {
namespace {

using async_managed = rmm::mr::cuda_async_managed_memory_resource;

struct CudaAsyncManagedMemoryResource : DeviceMemoryResource {};

}  // namespace

void bind_cuda_async_managed_memory_resource(nb::module_& m)
{
  resource_class<CudaAsyncManagedMemoryResource>(m, "CudaAsyncManagedMemoryResource", R"doc(
Memory resource for stream-ordered managed memory (``cudaMallocFromPoolAsync`` on the
current device's default managed memory pool).

Experimental, as in rmm: it needs CUDA 13 and a device with concurrent managed access;
the constructor raises ``nbrmm.LogicError`` otherwise. The memory is host-accessible.)doc")
    .def(
      "__init__",
      [](CudaAsyncManagedMemoryResource* self) {
        init_guard const guard{self};
        require_gpu("CudaAsyncManagedMemoryResource");
        int const device = current_device();
        init_resource(self, make_resource([] { return async_managed{}; }, true), device, true);
      },
      "Create a resource on the current device.")
    .def(
      "pool_handle",
      method<CudaAsyncManagedMemoryResource>("pool_handle", [](CudaAsyncManagedMemoryResource& self) {
        return reinterpret_cast<std::uintptr_t>(resource_as<async_managed>(self).pool_handle());
      }),
      "The ``cudaMemPool_t`` of the managed pool, as an int.");
  register_typed_wrapper<CudaAsyncManagedMemoryResource, async_managed, true>();
  register_gpu_resource_type(nb::type<CudaAsyncManagedMemoryResource>());
}

}  // namespace nbrmm
