// nbrmm.mr.SystemMemoryResource (rmm/mr/system_memory_resource.hpp): malloc/free memory
// that the GPU reaches through system-allocated memory (SAM / HMM).
#include "resources/adaptor.hpp"

#include <rmm/mr/system_memory_resource.hpp>

namespace nbrmm {
namespace {
struct SystemMemoryResource : DeviceMemoryResource {};
}  // namespace

void bind_system_memory_resource(nb::module_& m)
{
  bind_plain_resource<SystemMemoryResource, rmm::mr::system_memory_resource, true, true>(
    m, "SystemMemoryResource", R"doc(
Memory resource that allocates ordinary host memory (``operator new``) for use by the GPU.

It needs a system where the device can access pageable host memory (system-allocated
memory: Grace Hopper, or HMM on Linux); the constructor raises ``nbrmm.LogicError``
elsewhere. A free first synchronizes its stream, since host memory is released at once.)doc");
}

}  // namespace nbrmm
