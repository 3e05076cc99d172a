// The resource base classes (rmm/resource_ref.hpp): nbrmm.mr.DeviceMemoryResource, which
// owns a type-erased librmm resource and can be subclassed in Python, and
// UpstreamResourceAdaptor. Also the raw allocate/deallocate of the base class, whose
// outstanding allocations nbrmm records so that no pointer is freed twice or to the wrong
// resource.
#include "core/args.hpp"
#include "bindings.hpp"
#include "resources/waiting_frees.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "resources/resource.hpp"
#include "core/rmm_compat.hpp"
#include "streams/stream.hpp"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <string>
#include <typeinfo>
#include <vector>

namespace nbrmm {
namespace {

// ------------------------------------------------------------------------------------
// Raw allocations (DeviceMemoryResource.allocate / deallocate)
// ------------------------------------------------------------------------------------

/// One outstanding allocation made through DeviceMemoryResource.allocate.
struct raw_allocation {
  PyObject* owner;  ///< the resource object that allocated it (strong; null after exit)
  /// Its resource: a share of the object's shared copy (DeviceMemoryResource::shared), so
  /// that the memory can go back after the object was cleared or released at exit.
  std::shared_ptr<device_resource> res;
  block b;
  std::size_t bytes;
  std::size_t alignment;
  int device;
};

#if defined(Py_GIL_DISABLED)
std::mutex& raw_mutex()
{
  static auto* m = new std::mutex;  // never destroyed: frees may come at exit
  return *m;
}
#endif

/// Held while raw_allocations() is used. Every use holds the GIL and runs no Python code
/// until the scope ends (nothing in it may release the GIL or call back into nbrmm),
/// which serialises them where the GIL is enabled; free-threaded builds lock a mutex.
class raw_lock {
#if defined(Py_GIL_DISABLED)
  std::lock_guard<std::mutex> lock_{raw_mutex()};
#endif
};

/// The outstanding raw allocations by address. Used under raw_lock; never destroyed
/// (frees may come at exit).
std::unordered_map<std::uintptr_t, raw_allocation>& raw_allocations()
{
  static auto* table = new std::unordered_map<std::uintptr_t, raw_allocation>;
  return *table;
}

std::string hex(std::uintptr_t p)
{
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(p));
  return text;
}

}  // namespace

std::uintptr_t raw_allocate(nb::handle self, std::size_t n, std::size_t alignment,
                            cuda::stream_ref s)
{
  auto& r              = *nb::inst_ptr<DeviceMemoryResource>(self);
  device_resource& res = r.get();
  check_reentry(self, "allocate");
  if (n == 0) { return 0; }
  waiting_frees::perform();
  block b;
  try {
    librmm_call call;
    b = allocate_block(res, s, n, alignment, r.device);
  } catch (rmm::out_of_memory const&) {
    raise_out_of_memory(self, n, r.device, s.get());
  }
  auto const key = reinterpret_cast<std::uintptr_t>(b.data);
  // A record at the same address is stale: its memory was given back to the underlying
  // allocator behind nbrmm's back (which handed it out again). It gives way.
  raw_allocation stale{nullptr, nullptr, block{}, 0, 0, -1};
  try {
    raw_allocation record{self.ptr(), r.shared(), b, n, alignment, r.device};
    raw_lock const lock;
    auto [it, placed] = raw_allocations().try_emplace(key, std::move(record));
    if (!placed) { stale = std::exchange(it->second, std::move(record)); }
  } catch (...) {
    {
      gil_release release;
      free_block(res, s, b, r.device);
    }
    throw;
  }
  Py_INCREF(self.ptr());
  Py_XDECREF(stale.owner);
  return key;
}

