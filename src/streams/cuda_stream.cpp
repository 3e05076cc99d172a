// nbrmm.Stream (rmm/cuda_stream.hpp): an owned CUDA stream, or a non-owning view of any
// object that implements the `__cuda_stream__` protocol, which it keeps alive.
#include "bindings.hpp"
#include "core/args.hpp"
#include "core/device.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "core/rmm_compat.hpp"
#include "streams/stream.hpp"

#include <rmm/cuda_stream.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace nbrmm {
namespace {

PyTypeObject* stream_type = nullptr;  // nbrmm.Stream, for the fast path of stream_arg
// nbrmm.DEFAULT_STREAM (borrowed: the module holds it), null once it is gone.
PyObject* default_stream_obj = nullptr;
// What the `stream` parameters of bound functions default to: a plain object standing for
// DEFAULT_STREAM. Function defaults hold no Stream, so a class that outlives the
// interpreter (kept by another library's static) keeps no nbrmm instance alive with it.
PyObject* default_stream_arg_obj = nullptr;
// DEFAULT_STREAM's handle: the legacy default stream, spelled 0 (as in rmm).
constexpr cudaStream_t default_stream_handle{};

/// The handle `value` that a stream-like object gave through `source` (its
/// `__cuda_stream__()`, `.ptr`, ...): an int from 0 to 2**64 - 1. Raises TypeError for
/// another type and ArgumentRangeError (a ValueError, and the OverflowError that rmm's
/// conversion to a C handle raises) outside that range; messages name `param`.
cudaStream_t handle_from_int(nb::handle value, char const* param, char const* source)
{
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    throw nb::type_error((std::string{param} + ": the stream handle from " + source +
                          " must be an int, got " + type_of(value))
                           .c_str());
  }
  auto const raw = PyLong_AsUnsignedLongLong(value.ptr());
  if (raw == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();  // negative, or 2**64 and more
    throw_range_error(std::string{param} + ": the stream handle from " + source + " is " +
                      utf8(value) + "; a stream handle is an int from 0 to 2**64 - 1");
  }
  return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(raw));
}

/// The handle of a foreign stream object, or false when `obj` is not stream-like. A
/// `__cuda_stream__` protocol version other than 0 raises NotImplementedError when
/// `constructing` a Stream from `obj` and TypeError for a stream argument (what rmm raises
/// for each).
bool foreign_handle(nb::handle obj, char const* param, cudaStream_t& out, bool constructing = false)
{
  // A class is no stream: its __cuda_stream__ and attributes are unbound.
  if (PyType_Check(obj.ptr())) { return false; }
  // The object's attributes are Python code: counted as a call into Python, so that
  // interpreter exit waits for it to end, and refused on other threads once exit began
  // (CPython would end the thread inside it, through C++ frames: see gil.hpp).
  gil_acquire const python;
  if (!python.ok()) {
    throw std::runtime_error(std::string{param} +
                             ": the interpreter is shutting down: streams of other "
                             "libraries are no longer read");
  }
  if (nb::object method = optional_attr(obj, "__cuda_stream__"); method.is_valid()) {
    nb::object proto = method();
    if (!PyTuple_Check(proto.ptr()) || PyTuple_Size(proto.ptr()) != 2) {
      throw nb::type_error((std::string{param} +
                            ": __cuda_stream__() must return a (version, handle) tuple")
                             .c_str());
    }
    nb::handle const version{PyTuple_GetItem(proto.ptr(), 0)};
    if (!PyLong_Check(version.ptr()) || PyBool_Check(version.ptr()) ||
        PyLong_AsLong(version.ptr()) != 0) {
      PyErr_Clear();  // (an overflowing version is just another version)
      std::string const text = std::string{param} + ": __cuda_stream__() returned version " +
                               nb::repr(version).c_str() +
                               " of the CUDA stream protocol; nbrmm supports version 0";
      if (constructing) {
        PyErr_SetString(PyExc_NotImplementedError, text.c_str());
        throw nb::python_error();
      }
      throw nb::type_error(text.c_str());
    }
    out = handle_from_int(nb::handle{PyTuple_GetItem(proto.ptr(), 1)}, param, "__cuda_stream__()");
    return true;
  }
  // Older spellings: CuPy (.ptr), PyTorch (.cuda_stream), numba-cuda (.handle).
  for (auto [attr, source] : {std::pair{"cuda_stream", ".cuda_stream"}, std::pair{"ptr", ".ptr"}}) {
    if (nb::object value = optional_attr(obj, attr); value.is_valid()) {
      out = handle_from_int(value, param, source);
      return true;
    }
  }
  if (nb::object h = optional_attr(obj, "handle"); h.is_valid()) {
    if (nb::object value = optional_attr(h, "value"); value.is_valid()) { h = std::move(value); }
    if (h.is_none()) {
      out = nullptr;
      return true;
    }
    out = handle_from_int(h, param, ".handle");
    return true;
  }
  return false;
}

