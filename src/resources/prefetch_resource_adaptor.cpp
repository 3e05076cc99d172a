// nbrmm.mr.PrefetchResourceAdaptor (rmm/mr/prefetch_resource_adaptor.hpp): prefetches
// each new allocation to the device.
#include "resources/adaptor.hpp"

#include <rmm/mr/prefetch_resource_adaptor.hpp>

namespace nbrmm {
namespace {

using prefetch_adaptor = rmm::mr::prefetch_resource_adaptor;

struct PrefetchResourceAdaptor : UpstreamResourceAdaptor {};

}  // namespace

void bind_prefetch_resource_adaptor(nb::module_& m)
{
  resource_class<PrefetchResourceAdaptor, UpstreamResourceAdaptor>(
    m, "PrefetchResourceAdaptor", R"doc(
Adaptor that prefetches every new allocation to the current device, on the allocation's
stream (``cudaMemPrefetchAsync``).

Useful over managed memory; for other memory the prefetch does nothing.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource that serves the allocations; created on the current device.)doc")
    .def(
      "__init__",
      [](PrefetchResourceAdaptor* self, nb::handle upstream_mr) {
        init_guard const guard{self};
        init_adaptor(self, upstream_mr,
                     [](device_resource up) { return prefetch_adaptor{std::move(up)}; });
      },
      nb::arg("upstream_mr"),
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource) -> None"));
  register_adaptor_wrapper<PrefetchResourceAdaptor, prefetch_adaptor>();
}

}  // namespace nbrmm