void raw_deallocate(nb::handle self, std::uintptr_t ptr, std::size_t n, std::size_t alignment,
                    cuda::stream_ref s)
{
  auto& r = *nb::inst_ptr<DeviceMemoryResource>(self);
  if (ptr == 0 && n == 0) { return; }
  check_reentry(self, "deallocate");
  waiting_frees::perform();
  raw_allocation a{};
  nb::object other;  // the resource object that allocated `ptr`, when it is another's
  bool foreign = false;
  {
    // No Python code runs in this scope (see raw_lock): the error naming another
    // resource's class is worded after it.
    raw_lock const lock;
    auto& table   = raw_allocations();
    auto const it = table.find(ptr);
    if (it == table.end()) {
      throw nb::value_error(("ptr: " + hex(ptr) +
                             " is not an outstanding allocation of allocate() (never "
                             "allocated, or already freed)")
                              .c_str());
    }
    raw_allocation const& found = it->second;
    foreign = found.owner != self.ptr() &&
              !(r.res.has_value() && unwrap(*found.res) == unwrap(r.res));
    if (foreign) {
      other = nb::borrow(found.owner);  // (null after exit)
    } else if (found.bytes != n) {
      throw nb::value_error(("nbytes: " + hex(ptr) + " was allocated with " +
                             std::to_string(found.bytes) + " bytes, not " + std::to_string(n))
                              .c_str());
    } else if (found.alignment != alignment) {
      throw nb::value_error(("alignment: " + hex(ptr) + " was allocated with alignment " +
                             std::to_string(found.alignment) + ", not " +
                             std::to_string(alignment))
                              .c_str());
    } else {
      a = std::move(it->second);
      table.erase(it);
    }
  }
  if (foreign) {
    throw nb::value_error(("ptr: " + hex(ptr) + " was allocated by another resource" +
                           (other.is_valid()
                              ? std::string{" ("} + utf8(nb::type_name(other.type())) + ")"
                              : std::string{}))
                            .c_str());
  }
  {
    gil_release release;
    free_block(*a.res, s, a.b, a.device);
  }
  Py_XDECREF(a.owner);
}

namespace {

/// The number of outstanding raw allocations of `self` (for tests).
std::size_t raw_outstanding(nb::handle self)
{
  raw_lock const lock;
  std::size_t count = 0;
  for (auto const& [ptr, a] : raw_allocations()) {
    if (a.owner == self.ptr()) { ++count; }
  }
  return count;
}

}  // namespace

void release_raw_allocation_owners() noexcept
{
  std::vector<PyObject*> owners;
  {
    raw_lock const lock;
    for (auto& [ptr, a] : raw_allocations()) {
      if (a.owner == nullptr) { continue; }
      try {
        owners.push_back(a.owner);
      } catch (...) {
        continue;  // without memory to list it, the reference stays
      }
      a.owner = nullptr;
    }
  }
  for (PyObject* o : owners) { Py_DECREF(o); }
}

namespace {

// ------------------------------------------------------------------------------------
// The base classes
// ------------------------------------------------------------------------------------

bool overrides(nb::handle self, char const* name, nb::handle base)
{
  nb::object mine   = nb::getattr(self.type(), name, nb::none());
  nb::object theirs = nb::getattr(base, name, nb::none());
  return !mine.is_none() && !mine.is(theirs);
}

std::size_t resource_identity(nb::handle self)
{
  auto& r = *nb::inst_ptr<DeviceMemoryResource>(self);
  if (!r.res.has_value()) { return 0; }
  if (auto const* st = python_state(r.res)) { return std::hash<void const*>{}(st); }
  // Equal resources must hash alike; the type is the finest key valid for all of them.
  return std::hash<std::string>{}(utf8(nb::type_name(self.type())));
}

}  // namespace

