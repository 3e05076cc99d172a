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
//        PyObject* buf = nbrmm::buffer_to_python(std::move(device_buffer), py_stream);
//      Returns an nbrmm.Buffer that adopts the memory without copying (new reference). Its
//      `mr` attribute is the resource that will free it (the very Python object when the
//      buffer was allocated from a resource set or created in Python, otherwise an nbrmm
//      object for the C++ one). Its `stream` is `py_stream`, the Python stream object the
//      buffer's stream came from, which the buffer keeps alive (it must have the buffer's
//      stream handle); without one (nullptr or None) the buffer only borrows its stream,
//      which must then outlive it.
//
//   3. C++ resource -> Python:
//        PyObject* obj = nbrmm::resource_to_python(std::move(res), /*host_accessible=*/false);
//      Returns an nbrmm resource object for a resource made in C++ (new reference): the
//      very Python object when `res` came from Python, an instance of the concrete nbrmm
//      class when nbrmm knows the librmm type, otherwise a generic
//      nbrmm.mr.DeviceMemoryResource. Copies share state, so the object and `res` count,
//      pool and free the same memory.
//
//   4. Reading what Python passes (each returns 0, or -1 with a Python exception set):
//        cudaStream_t stream;
//        nbrmm::stream_from_python(py_stream, &stream);  // None: the legacy default stream
//        nbrmm::buffer_view view;                        // data, size, stream of a Buffer
//        nbrmm::buffer_from_python(py_buf, &view);
//        nbrmm::device_resource mr;
//        nbrmm::resource_from_python(py_mr, &mr);        // as 1., the Python error kept
//
//   5. C++ exceptions -> Python, inside a `catch` block (or as Cython's `except +` handler):
//        catch (...) { nbrmm::raise_current_exception(); return nullptr; }
//      Sets the Python exception nbrmm's own functions raise for it (nbrmm.OutOfMemory for
//      rmm::out_of_memory, ...).
//
// Cython declarations of all of this are installed beside this header: nbrmm/nbrmm.pxd
// (and nbrmm/librmm.pxd, the librmm types it uses); add nbrmm.get_include() to Cython's
// include path and `from nbrmm.nbrmm cimport ...`.
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
#include <rmm/error.hpp>
#include <rmm/version_config.hpp>

#include <cuda/memory_resource>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <exception>
#include <memory>
#include <new>
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

/// Capsule name of nbrmm's exception translator (a `void (*)() noexcept`, not owned), when
/// the installed nbrmm provides one (attribute `_exception_translator` of `nbrmm._nbrmm`).
#define NBRMM_TRANSLATOR_CAPSULE \
  "nbrmm.exception_translator:" NBRMM_STRINGIFY(RMM_VERSION_MAJOR) "." NBRMM_STRINGIFY(RMM_VERSION_MINOR)

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
      if (char const* c = PyUnicode_AsUTF8AndSize(s, nullptr)) { text = c; }
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

/// Hands `buf` to Python as an nbrmm.Buffer (new reference), without copying the memory.
/// Returns nullptr with a Python exception set on failure (the memory is then freed).
inline PyObject* buffer_to_python(rmm::device_buffer&& buf, PyObject* stream = nullptr)
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
  PyObject* result = PyObject_CallMethod(cls, "_from_capsule", "OO", cap,
                                         stream != nullptr ? stream : Py_None);
  Py_DECREF(cls);
  Py_DECREF(cap);
  return result;
}

/// Hands the buffer owned by `buf` to Python as an nbrmm.Buffer (new reference), as the
/// overload above. A null `buf` raises ValueError. Returns nullptr with a Python exception set
/// on failure (the memory is then freed).
inline PyObject* buffer_to_python(std::unique_ptr<rmm::device_buffer> buf,
                                  PyObject* stream = nullptr)
{
  if (!buf) {
    PyErr_SetString(PyExc_ValueError, "buf: the unique_ptr<rmm::device_buffer> is null");
    return nullptr;
  }
  return buffer_to_python(std::move(*buf), stream);
}

