// nbrmm.mr.TrackingResourceAdaptor (rmm/mr/tracking_resource_adaptor.hpp): records every
// outstanding allocation, optionally with the C++ stack that made it.
#include "resources/adaptor.hpp"

#include <rmm/mr/tracking_resource_adaptor.hpp>

namespace nbrmm {
namespace {

using tracking_adaptor = rmm::mr::tracking_resource_adaptor;

struct TrackingResourceAdaptor : UpstreamResourceAdaptor {};

}  // namespace

void bind_tracking_resource_adaptor(nb::module_& m)
{
  resource_class<TrackingResourceAdaptor, UpstreamResourceAdaptor>(
    m, "TrackingResourceAdaptor", R"doc(
Adaptor that records every outstanding allocation (pointer and size), to find leaks.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource that serves the allocations; created on the current device.
capture_stacks : bool, optional
    Also record the C++ call stack of each allocation (slow).)doc")
    .def(
      "__init__",
      [](TrackingResourceAdaptor* self, nb::handle upstream_mr, nb::handle capture_stacks) {
        init_guard const guard{self};
        bool const stacks = bool_arg(capture_stacks, "capture_stacks");
        init_adaptor(self, upstream_mr, [&](device_resource up) {
          return tracking_adaptor{std::move(up), stacks};
        });
      },
      nb::arg("upstream_mr"), nb::arg("capture_stacks") = false,
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, "
              "capture_stacks: bool = False) -> None"))
    .def(
      "get_allocated_bytes",
      method<TrackingResourceAdaptor>("get_allocated_bytes", [](TrackingResourceAdaptor& self) {
        return resource_as<tracking_adaptor>(self).get_allocated_bytes();
      }),
      "Bytes in the allocations that are outstanding.")
    .def(
      "get_outstanding_allocations_str",
      method<TrackingResourceAdaptor>("get_outstanding_allocations_str", [](TrackingResourceAdaptor& self) {
        return resource_as<tracking_adaptor>(self).get_outstanding_allocations_str();
      }),
      R"doc(A text report of the outstanding allocations: pointer, size and, with
``capture_stacks``, the stack of each.)doc")
    .def(
      "log_outstanding_allocations",
      method<TrackingResourceAdaptor>("log_outstanding_allocations", [](TrackingResourceAdaptor& self) {
        auto& tracking = resource_as<tracking_adaptor>(self);
        gil_release release;
        tracking.log_outstanding_allocations();
      }),
      R"doc(Write :meth:`get_outstanding_allocations_str` to librmm's debug log (at debug
level, so only when that level is enabled).)doc");
  register_adaptor_wrapper<TrackingResourceAdaptor, tracking_adaptor>();
}

}  // namespace nbrmm