[[noreturn]] void not_a_stream(nb::handle obj, char const* param)
{
  if (obj.is_none()) {
    throw nb::type_error((std::string{param} +
                          ": stream argument cannot be None; pass a Stream, e.g. "
                          "nbrmm.DEFAULT_STREAM")
                           .c_str());
  }
  throw nb::type_error((std::string{param} +
                        ": expected an nbrmm.Stream or an object implementing __cuda_stream__, "
                        "got " +
                        type_of(obj, nb::type<Stream>()))
                         .c_str());
}

/// Whether `obj` is an nbrmm Stream; one whose `__init__` never ran is refused.
bool is_nbrmm_stream(nb::handle obj, char const* param)
{
  if (PyObject_TypeCheck(obj.ptr(), stream_type) == 0) { return false; }
  if (!nb::inst_ready(obj)) { not_a_stream(obj, param); }
  return true;
}

Stream make_view(nb::handle obj, char const* param, bool constructing = false)
{
  Stream s;
  if (is_nbrmm_stream(obj, param)) {
    Stream const& other = nb::cast<Stream const&>(obj);
    s.handle            = other.handle;
    s.owned             = other.owned;
    s.owner             = other.owner.is_valid() ? other.owner : nb::borrow(obj);
    return s;
  }
  if (!foreign_handle(obj, param, s.handle, constructing)) { not_a_stream(obj, param); }
  s.owner = nb::borrow(obj);
  return s;
}

std::uintptr_t handle_int(Stream const& s) { return reinterpret_cast<std::uintptr_t>(s.handle); }

int stream_traverse(PyObject* self, visitproc visit, void* arg)
{
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) { return 0; }
  Stream* s = nb::inst_ptr<Stream>(self);
  Py_VISIT(s->owner.ptr());
  return 0;
}

int stream_clear(PyObject* self)
{
  Stream* s = nb::inst_ptr<Stream>(self);
  s->owner.reset();
  return 0;
}

PyType_Slot stream_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(stream_traverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(stream_clear)},
                              {0, nullptr}};

}  // namespace

cuda::stream_ref stream_arg(nb::handle obj, char const* param)
{
  if (is_nbrmm_stream(obj, param)) { return nb::inst_ptr<Stream>(obj)->ref(); }
  if (obj.ptr() == default_stream_arg_obj) { return cuda::stream_ref{default_stream_handle}; }
  cudaStream_t handle{};
  if (obj.is_none() || !foreign_handle(obj, param, handle)) { not_a_stream(obj, param); }
  return cuda::stream_ref{handle};
}

nb::object stream_object(nb::handle obj, char const* param)
{
  if (is_nbrmm_stream(obj, param)) { return nb::borrow(obj); }
  if (obj.ptr() == default_stream_arg_obj) { return default_stream(); }
  if (obj.is_none()) { not_a_stream(obj, param); }
  return nb::cast(make_view(obj, param));
}

nb::object stream_for_handle(cudaStream_t handle)
{
  Stream s;
  s.handle = handle;
  return nb::cast(std::move(s));
}

nb::object default_stream()
{
  if (default_stream_obj != nullptr) { return nb::borrow(default_stream_obj); }
  return stream_for_handle(default_stream_handle);  // as DEFAULT_STREAM was, late at exit
}

nb::handle default_stream_arg() { return default_stream_arg_obj; }