namespace detail {

/// `module.name` (new reference), or nullptr with a Python exception set.
inline PyObject* nbrmm_attr(char const* module, char const* name)
{
  PyObject* mod = PyImport_ImportModule(module);
  if (mod == nullptr) { return nullptr; }
  PyObject* attr = PyObject_GetAttrString(mod, name);
  Py_DECREF(mod);
  return attr;
}

/// The name of obj's type (`type(obj).__name__`), for messages; "object" where it cannot
/// be had. Leaves no Python error set.
inline std::string type_name(PyObject* obj)
{
  std::string text = "object";
  if (PyObject* name = PyType_GetName(Py_TYPE(obj))) {
    if (char const* c = PyUnicode_AsUTF8AndSize(name, nullptr)) { text = c; }
    Py_DECREF(name);
  }
  PyErr_Clear();
  return text;
}

/// Replaces the current Python error by a TypeError "<param>: expected <what>, got <type>"
/// when it is a TypeError or an AttributeError (what a wrong kind of object raises); keeps
/// any other error. Returns -1.
inline int expected(PyObject* obj, char const* param, char const* what)
{
  if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
    std::string const got = type_name(obj);
    PyErr_Format(PyExc_TypeError, "%s: expected %s, got %s", param, what, got.c_str());
  }
  return -1;
}

}  // namespace detail

/// An owning copy of the resource behind an nbrmm resource object, as resource_from_python
/// above (None: the current device resource), stored in `*out`. Returns 0, or -1 with a
/// Python exception set: TypeError naming `param` when `obj` is not an nbrmm resource,
/// otherwise the exception Python raised (unchanged).
inline int resource_from_python(PyObject* obj, device_resource* out, char const* param = "mr")
{
  PyObject* target = nullptr;
  if (obj == Py_None) {
    PyObject* get = detail::nbrmm_attr("nbrmm.mr", "get_current_device_resource");
    if (get == nullptr) { return -1; }
    target = PyObject_CallNoArgs(get);
    Py_DECREF(get);
    if (target == nullptr) { return -1; }
  } else {
    Py_INCREF(obj);
    target = obj;
  }
  PyObject* capsule = PyObject_CallMethod(target, "__nbrmm_resource__", nullptr);
  Py_DECREF(target);
  if (capsule == nullptr) {
    return detail::expected(obj, param, "an nbrmm memory resource or None");
  }
  auto* res = static_cast<device_resource*>(PyCapsule_GetPointer(capsule, NBRMM_RESOURCE_CAPSULE));
  if (res == nullptr) {
    Py_DECREF(capsule);
    PyErr_Format(PyExc_TypeError,
                 "%s: an nbrmm resource capsule of another librmm version (this extension "
                 "was built against librmm %d.%d)",
                 param, RMM_VERSION_MAJOR, RMM_VERSION_MINOR);
    return -1;
  }
  *out = *res;
  Py_DECREF(capsule);
  return 0;
}

