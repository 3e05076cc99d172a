// nbrmm's C++ API for third-party extensions (nanobind, pybind11, Cython, plain C API).
//
// Header-only; needs Python.h and librmm's headers (the librmm-cu13 26.10 wheel), nothing of
// nbrmm's binding code. Two operations cross the boundary:
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
// A resource obtained from Python may hold Python objects (the resource object itself, or
// the callables of a Python-implemented resource). An extension that keeps one in static
// storage should drop it at interpreter exit (e.g. from an `atexit` hook); one dropped
// after the interpreter has shut down leaks those objects rather than touching Python.
//
// Both functions require the GIL, return nullptr with a Python exception set on failure
// (resource_from_python throws std::invalid_argument instead, since it returns by value),
// and import `nbrmm` on first use.
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
/// Capsule name of an owned `rmm::device_buffer*` handed to nbrmm.
#define NBRMM_BUFFER_CAPSULE \
  "nbrmm.device_buffer:" NBRMM_STRINGIFY(RMM_VERSION_MAJOR) "." NBRMM_STRINGIFY(RMM_VERSION_MINOR)

namespace nbrmm {

/// The owning resource handle librmm 26.10 uses everywhere.
using device_resource = cuda::mr::any_resource<cuda::mr::device_accessible>;

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