void bind_memory_resource(nb::module_& m)
{


  auto base = nb::class_<DeviceMemoryResource>(m, "DeviceMemoryResource",
                                               nb::type_slots(resource_type_slots),
                                               nb::is_weak_referenceable(), R"doc(
Base class of every nbrmm memory resource.

An nbrmm resource owns a librmm resource (``cuda::mr::any_resource``). C++ copies of it
(inside buffers, adaptors, the per-device map or another extension) share its state and
keep it alive on their own.

Subclass it in Python and implement ``allocate(nbytes, stream)`` and
``deallocate(ptr, nbytes, stream)`` to write a resource in Python; such a resource can
be the upstream of any adaptor, a buffer's ``mr`` and the current device resource.
``allocate`` must return a pointer aligned to 256 bytes (as every librmm resource does),
and raise ``MemoryError`` when it cannot allocate.)doc");
  set_resource_type(reinterpret_cast<PyTypeObject*>(base.ptr()));

  base
    .def(
      "__init__",
      [](DeviceMemoryResource* self) {
        init_guard const guard{self};
        nb::handle py_self = nb::find(self);
        nb::handle cls     = nb::type<DeviceMemoryResource>();
        if (py_self.type().is(cls)) {
          throw nb::type_error(
            "DeviceMemoryResource is abstract: use a concrete resource, or subclass it and "
            "implement allocate() and deallocate()");
        }
        if (nb::type_info(py_self.type()) != typeid(DeviceMemoryResource)) {
          // A Python subclass of a concrete resource: its C++ object is that class's, which
          // only that class's __init__ makes.
          std::string base = "its nbrmm base class";
          for (nb::handle t : py_self.type().attr("__mro__")) {
            if (utf8(t.attr("__module__")).rfind("nbrmm.", 0) == 0) {
              base = utf8(t.attr("__module__")) + "." + utf8(t.attr("__qualname__"));
              break;
            }
          }
          throw nb::type_error(("DeviceMemoryResource.__init__() initializes Python subclasses "
                                "of DeviceMemoryResource itself; " +
                                utf8(nb::type_name(py_self.type())) + " derives from " + base +
                                ": call that class's __init__ (super().__init__(...))")
                                 .c_str());
        }
        if (!overrides(py_self, "allocate", cls) || !overrides(py_self, "deallocate", cls)) {
          throw nb::type_error(("a Python subclass of DeviceMemoryResource must implement "
                                "allocate() and deallocate(); " +
                                utf8(nb::type_name(py_self.type())) +
                                " does not")
                                 .c_str());
        }
        std::string const name = utf8(nb::type_name(py_self.type())) + ".allocate()";
        python_resource py{py_self.attr("allocate"), py_self.attr("deallocate"), name};
        new (self) DeviceMemoryResource{};
        self->device       = current_device();
        self->callback_key = py.state_ptr();
        self->calls_python = true;
        self->res          = device_resource{std::move(py)};
      },
      "Initialise a Python subclass (which must implement allocate and deallocate).")
    .def(
      "allocate",
      [](nb::handle self, nb::handle nbytes, nb::handle stream, nb::handle alignment) {
        resource_arg(self, "self");  // a method called through its class with another object
        std::size_t const a = alignment_arg(alignment);
        std::size_t const n = request_size(nbytes, "nbytes", a);
        return raw_allocate(self, n, a, stream_arg(stream, "stream"));
      },
      nb::arg("nbytes"), nb::arg("stream").none() = default_stream_arg(), nb::kw_only(),
      nb::arg("alignment") = default_alignment,
      nb::sig("def allocate(self, nbytes: int, stream: Stream = ...) -> int"),
      R"doc(Allocate ``nbytes`` bytes, ordered on ``stream``.

Parameters
----------
nbytes : int or str
    Size in bytes (``"1MiB"`` style strings accepted).
stream : Stream or object with ``__cuda_stream__``, optional
    The stream the allocation is ordered on.
alignment : int, optional
    Required alignment (a power of two up to ``2**40``), 256 by default. Any alignment is
    honoured, whatever the resource (larger ones by allocating a larger block).

Returns
-------
int
    The device pointer (0 for 0 bytes). Free it with :meth:`deallocate` with the same
    size and alignment. nbrmm records the allocation (and keeps this resource alive)
    until then.

Raises
------
MemoryError
    If the resource cannot satisfy the request (``nbrmm.OutOfMemory`` when out of memory).
RuntimeError
    If called from a Python callback of a resource this one depends on.)doc")
    .def(
      "deallocate",
      [](nb::handle self, nb::handle ptr, nb::handle nbytes, nb::handle stream,
         nb::handle alignment) {
        resource_arg(self, "self");  // a method called through its class with another object
        std::uintptr_t const p = uint_arg(ptr, "ptr");
        std::size_t const a    = alignment_arg(alignment);
        std::size_t const n    = parse_size(nbytes, "nbytes");
        raw_deallocate(self, p, n, a, stream_arg(stream, "stream"));
      },
      nb::arg("ptr").none(), nb::arg("nbytes"), nb::arg("stream").none() = default_stream_arg(),
      nb::kw_only(),
      nb::arg("alignment") = default_alignment,
      nb::sig("def deallocate(self, ptr: int, nbytes: int, stream: Stream = ...) -> None"),
      R"doc(Free memory returned by :meth:`allocate`.

Parameters
----------
ptr : int
    The pointer returned by :meth:`allocate`.
nbytes : int or str
    The size passed to :meth:`allocate`.
stream : Stream or object with ``__cuda_stream__``, optional
    The stream the deallocation is ordered on.
alignment : int, optional
    The alignment passed to :meth:`allocate`.

Raises
------
ValueError
    If ``ptr`` is not an outstanding allocation of this resource (never allocated,
    already freed, or allocated by another resource), or ``nbytes`` or ``alignment``
    differ from the allocation's.)doc")
    .def_prop_ro(
      "device",
      getter<DeviceMemoryResource>("device", [](DeviceMemoryResource const& self) { return self.device; }),
      "The CUDA device that was current when the resource was created (-1 without a GPU).")
    .def_prop_ro(
      "is_device_accessible",
      getter<DeviceMemoryResource>("is_device_accessible", [](DeviceMemoryResource const&) { return true; }),
      "Whether the memory can be used by the device (always True).")
    .def_prop_ro(
      "is_host_accessible",
      getter<DeviceMemoryResource>("is_host_accessible",
                                   [](DeviceMemoryResource const& self) { return self.host_accessible; }),
      "Whether the memory can be read and written by the host.")
    .def(
      "__eq__",
      [](nb::handle_t<DeviceMemoryResource> py_self, nb::handle other) -> nb::object {
        // (an uninitialized object is no resource: == falls back to identity)
        if (!nb::inst_ready(py_self) || !is_resource(other)) {
          return nb::borrow(Py_NotImplemented);
        }
        auto& self = *nb::inst_ptr<DeviceMemoryResource>(py_self);
        auto& o = *nb::inst_ptr<DeviceMemoryResource>(other);
        if (&o == &self) { return nb::bool_(true); }
        if (!self.res.has_value() || !o.res.has_value()) { return nb::bool_(false); }
        return nb::bool_(unwrap(self.res) == unwrap(o.res));
      },
      nb::is_operator(), nb::sig("def __eq__(self, other: object, /) -> bool"),
      "Whether both objects use the same underlying resource.")
    .def("__hash__",
         [](nb::handle_t<DeviceMemoryResource> self) {
           (void)initialized<DeviceMemoryResource>(self, "__hash__");
           return resource_identity(self);
         })
    .def(
      "__nbrmm_resource__",
      [](nb::handle_t<DeviceMemoryResource> self) {
        auto& r = initialized<DeviceMemoryResource>(self, "__nbrmm_resource__");
        // A resource C++ made goes back exactly as C++ made it (C++ can resource_cast it).
        // Any other copy carries this object, so a buffer that C++ allocates from it and
        // hands back to Python reports this very object as its `mr`.
        PyObject* cap = resource_capsule(
          r.from_cpp ? r.get() : device_resource{python_owned_resource{r.get(), self}});
        if (cap == nullptr) { throw nb::python_error(); }
        return nb::steal(cap);
      },
      nb::sig("def __nbrmm_resource__(self) -> typing_extensions.CapsuleType"),
      R"doc(An owning C++ copy of the resource, for C++ extensions (capsule protocol).

Returns
-------
PyCapsule
    Named ``"nbrmm.device_resource:<librmm major>.<minor>"``, holding a heap-allocated
    ``cuda::mr::any_resource<cuda::mr::device_accessible>`` that the capsule owns. Use
    ``nbrmm::resource_from_python`` from ``<nbrmm/nbrmm.hpp>`` rather than calling this.)doc")
    .def_static(
      "_from_capsule",
      [](nb::handle capsule, bool host_accessible) {
        auto const* res = static_cast<device_resource const*>(
          PyCapsule_IsValid(capsule.ptr(), NBRMM_RESOURCE_CAPSULE) != 0
            ? PyCapsule_GetPointer(capsule.ptr(), NBRMM_RESOURCE_CAPSULE)
            : nullptr);
        if (res == nullptr) {
          throw nb::type_error("capsule: expected a capsule named \"" NBRMM_RESOURCE_CAPSULE
                               "\" (see <nbrmm/nbrmm.hpp>)");
        }
        nb::object obj = wrap_resource(*res, current_device());
        // A generic wrapper knows nothing of the memory: the extension says.
        if (obj.type().is(nb::type<DeviceMemoryResource>())) {
          auto& r = *nb::inst_ptr<DeviceMemoryResource>(obj);
          if (r.from_cpp) { r.host_accessible = host_accessible; }
        }
        return obj;
      },
      nb::arg("capsule"), nb::arg("host_accessible") = false,
      nb::sig("def _from_capsule(capsule: typing_extensions.CapsuleType, "
              "host_accessible: bool = False) -> DeviceMemoryResource"),
      R"doc(The resource object for a C++ resource (capsule protocol).

Use ``nbrmm::resource_to_python`` from ``<nbrmm/nbrmm.hpp>`` rather than calling this.

Parameters
----------
capsule : PyCapsule
    Named ``"nbrmm.device_resource:<librmm major>.<minor>"`` (a copy is taken).
host_accessible : bool, optional
    Whether memory from a resource of a type nbrmm does not know is host-accessible.

Returns
-------
DeviceMemoryResource
    The Python object the resource came from, an instance of the concrete class when
    nbrmm knows the librmm type, or a generic ``DeviceMemoryResource``.)doc")
    .def("__repr__", [](nb::handle_t<DeviceMemoryResource> self) {
      std::string text{"<"};
      text.append(utf8(nb::type_name(self.type())));
      if (!nb::inst_ready(self)) { return text.append(" (not initialized)>"); }
      auto& r = *nb::inst_ptr<DeviceMemoryResource>(self);
      text
        .append(" device=")
        .append(std::to_string(r.device))
        .append(">");
      return text;
    });

  resource_class<UpstreamResourceAdaptor>(m, "UpstreamResourceAdaptor", R"doc(
Base class of resources that adapt an upstream resource.

The adaptor owns a C++ copy of its upstream (so C++ keeps the upstream alive) and also
keeps the Python upstream object, returned as ``upstream_mr``.)doc")
    .def(
      "__init__",
      [](UpstreamResourceAdaptor*, nb::handle upstream_mr) {
        resource_arg(upstream_mr, "upstream_mr");  // (a wrong argument is named first)
        throw nb::type_error("UpstreamResourceAdaptor is the base class of nbrmm's adaptors "
                             "and cannot be made itself: use a concrete adaptor (e.g. "
                             "StatisticsResourceAdaptor), or subclass DeviceMemoryResource "
                             "and implement allocate() and deallocate()");
      },
      nb::arg("upstream_mr"),
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource) -> None"),
      "Not to be called: the class is the base of the concrete adaptors (raises TypeError).")
    .def_prop_ro(
      "upstream_mr",
      getter<UpstreamResourceAdaptor>("upstream_mr",
                                      [](UpstreamResourceAdaptor const& self) {
                                        return self.upstream.is_valid() ? self.upstream : nb::none();
                                      }),
      nb::for_getter(nb::sig("def upstream_mr(self, /) -> DeviceMemoryResource | None")),
      "The upstream resource object this adaptor was created with.")
    .def(
      "get_upstream",
      method<UpstreamResourceAdaptor>("get_upstream", [](UpstreamResourceAdaptor const& self) {
        return self.upstream.is_valid() ? self.upstream : nb::none();
      }),
      nb::sig("def get_upstream(self) -> DeviceMemoryResource | None"),
      "The upstream resource object this adaptor was created with.");

  m.def("_perform_waiting_frees", &waiting_frees::perform,
        "Perform the frees that waited for a Python callback to return (run at interpreter "
        "exit).");
  m.def("_forget_waiting_frees", &waiting_frees::forget,
        "Drop the waiting frees without performing them (run in a forked child).");
  m.def("_begin_exit", &exit_guard::begin,
        "Stop other threads from taking the GIL inside nbrmm (run at interpreter exit).");
  m.def(
    "_abandon_thread_objects", []() { nb::set_leak_warnings(false); },
    "Turn off nanobind's leak report: threads still running at exit keep their objects.");
  m.def("_raw_outstanding", &raw_outstanding, nb::arg("mr"),
        "The number of allocations made with ``mr.allocate`` and not yet deallocated.");
}

}  // namespace nbrmm
