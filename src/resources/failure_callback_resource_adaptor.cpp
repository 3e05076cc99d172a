// nbrmm.mr.FailureCallbackResourceAdaptor (rmm/mr/failure_callback_resource_adaptor.hpp):
// calls a Python function when the upstream runs out of memory, and retries while it
// returns True.
//
// The callable is owned by the C++ resource (a py_owned captured in librmm's
// std::function), so any C++ copy of the adaptor can call it safely. The adaptor is kept
// in a holder_resource beside that reference, which tells whether the Python object is
// the only owner: only then does the garbage collector see the callable through it.
#include "resources/adaptor.hpp"

#include <rmm/mr/failure_callback_resource_adaptor.hpp>

#include <memory>
#include <string>

namespace nbrmm {
namespace {

using failure_adaptor = rmm::mr::failure_callback_resource_adaptor<>;
using callback_ref    = std::shared_ptr<py_owned>;
using failure_holder  = holder_resource<failure_adaptor, callback_ref>;

struct FailureCallbackResourceAdaptor : UpstreamResourceAdaptor {};

/// Calls the Python callback with the size that failed (librmm calls this when the
/// upstream raised out-of-memory). An exception the callback raises travels to the caller
/// of the allocation (see errors.hpp).
bool call_back(py_owned const& fn, std::size_t bytes)
{
  gil_acquire gil;
  if (!gil.ok() || !fn.get().is_valid()) { return false; }  // exiting: no retry
  callback_scope scope{&fn};
  nb::error_scope pending;  // allocation may happen while an exception propagates
  PyObject* result = PyObject_CallFunction(fn.get().ptr(), "K", static_cast<unsigned long long>(bytes));
  if (result == nullptr) { throw_python_error(); }
  int const truth = PyObject_IsTrue(result);
  Py_DECREF(result);
  if (truth < 0) { throw_python_error(); }
  return truth == 1;
}

/// Completes the wrapper of a C++ copy of nbrmm's own adaptor: its callback's identity.
struct callback_of_holder {
  template <class Py>
  void operator()(failure_holder const& holder, Py& obj, int) const noexcept
  {
    obj.callback_key = holder.extra().get();
  }
};

failure_holder const* holder_of(DeviceMemoryResource const& r)
{
  return r.res.has_value() ? cuda::mr::resource_cast<failure_holder>(&r.res) : nullptr;
}

}  // namespace

void bind_failure_callback_resource_adaptor(nb::module_& m)
{
  resource_class<FailureCallbackResourceAdaptor, UpstreamResourceAdaptor>(
    m, "FailureCallbackResourceAdaptor", R"doc(
Adaptor that calls ``callback(nbytes)`` when the upstream runs out of memory.

When the upstream runs out of memory for a request of ``nbytes`` bytes (it raises
``nbrmm.OutOfMemory``, or a Python upstream raises ``MemoryError``), the adaptor calls
``callback(nbytes)`` (with the GIL). If it returns True, the allocation is tried again
(and the callback called again if it fails again); if it returns False, the
out-of-memory error reaches the caller. An exception raised by the callback reaches the
caller instead. Other errors of the upstream are not retried.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource that serves the allocations; created on the current device.
callback : callable
    ``callback(nbytes: int) -> bool``: free memory (e.g. spill, collect garbage) and
    return whether to retry.

Notes
-----
The callable is owned by the C++ resource and every C++ copy of it, so it stays alive
(and callable) as long as any of them, whatever Python does.)doc")
    .def(
      "__init__",
      [](FailureCallbackResourceAdaptor* self, nb::handle upstream_mr, nb::handle callback) {
        init_guard const guard{self};
        if (!PyCallable_Check(callback.ptr())) {
          throw nb::type_error(("callback: expected a callable, got " +
                                type_of(callback))
                                 .c_str());
        }
        auto fn = std::make_shared<py_owned>(callback);
        init_adaptor(self, upstream_mr, [&](device_resource up) {
          return failure_holder{fn, std::move(up),
                                [fn](std::size_t bytes, void*) { return call_back(*fn, bytes); },
                                nullptr};
        });
        // The callable is the resource's own (every copy of the adaptor shares it).
        self->callback_key = fn.get();
        self->own_refs.push_back(fn.get());
      },
      nb::arg("upstream_mr"), nb::arg("callback"),
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, "
              "callback: collections.abc.Callable[[int], bool]) -> None"))
    .def_prop_ro(
      "callback",
      getter<FailureCallbackResourceAdaptor>(
        "callback",
        [](FailureCallbackResourceAdaptor& self) -> nb::object {
          auto const* holder = holder_of(self);
          if (holder == nullptr) { return nb::none(); }
          return nb::borrow(holder->extra()->get());
        }),
      nb::for_getter(nb::sig("def callback(self, /) -> collections.abc.Callable[[int], bool] | None")),
      "The callback (None for an adaptor made by C++ code).");

  register_adaptor_wrapper<FailureCallbackResourceAdaptor, failure_holder, callback_of_holder>();
  register_adaptor_wrapper<FailureCallbackResourceAdaptor, failure_adaptor>();
}

}  // namespace nbrmm
