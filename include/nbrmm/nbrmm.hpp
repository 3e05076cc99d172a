// nbrmm's C++ API for third-party extensions (nanobind, pybind11, Cython, plain C API).
//
// Header-only; needs Python.h and librmm's headers (the librmm-cu13 26.10 wheel), nothing of
// nbrmm's binding code. These operations cross the boundary:
//
//   1. Python resource -> C++:
//        cuda::mr::any_resource<cuda::mr::device_accessible> mr =
//            nbrmm::resource_from_python(py_mr);   // py_mr: any nbrmm.mr resource, or None
//      The result is an owning copy that shares state with the Python object (pool contents,
//      statistics counters, ...). It keeps the resource (and any Python callables behind it)
//      alive on its own, so it may outlive every Python reference. None yields the current
//      device resource, read from librmm's per-device map.
//
//   2. C++ rmm::device_buffer -> Python:
//        PyObject* buf = nbrmm::buffer_to_python(std::move(device_buffer));  // new reference
//      Returns an nbrmm.Buffer that adopts the memory without copying. Its `mr` attribute is
//      the resource that will free it (the very Python object when the buffer was allocated
//      from a resource set or created in Python, otherwise an nbrmm object for the C++ one).
//
//   3. C++ resource -> Python:
//        PyObject* obj = nbrmm::resource_to_python(std::move(res), /*host_accessible=*/false);
//      Returns an nbrmm resource object for a resource made in C++ (new reference): the
//      very Python object when `res` came from Python, an instance of the concrete nbrmm
//      class when nbrmm knows the librmm type, otherwise a generic
//      nbrmm.mr.DeviceMemoryResource. Copies share state, so the object and `res` count,
//      pool and free the same memory.
//
//   4. A caching resource type of the extension's own:
//        nbrmm::register_caching_resource<my_cache>();
//      Declares that deallocate() of `my_cache` only returns a block to its own free
//      lists (as librmm's pool, arena and fixed-size resources do), so that nbrmm may let
//      the small frees of buffers that die with the GIL held wait for its next GIL release
//      (see nbrmm's design notes, "Deferred frees"). Register only types for which that
//      holds; the extension must stay loaded (CPython never unloads extension modules).
//
// A resource obtained from Python may hold Python objects (the resource object itself, or
// the callables of a Python-implemented resource). An extension that keeps one in static
// storage should drop it at interpreter exit (e.g. from an `atexit` hook); one dropped
// after the interpreter has shut down leaks those objects rather than touching Python.
//
// Every function requires the GIL, returns nullptr (or -1) with a Python exception set on
// failure (resource_from_python throws std::invalid_argument instead, since it returns by
// value), and imports `nbrmm` on first use.
//
// ABI: the capsules carry librmm's major/minor version in their names; the extension must
// be built against the same librmm (and so the same CCCL) as nbrmm.
#pragma once

#include <Python.h>

#include <rmm/device_buffer.hpp>
#include <rmm/version_config.hpp>

#include <cuda/memory_resource>

#include <stdexcept>
#include <string>
#include <utility>

#define NBRMM_STRINGIFY_(x) #x
#define NBRMM_STRINGIFY(x) NBRMM_STRINGIFY_(x)

/// Capsule name of an owned `cuda::mr::any_resource<cuda::mr::device_accessible>*`.
#define NBRMM_RESOURCE_CAPSULE \
  "nbrmm.device_resource:" NBRMM_STRINGIFY(RMM_VERSION_MAJOR) "." NBRMM_STRINGIFY(RMM_VERSION_MINOR)
/// Capsule name of a `nbrmm::caching_predicate` (a function pointer, not owned).
#define NBRMM_CACHING_CAPSULE \
  "nbrmm.caching_predicate:" NBRMM_STRINGIFY(RMM_VERSION_MAJOR) "." NBRMM_STRINGIFY(RMM_VERSION_MINOR)
/// Capsule name of an owned `rmm::device_buffer*` handed to nbrmm.
#define NBRMM_BUFFER_CAPSULE \
  "nbrmm.device_buffer:" NBRMM_STRINGIFY(RMM_VERSION_MAJOR) "." NBRMM_STRINGIFY(RMM_VERSION_MINOR)

