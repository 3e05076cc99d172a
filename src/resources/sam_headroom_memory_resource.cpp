// nbrmm.mr.SamHeadroomMemoryResource (rmm/mr/sam_headroom_memory_resource.hpp): system
// memory placed on the GPU while the GPU keeps `headroom` bytes free.
#include "resources/adaptor.hpp"

#include <rmm/mr/sam_headroom_memory_resource.hpp>

namespace nbrmm {
namespace {
struct SamHeadroomMemoryResource : DeviceMemoryResource {};
}  // namespace

void bind_sam_headroom_memory_resource(nb::module_& m)
{
  resource_class<SamHeadroomMemoryResource>(m, "SamHeadroomMemoryResource", R"doc(
System-allocated memory (SAM) that prefers the GPU while it keeps ``headroom`` bytes free.

Each allocation is ordinary host memory; the part that fits in the GPU's free memory less
``headroom`` is advised to live on the GPU, the rest on the host. Needs a system where
the device can access pageable host memory (the constructor raises ``nbrmm.LogicError``
elsewhere).

Parameters
----------
headroom : int or str
    GPU memory, in bytes, to leave free for other allocations (``"1GiB"`` accepted).)doc")
    .def(
      "__init__",
      [](SamHeadroomMemoryResource* self, nb::handle headroom) {
        init_guard const guard{self};
        std::size_t const bytes = parse_size(headroom, "headroom");
        require_gpu("SamHeadroomMemoryResource");
        int const device        = current_device();
        init_resource(self,
                      make_resource([&] { return rmm::mr::sam_headroom_memory_resource{bytes}; },
                                    true),
                      device, true);
      },
      nb::arg("headroom"), nb::sig("def __init__(self, headroom: int | str) -> None"));
  register_typed_wrapper<SamHeadroomMemoryResource, rmm::mr::sam_headroom_memory_resource, true>();
  register_gpu_resource_type(nb::type<SamHeadroomMemoryResource>());
}

}  // namespace nbrmm
