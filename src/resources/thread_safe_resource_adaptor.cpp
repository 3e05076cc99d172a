// nbrmm.mr.ThreadSafeResourceAdaptor (rmm/mr/thread_safe_resource_adaptor.hpp): one
// mutex around every call to the upstream.
#include "resources/adaptor.hpp"

#include <rmm/mr/thread_safe_resource_adaptor.hpp>

namespace nbrmm {
namespace {

using thread_safe_adaptor = rmm::mr::thread_safe_resource_adaptor;

struct ThreadSafeResourceAdaptor : UpstreamResourceAdaptor {};

}  // namespace

void bind_thread_safe_resource_adaptor(nb::module_& m)
{
  resource_class<ThreadSafeResourceAdaptor, UpstreamResourceAdaptor>(
    m, "ThreadSafeResourceAdaptor", R"doc(
Adaptor that serializes every allocation and free with a mutex, making a resource that
is not thread-safe usable from many threads. (Not in rmm's Python API.)

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource to protect; created on the current device.)doc")
    .def(
      "__init__",
      [](ThreadSafeResourceAdaptor* self, nb::handle upstream_mr) {
        init_guard const guard{self};
        init_adaptor(self, upstream_mr,
                     [](device_resource up) { return thread_safe_adaptor{std::move(up)}; });
      },
      nb::arg("upstream_mr"),
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource) -> None"));
  register_adaptor_wrapper<ThreadSafeResourceAdaptor, thread_safe_adaptor>();
}

}  // namespace nbrmm