namespace nbrmm {

/// The owning resource handle librmm 26.10 uses everywhere.
using device_resource = cuda::mr::any_resource<cuda::mr::device_accessible>;

/// Recognises a caching resource type (see register_caching_resource).
using caching_predicate = bool (*)(device_resource const& res) noexcept;

namespace detail {

inline void delete_resource_capsule(PyObject* capsule)
{
  delete static_cast<device_resource*>(PyCapsule_GetPointer(capsule, NBRMM_RESOURCE_CAPSULE));
}

inline void delete_buffer_capsule(PyObject* capsule)
{
  delete static_cast<rmm::device_buffer*>(PyCapsule_GetPointer(capsule, NBRMM_BUFFER_CAPSULE));
}

inline std::string fetch_error()
{
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  std::string text = "unknown error";
  if (value != nullptr) {
    if (PyObject* s = PyObject_Str(value)) {
      if (char const* c = PyUnicode_AsUTF8(s)) { text = c; }
      Py_DECREF(s);
    }
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return text;
}

}  // namespace detail

/// Wraps a copy of `res` in the capsule that nbrmm exchanges (new reference).
inline PyObject* resource_capsule(device_resource res)
{
  auto* owned = new device_resource(std::move(res));
  PyObject* cap = PyCapsule_New(owned, NBRMM_RESOURCE_CAPSULE, &detail::delete_resource_capsule);
  if (cap == nullptr) { delete owned; }
  return cap;
}

/// An owning copy of the resource behind an nbrmm resource object (None: the current
/// device resource). Throws std::invalid_argument (with the Python error text) when `obj`
/// is not an nbrmm resource.
inline device_resource resource_from_python(PyObject* obj)
{
  PyObject* capsule = nullptr;
  if (obj == Py_None) {
    PyObject* mod = PyImport_ImportModule("nbrmm.mr");
    if (mod == nullptr) { throw std::invalid_argument(detail::fetch_error()); }
    PyObject* current = PyObject_CallMethod(mod, "get_current_device_resource", nullptr);
    Py_DECREF(mod);
    if (current == nullptr) { throw std::invalid_argument(detail::fetch_error()); }
    capsule = PyObject_CallMethod(current, "__nbrmm_resource__", nullptr);
    Py_DECREF(current);
  } else {
    capsule = PyObject_CallMethod(obj, "__nbrmm_resource__", nullptr);
  }
  if (capsule == nullptr) {
    throw std::invalid_argument("expected an nbrmm memory resource: " + detail::fetch_error());
  }
  auto* res = static_cast<device_resource*>(PyCapsule_GetPointer(capsule, NBRMM_RESOURCE_CAPSULE));
  if (res == nullptr) {
    Py_DECREF(capsule);
    throw std::invalid_argument("nbrmm resource capsule of another librmm version: " +
                                detail::fetch_error());
  }
  device_resource copy{*res};
  Py_DECREF(capsule);
  return copy;
}

namespace detail {

/// Calls `module.owner.method(*args)` ("O"-style format) and returns a new reference, or
/// nullptr with a Python exception set.
inline PyObject* call_nbrmm(char const* module, char const* owner, char const* method,
                            PyObject* arg, PyObject* flag)
{
  PyObject* mod = PyImport_ImportModule(module);
  if (mod == nullptr) { return nullptr; }
  PyObject* target = owner != nullptr ? PyObject_GetAttrString(mod, owner) : mod;
  if (owner != nullptr) { Py_DECREF(mod); }
  if (target == nullptr) { return nullptr; }
  PyObject* result = flag != nullptr ? PyObject_CallMethod(target, method, "OO", arg, flag)
                                     : PyObject_CallMethod(target, method, "O", arg);
  Py_DECREF(target);
  return result;
}

}  // namespace detail

/// An nbrmm resource object for `res` (new reference; see 3. at the top). Memory from a
/// resource of a type nbrmm does not know counts as host-accessible (exportable through
/// the buffer protocol) only when `host_accessible` says so. Returns nullptr with a Python
/// exception set on failure.
inline PyObject* resource_to_python(device_resource res, bool host_accessible = false)
{
  PyObject* cap = resource_capsule(std::move(res));
  if (cap == nullptr) { return nullptr; }
  PyObject* result = detail::call_nbrmm("nbrmm.mr", "DeviceMemoryResource", "_from_capsule",
                                        cap, host_accessible ? Py_True : Py_False);
  Py_DECREF(cap);
  return result;
}

/// Registers `predicate` as recognising a caching resource type (see 4. at the top).
/// Returns 0, or -1 with a Python exception set.
inline int register_caching_predicate(caching_predicate predicate)
{
  PyObject* cap =
    PyCapsule_New(reinterpret_cast<void*>(predicate), NBRMM_CACHING_CAPSULE, nullptr);
  if (cap == nullptr) { return -1; }
  PyObject* result =
    detail::call_nbrmm("nbrmm._nbrmm", nullptr, "_register_caching_resource", cap, nullptr);
  Py_DECREF(cap);
  if (result == nullptr) { return -1; }
  Py_DECREF(result);
  return 0;
}

/// Registers the resource type `T` as a caching resource (see 4. at the top). Returns 0,
/// or -1 with a Python exception set.
template <class T>
int register_caching_resource()
{
  return register_caching_predicate([](device_resource const& res) noexcept {
    return cuda::mr::resource_cast<T>(&res) != nullptr;
  });
}

/// Hands `buf` to Python as an nbrmm.Buffer (new reference), without copying the memory.
/// Returns nullptr with a Python exception set on failure (the memory is then freed).
inline PyObject* buffer_to_python(rmm::device_buffer&& buf)
{
  auto* owned = new rmm::device_buffer(std::move(buf));
  PyObject* cap = PyCapsule_New(owned, NBRMM_BUFFER_CAPSULE, &detail::delete_buffer_capsule);
  if (cap == nullptr) {
    delete owned;
    return nullptr;
  }
  PyObject* mod = PyImport_ImportModule("nbrmm");
  if (mod == nullptr) {
    Py_DECREF(cap);
    return nullptr;
  }
  PyObject* cls = PyObject_GetAttrString(mod, "Buffer");
  Py_DECREF(mod);
  if (cls == nullptr) {
    Py_DECREF(cap);
    return nullptr;
  }
  PyObject* result = PyObject_CallMethod(cls, "_from_capsule", "O", cap);
  Py_DECREF(cls);
  Py_DECREF(cap);
  return result;
}

}  // namespace nbrmm
