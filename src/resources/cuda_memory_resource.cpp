// nbrmm.mr.CudaMemoryResource (rmm/mr/cuda_memory_resource.hpp): cudaMalloc/cudaFree.
#include "resources/adaptor.hpp"

#include <rmm/mr/cuda_memory_resource.hpp>

namespace nbrmm {
namespace {
struct CudaMemoryResource : DeviceMemoryResource {};
}  // namespace

void bind_cuda_memory_resource(nb::module_& m)
{
  resource_class<CudaMemoryResource>(m, "CudaMemoryResource", R"doc(
Memory resource that allocates with ``cudaMalloc`` and frees with ``cudaFree``.

Every allocation synchronizes the device; prefer a pool or arena for speed.)doc")
    .def(
      "__init__",
      [](CudaMemoryResource* self) {
        init_guard const guard{self};
        new (self) CudaMemoryResource{};
        self->device = current_device();
        self->res    = device_resource{rmm::mr::cuda_memory_resource{}};
      },
      "Create a resource on the current device.");
  register_typed_wrapper<CudaMemoryResource, rmm::mr::cuda_memory_resource>();
  register_gpu_resource_type(nb::type<CudaMemoryResource>());
}

}  // namespace nbrmm
