// nbrmm.mr.LimitingResourceAdaptor (rmm/mr/limiting_resource_adaptor.hpp): refuses
// allocations beyond a byte limit.
#include "resources/adaptor.hpp"

#include <rmm/mr/limiting_resource_adaptor.hpp>

namespace nbrmm {
namespace {

using limiting_adaptor = rmm::mr::limiting_resource_adaptor;

struct LimitingResourceAdaptor : UpstreamResourceAdaptor {};

}  // namespace

void bind_limiting_resource_adaptor(nb::module_& m)
{
  resource_class<LimitingResourceAdaptor, UpstreamResourceAdaptor>(
    m, "LimitingResourceAdaptor", R"doc(
Adaptor that refuses allocations that would take its total beyond ``allocation_limit``.

Each allocation counts its size rounded up to a multiple of 256 bytes. A request over
the limit raises ``nbrmm.OutOfMemory`` (a ``MemoryError``) and changes nothing; so does
a request that the upstream fails.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource that serves the allocations; created on the current device.
allocation_limit : int or str
    The most bytes that may be allocated at once through this adaptor.)doc")
    .def(
      "__init__",
      [](LimitingResourceAdaptor* self, nb::handle upstream_mr, nb::handle allocation_limit) {
        init_guard const guard{self};
        std::size_t const limit = parse_size(allocation_limit, "allocation_limit");
        init_adaptor(self, upstream_mr, [&](device_resource up) {
          return limiting_adaptor{std::move(up), limit};
        });
      },
      nb::arg("upstream_mr"), nb::arg("allocation_limit"),
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, "
              "allocation_limit: int | str) -> None"))
    .def(
      "get_allocated_bytes",
      method<LimitingResourceAdaptor>("get_allocated_bytes", [](LimitingResourceAdaptor& self) {
        return resource_as<limiting_adaptor>(self).get_allocated_bytes();
      }),
      "Bytes currently allocated through this adaptor (each allocation rounded up to 256).")
    .def(
      "get_allocation_limit",
      method<LimitingResourceAdaptor>("get_allocation_limit", [](LimitingResourceAdaptor& self) {
        return resource_as<limiting_adaptor>(self).get_allocation_limit();
      }),
      "The allocation limit in bytes.");
  register_adaptor_wrapper<LimitingResourceAdaptor, limiting_adaptor>();
}

}  // namespace nbrmm