void bind_cuda_stream(nb::module_& m)
{
  m.def(
    "_as_stream", [](nb::handle stream) { return stream_object(stream, "stream"); },
    nb::arg("stream").none(), nb::sig("def _as_stream(stream: nbrmm._typing.CudaStreamLike) -> Stream"),
    "A stream argument as nbrmm reads it (refusing None; rmm's as_stream).");
  nb::enum_<rmm::cuda_stream::flags>(m, "CudaStreamFlags", nb::is_arithmetic(),
                                     "Flags for creating a new CUDA stream.")
    .value("SYNC_DEFAULT", rmm::cuda_stream::flags::sync_default,
           "The stream synchronizes with the legacy default stream.")
    .value("NON_BLOCKING", rmm::cuda_stream::flags::non_blocking,
           "The stream does not synchronize with the legacy default stream.");

  auto cls = nb::class_<Stream>(m, "Stream", nb::type_slots(stream_slots), nb::is_weak_referenceable(), R"doc(
A CUDA stream.

``Stream()`` creates and owns a new stream (destroyed when the last object using it
goes away). ``Stream(obj)`` wraps, without owning, any object that implements the
``__cuda_stream__`` protocol (CuPy, PyTorch, cuda.core, numba-cuda streams) or another
``Stream``, and keeps ``obj`` alive.

Parameters
----------
obj : object, optional
    The stream to wrap. When omitted, a new stream is created.
flags : CudaStreamFlags, optional
    Creation flags of a new stream (only when ``obj`` is omitted).

Raises
------
TypeError
    If ``obj`` is not stream-like.
ValueError
    If ``flags`` is given together with ``obj``.
NotImplementedError
    If ``obj.__cuda_stream__()`` reports a protocol version other than 0.
nbrmm.ArgumentRangeError
    If the handle ``obj`` gives is negative or 2**64 or more (a ``ValueError``, and the
    ``OverflowError`` rmm raises).
nbrmm.InvalidArgumentError
    If ``flags`` is an int that is not a ``CudaStreamFlags`` value.
nbrmm.CudaError
    If a new stream cannot be created (e.g. no GPU).)doc");

  cls.def(
       "__init__",
       [](Stream* self, nb::handle obj, nb::handle flags) {
         init_guard const guard{self};
         if (obj.is_none()) {
           auto const f = stream_flags_arg(flags, "flags");
           std::shared_ptr<rmm::cuda_stream> owned;
           try {
             gil_release release;
             owned = std::make_shared<rmm::cuda_stream>(f);
           } catch (rmm::cuda_error const&) {
             require_gpu("Stream()");  // says so when there is no GPU
             throw;
           }
           new (self) Stream{owned->value(), std::move(owned), nb::object{}};
           return;
         }
         if (!flags.is_none()) {
           throw nb::value_error(
             "flags: flags may only be specified when obj is None; they cannot be applied "
             "to an existing stream");
         }
         new (self) Stream{make_view(obj, "obj", /*constructing=*/true)};
       },
       nb::arg("obj").none() = nb::none(), nb::arg("flags").none() = nb::none(),
       nb::sig("def __init__(self, obj: nbrmm._typing.CudaStreamLike | None = None, "
               "flags: CudaStreamFlags | None = None) -> None"))
    .def(
      "__cuda_stream__",
      method<Stream>("__cuda_stream__",
                     [](Stream const& s) { return nb::make_tuple(0, handle_int(s)); }),
      nb::sig("def __cuda_stream__(self) -> tuple[int, int]"),
      "The CUDA stream protocol: ``(version, handle)``.")
    .def(
      "synchronize",
      method<Stream>("synchronize", [](Stream const& s) {
        gil_release release;
        check_cuda(cudaStreamSynchronize(s.handle), "cudaStreamSynchronize");
      }),
      "Block until all work queued on the stream has completed (releases the GIL).")
    .def(
      "is_default",
      method<Stream>("is_default", [](Stream const& s) { return is_legacy_default(s.handle); }),
      "Whether this is the (legacy) default stream.")
    .def(
      "is_per_thread_default",
      method<Stream>("is_per_thread_default",
                     [](Stream const& s) { return s.handle == cudaStreamPerThread; }),
      "Whether this is the per-thread default stream.")
    .def_prop_ro(
      "handle", getter<Stream>("handle", [](Stream const& s) { return handle_int(s); }),
      "The raw ``cudaStream_t`` as an int.")
    .def_prop_ro(
      "owner",
      getter<Stream>("owner", [](Stream const& s) { return s.owner.is_valid() ? s.owner : nb::none(); }),
      nb::for_getter(nb::sig("def owner(self, /) -> nbrmm._typing.CudaStreamLike | None")),
      "The wrapped Python object, or None when this Stream was not made from one.")
    .def(
      "__eq__",
      [](nb::handle_t<Stream> self, nb::handle other) -> nb::object {
        // (an uninitialized Stream is no stream: == falls back to identity)
        if (!nb::inst_ready(self) || !nb::isinstance<Stream>(other) || !nb::inst_ready(other)) {
          return nb::borrow(Py_NotImplemented);
        }
        return nb::bool_(nb::inst_ptr<Stream>(self)->handle == nb::inst_ptr<Stream>(other)->handle);
      },
      nb::is_operator(), nb::sig("def __eq__(self, other: object, /) -> bool"))
    .def("__hash__", method<Stream>("__hash__", [](Stream const& s) {
           return std::hash<std::uintptr_t>{}(handle_int(s));
         }))
    .def("__repr__", [](nb::handle_t<Stream> self) {
      std::string const type = utf8(nb::type_name(self.type()));
      if (!nb::inst_ready(self)) { return "<" + type + " (not initialized)>"; }
      Stream const& s = *nb::inst_ptr<Stream>(self);
      return "<" + type + " handle=0x" + [&] {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(handle_int(s)));
        return std::string{buf};
      }() + (s.owned ? " owned>" : ">");
    });

  stream_type = reinterpret_cast<PyTypeObject*>(cls.ptr());

  auto constant = [&](char const* name, cudaStream_t handle) {
    Stream s;
    s.handle       = handle;
    nb::object obj = nb::cast(std::move(s));
    m.attr(name)   = obj;
    return obj;
  };
  // Borrowed from the module; a weak reference forgets it when the object goes (the
  // module's namespace is cleared at interpreter exit), so that no C++ reference keeps a
  // Stream past the interpreter.
  default_stream_obj = constant("DEFAULT_STREAM", default_stream_handle).ptr();
  static PyObject* weak_default = nullptr;  // kept for good: it must outlive DEFAULT_STREAM
  // Its callback is a plain C function: the weak reference keeps it for good, and nanobind
  // reports a function of its own that outlives the interpreter as leaked.
  static PyMethodDef forget_def = {
    "_forget_default_stream",
    [](PyObject*, PyObject* ref) -> PyObject* {
      // Only as the weak reference's callback, once DEFAULT_STREAM is gone (the function
      // can be reached from Python, and called with anything).
      if (ref == weak_default && default_stream_obj != nullptr) {
#if PY_VERSION_HEX >= 0x030D0000
        PyObject* alive = nullptr;
        if (PyWeakref_GetRef(ref, &alive) < 0) { return nullptr; }
        if (alive == nullptr) { default_stream_obj = nullptr; }
        Py_XDECREF(alive);
#else
        if (PyWeakref_GetObject(ref) == Py_None) { default_stream_obj = nullptr; }
#endif
      }
      Py_RETURN_NONE;
    },
    METH_O, nullptr};
  nb::object forget = nb::steal(PyCFunction_New(&forget_def, nullptr));
  if (!forget.is_valid()) { throw nb::python_error(); }
  weak_default = PyWeakref_NewRef(default_stream_obj, forget.ptr());
  if (weak_default == nullptr) { throw nb::python_error(); }
  default_stream_arg_obj = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));
  if (default_stream_arg_obj == nullptr) { throw nb::python_error(); }
  constant("LEGACY_DEFAULT_STREAM", cudaStreamLegacy);
  constant("PER_THREAD_DEFAULT_STREAM", cudaStreamPerThread);
}

}  // namespace nbrmm