/// The handle of the CUDA stream of a Python stream object, stored in `*out` (make a
/// `cuda::stream_ref` of it): None is the legacy default stream, 0 (what
/// nbrmm.DEFAULT_STREAM is); otherwise an nbrmm.Stream or any object that
/// nbrmm's `stream=` parameters accept (the `__cuda_stream__` protocol, version 0, and the
/// older spellings CuPy, PyTorch and Numba streams have). The handle does not own the
/// stream: `obj` must stay alive while it is used. Returns 0, or -1 with a Python exception set
/// (TypeError naming `param` when `obj` is not a stream).
inline int stream_from_python(PyObject* obj, cudaStream_t* out, char const* param = "stream")
{
  if (obj == nullptr || obj == Py_None) {
    *out = cudaStream_t{};
    return 0;
  }
  PyObject* method = PyObject_GetAttrString(obj, "__cuda_stream__");
  if (method == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) { return -1; }
    PyErr_Clear();
    // The older spellings: nbrmm.Stream(obj) reads them (a view that keeps obj alive).
    PyObject* cls = detail::nbrmm_attr("nbrmm", "Stream");
    if (cls == nullptr) { return -1; }
    PyObject* view = PyObject_CallFunctionObjArgs(cls, obj, nullptr);
    Py_DECREF(cls);
    if (view == nullptr) {
      return detail::expected(obj, param,
                              "None, an nbrmm.Stream or an object implementing __cuda_stream__");
    }
    method = PyObject_GetAttrString(view, "__cuda_stream__");
    Py_DECREF(view);
    if (method == nullptr) { return -1; }
  }
  PyObject* proto = PyObject_CallNoArgs(method);
  Py_DECREF(method);
  if (proto == nullptr) { return -1; }
  if (!PyTuple_Check(proto) || PyTuple_Size(proto) != 2 ||
      !PyLong_Check(PyTuple_GetItem(proto, 0)) || !PyLong_Check(PyTuple_GetItem(proto, 1))) {
    Py_DECREF(proto);
    PyErr_Format(PyExc_TypeError, "%s: __cuda_stream__() must return a (version, handle) tuple",
                 param);
    return -1;
  }
  long const version = PyLong_AsLong(PyTuple_GetItem(proto, 0));
  if (version != 0) {
    Py_DECREF(proto);
    if (version == -1 && PyErr_Occurred()) { return -1; }
    PyErr_Format(PyExc_TypeError,
                 "%s: __cuda_stream__() returned version %ld of the CUDA stream protocol; "
                 "nbrmm supports version 0",
                 param, version);
    return -1;
  }
  void* handle = PyLong_AsVoidPtr(PyTuple_GetItem(proto, 1));
  Py_DECREF(proto);
  if (handle == nullptr && PyErr_Occurred()) { return -1; }
  *out = static_cast<cudaStream_t>(handle);
  return 0;
}

/// What C++ needs to use the memory of an nbrmm.Buffer: its address, its size in bytes and
/// the handle of the stream its memory is ordered on.
struct buffer_view {
  void* data{nullptr};
  std::size_t size{0};
  cudaStream_t stream{};
};

/// The address, size and stream of an nbrmm.Buffer (or DeviceBuffer), stored in `*out`. The
/// view does not own the memory: `obj` must stay alive (and open) while it is used. Returns
/// 0, or -1 with a Python exception set: TypeError naming `param` when `obj` is not an
/// nbrmm.Buffer, ValueError when it is closed.
inline int buffer_from_python(PyObject* obj, buffer_view* out, char const* param = "buf")
{
  PyObject* cls = detail::nbrmm_attr("nbrmm", "Buffer");
  if (cls == nullptr) { return -1; }
  int const is_buffer = PyObject_IsInstance(obj, cls);
  Py_DECREF(cls);
  if (is_buffer < 0) { return -1; }
  if (is_buffer == 0) {
    std::string const got = detail::type_name(obj);
    PyErr_Format(PyExc_TypeError, "%s: expected an nbrmm.Buffer, got %s", param, got.c_str());
    return -1;
  }
  PyObject* closed = PyObject_GetAttrString(obj, "closed");
  if (closed == nullptr) { return -1; }
  int const is_closed = PyObject_IsTrue(closed);
  Py_DECREF(closed);
  if (is_closed < 0) { return -1; }
  if (is_closed) {
    PyErr_Format(PyExc_ValueError, "%s: the buffer is closed", param);
    return -1;
  }
  buffer_view view;
  PyObject* ptr = PyObject_GetAttrString(obj, "ptr");
  if (ptr == nullptr) { return -1; }
  view.data = PyLong_AsVoidPtr(ptr);
  Py_DECREF(ptr);
  if (view.data == nullptr && PyErr_Occurred()) { return -1; }
  PyObject* size = PyObject_GetAttrString(obj, "size");
  if (size == nullptr) { return -1; }
  view.size = PyLong_AsSize_t(size);
  Py_DECREF(size);
  if (view.size == static_cast<std::size_t>(-1) && PyErr_Occurred()) { return -1; }
  PyObject* stream = PyObject_GetAttrString(obj, "stream");
  if (stream == nullptr) { return -1; }
  int const rc = stream_from_python(stream, &view.stream, param);
  Py_DECREF(stream);
  if (rc != 0) { return -1; }
  *out = view;
  return 0;
}

