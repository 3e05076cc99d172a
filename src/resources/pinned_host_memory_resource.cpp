// nbrmm.mr.PinnedHostMemoryResource (rmm/mr/pinned_host_memory_resource.hpp):
// cudaHostAlloc / cudaFreeHost.
#include "resources/adaptor.hpp"

#include <rmm/mr/pinned_host_memory_resource.hpp>

namespace nbrmm {
namespace {
struct PinnedHostMemoryResource : DeviceMemoryResource {};
}  // namespace

void bind_pinned_host_memory_resource(nb::module_& m)
{
  bind_plain_resource<PinnedHostMemoryResource, rmm::mr::pinned_host_memory_resource, true>(
    m, "PinnedHostMemoryResource", R"doc(
Memory resource that allocates pinned (page-locked) host memory with ``cudaHostAlloc``.

The memory is host-accessible (``is_host_accessible`` is True) and mapped into the
device's address space, so kernels can read it and copies to and from it are fast.)doc");
}

}  // namespace nbrmm
