// nbrmm.mr.FailureCallbackResourceAdaptor (rmm/mr/failure_callback_resource_adaptor.hpp):
// calls a Python function when the upstream runs out of memory, and retries while it
// returns True.
//
// The callable is owned by the C++ resource (a py_owned captured in librmm's
// std::function), so any C++ copy of the adaptor can call it safely. The adaptor is kept
// in a holder_resource beside that reference, which tells whether the Python object is
// the only owner: only then does the garbage collector see the callable through it.
#include "adaptor.hpp"

#include <rmm/mr/failure_callback_resource_adaptor.hpp>

#include <memory>
#include <string>

namespace nbrmm {
namespace {

using failure_adaptor = rmm::mr::failure_callback_resource_adaptor<>;
using callback_ref    = std::shared_ptr<py_owned>;
using failure_holder  = holder_resource<failure_adaptor, callback_ref>;

struct FailureCallbackResourceAdaptor : UpstreamResourceAdaptor {};

/// Calls the Python callback with the size that failed; any exception propagates to the
/// allocation that failed (librmm only catches out-of-memory errors).
bool call_back(py_owned const& fn, std::size_t bytes)
{
  if (!nb::is_alive()) { return false; }
  nb::gil_scoped_acquire gil;
  nb::error_scope pending;  // allocation may happen while an exception propagates
  nb::object result = fn.get()(bytes);
  int const truth   = PyObject_IsTrue(result.ptr());
  if (truth < 0) { throw nb::python_error(); }
  return truth == 1;
}

failure_holder const* holder_of(DeviceMemoryResource const& r)
{
  return r.res.has_value() ? cuda::mr::resource_cast<failure_holder>(&r.res) : nullptr;
}

/// The callable, when this object's resource is its only owner (no C++ copy elsewhere).
PyObject* exclusive_callback(DeviceMemoryResource const& r)
{
  auto const* holder = holder_of(r);
  return (holder != nullptr && holder->use_count() == 1) ? holder->extra()->get().ptr() : nullptr;
}

template <class Fn>
Fn base_slot(int slot)
{
  for (PyType_Slot const* s = resource_type_slots; s->slot != 0; ++s) {
    if (s->slot == slot) { return reinterpret_cast<Fn>(s->pfunc); }
  }
  return nullptr;
}

int failure_traverse(PyObject* self, visitproc visit, void* arg)
{
  static auto const base = base_slot<traverseproc>(Py_tp_traverse);
  if (int const rc = base(self, visit, arg); rc != 0) { return rc; }
  if (!nb::inst_ready(self)) { return 0; }
  Py_VISIT(exclusive_callback(*nb::inst_ptr<DeviceMemoryResource>(self)));
  return 0;
}

int failure_clear(PyObject* self)
{
  static auto const base = base_slot<inquiry>(Py_tp_clear);
  base(self);
  if (nb::inst_ready(self)) {
    auto* r = nb::inst_ptr<DeviceMemoryResource>(self);
    if (exclusive_callback(*r) != nullptr) { r->res = device_resource{}; }
  }
  return 0;
}

PyType_Slot failure_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(failure_traverse)},
                               {Py_tp_clear, reinterpret_cast<void*>(failure_clear)},
                               {0, nullptr}};

}  // namespace

void bind_failure_callback_resource_adaptor(nb::module_& m)
{
  nb::class_<FailureCallbackResourceAdaptor, UpstreamResourceAdaptor>(
    m, "FailureCallbackResourceAdaptor", nb::type_slots(failure_slots),
    nb::is_weak_referenceable(), R"doc(
Adaptor that calls ``callback(nbytes)`` when the upstream runs out of memory.

When the upstream raises ``nbrmm.OutOfMemory`` for a request of ``nbytes`` bytes, the
adaptor calls ``callback(nbytes)`` (with the GIL). If it returns True, the allocation
is tried again (and the callback called again if it fails again); if it returns False,
the ``OutOfMemory`` error reaches the caller. An exception raised by the callback
reaches the caller instead. Other errors of the upstream are not retried.

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
        if (!PyCallable_Check(callback.ptr())) {
          throw nb::type_error(("callback: expected a callable, got " +
                                std::string{nb::type_name(callback.type()).c_str()})
                                 .c_str());
        }
        init_adaptor(self, upstream_mr, [&](device_resource up) {
          auto fn = std::make_shared<py_owned>(callback);
          return failure_holder{fn, std::move(up),
                                [fn](std::size_t bytes, void*) { return call_back(*fn, bytes); },
                                nullptr};
        });
      },
      nb::arg("upstream_mr"), nb::arg("callback"),
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, "
              "callback: collections.abc.Callable[[int], bool]) -> None"))
    .def_prop_ro(
      "callback",
      [](FailureCallbackResourceAdaptor& self) -> nb::object {
        auto const* holder = holder_of(self);
        if (holder == nullptr) { return nb::none(); }
        return nb::borrow(holder->extra()->get());
      },
      nb::for_getter(nb::sig("def callback(self, /) -> collections.abc.Callable[[int], bool] | None")),
      "The callback (None for an adaptor made by C++ code).");

  register_adaptor_wrapper<FailureCallbackResourceAdaptor, failure_holder>();
  register_adaptor_wrapper<FailureCallbackResourceAdaptor, failure_adaptor>();
}

}  // namespace nbrmm