namespace detail {

/// librmm's message without its source location ("RMM failure at: FILE:LINE: ").
inline std::string clean_message(char const* what)
{
  std::string text = what != nullptr ? what : "";
  std::string const prefix = "RMM failure at: ";
  if (text.compare(0, prefix.size(), prefix) == 0) {
    // FILE:LINE: message -- the message starts after the second ": " past the prefix.
    auto const line = text.find(':', prefix.size());
    auto const end  = line == std::string::npos ? line : text.find(": ", line + 1);
    if (end != std::string::npos) { text.erase(0, end + 2); }
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) { text.pop_back(); }
  return text;
}

/// Sets nbrmm.<name> (falling back to `base` when nbrmm has no such class) with `what`.
inline void set_error(char const* name, PyObject* base, char const* what)
{
  PyObject* cls = name != nullptr ? nbrmm_attr("nbrmm", name) : nullptr;
  if (cls == nullptr) { PyErr_Clear(); }
  PyErr_SetString(cls != nullptr ? cls : base, clean_message(what).c_str());
  Py_XDECREF(cls);
}

using exception_translator = void (*)() noexcept;

/// nbrmm's own translator of C++ exceptions, or nullptr where the installed nbrmm has none.
inline exception_translator nbrmm_translator() noexcept
{
  static exception_translator translator = []() noexcept -> exception_translator {
    PyObject* cap = nbrmm_attr("nbrmm._nbrmm", "_exception_translator");
    if (cap == nullptr) {
      PyErr_Clear();
      return nullptr;
    }
    void* fn = PyCapsule_GetPointer(cap, NBRMM_TRANSLATOR_CAPSULE);
    Py_DECREF(cap);
    if (fn == nullptr) { PyErr_Clear(); }
    return reinterpret_cast<exception_translator>(fn);
  }();
  return translator;
}

}  // namespace detail

/// Sets the Python exception for the C++ exception being handled: call it inside a `catch`
/// block, with the GIL held (it is also the handler of Cython's `except +`, see
/// nbrmm/nbrmm.pxd). A Python error already set is kept. Otherwise the exception becomes
/// what nbrmm's own functions raise for it: a Python exception raised by a Python resource
/// inside librmm is that very exception where the installed nbrmm can translate it, librmm's
/// errors become nbrmm.OutOfMemory, nbrmm.BadAlloc, nbrmm.CudaError or nbrmm.LogicError, and
/// std::invalid_argument, std::out_of_range, std::overflow_error and std::bad_alloc become
/// ValueError, IndexError, OverflowError and MemoryError; any other exception is a
/// RuntimeError.
inline void raise_current_exception() noexcept
{
  if (PyErr_Occurred() != nullptr) { return; }
  if (!std::current_exception()) {
    PyErr_SetString(PyExc_SystemError,
                    "nbrmm::raise_current_exception() called outside a catch block");
    return;
  }
  if (auto translate = detail::nbrmm_translator()) {
    translate();
    if (PyErr_Occurred() != nullptr) { return; }
  }
  try {
    throw;
  } catch (rmm::out_of_memory const& e) {
    detail::set_error("OutOfMemory", PyExc_MemoryError, e.what());
  } catch (rmm::bad_alloc const& e) {
    detail::set_error("BadAlloc", PyExc_MemoryError, e.what());
  } catch (rmm::cuda_error const& e) {
    detail::set_error("CudaError", PyExc_RuntimeError, e.what());
  } catch (rmm::logic_error const& e) {
    detail::set_error("LogicError", PyExc_RuntimeError, e.what());
  } catch (std::invalid_argument const& e) {
    detail::set_error(nullptr, PyExc_ValueError, e.what());
  } catch (std::out_of_range const& e) {
    detail::set_error(nullptr, PyExc_IndexError, e.what());
  } catch (std::overflow_error const& e) {
    detail::set_error(nullptr, PyExc_OverflowError, e.what());
  } catch (std::bad_alloc const&) {
    PyErr_NoMemory();
  } catch (std::exception const& e) {
    detail::set_error(nullptr, PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "an unknown C++ exception");
  }
}

}  // namespace nbrmm
