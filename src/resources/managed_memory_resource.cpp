// nbrmm.mr.ManagedMemoryResource (rmm/mr/managed_memory_resource.hpp): cudaMallocManaged.
#include "resources/adaptor.hpp"

#include <rmm/mr/managed_memory_resource.hpp>

namespace nbrmm {
namespace {
struct ManagedMemoryResource : DeviceMemoryResource {};
}  // namespace

void bind_managed_memory_resource(nb::module_& m)
{
  bind_plain_resource<ManagedMemoryResource, rmm::mr::managed_memory_resource, true>(
    m, "ManagedMemoryResource", R"doc(
Memory resource that allocates with ``cudaMallocManaged`` and frees with ``cudaFree``.

Managed (unified) memory migrates between host and device on demand, so it is both
device- and host-accessible and can exceed the device's memory.)doc");
}

}  // namespace nbrmm
