// The calls cuda.core makes into nbrmm.interop.NbrmmMemoryResource (a cuda.core
// MemoryResource over an nbrmm resource): `allocate(size, *, stream)` and
// `deallocate(ptr, size, *, stream)`, as methods written here.
//
// The common case runs without a Python frame: a cuda.core Stream, an int size (and
// pointer), and an nbrmm resource whose allocate/deallocate are DeviceMemoryResource's own
// (every librmm resource and adaptor). The allocation is a raw allocation of that resource
// (memory_resource.cpp: recorded, so that deallocate frees only what it allocated, once);
// the Buffer is made by cuda.core's `Buffer.from_handle`. Anything else (another stream
// object, a NumPy integer, a resource written in Python, an adapter detached at exit)
// takes the adapter's general path, `_allocate_general` / `_deallocate_general` in
// Python, which also words every error; its allocation and Buffer are made here too, so
// that memory `Buffer.from_handle` never took goes back on either path (make_buffer).
#include "args.hpp"
#include "bindings.hpp"
#include "errors.hpp"
#include "gil.hpp"
#include "resource.hpp"

#include <structmember.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <utility>
#include <vector>

namespace nbrmm {
namespace {

/// What nbrmm.interop registers at import (_cuda_core_adapter_setup); strong references,
/// released at interpreter exit (release_cuda_core_adapter).
struct adapter_types {
  PyObject* adapter{};      ///< nbrmm.interop.NbrmmMemoryResource
  PyObject* stream{};       ///< cuda.core.Stream
  PyObject* from_handle{};  ///< cuda.core.Buffer.from_handle
  PyObject* core_name{};    ///< "_core": the adapter's slot holding the nbrmm resource
  PyObject* cuda_stream_name{};  ///< "__cuda_stream__"
  /// cuda.core.Stream's own `__cuda_stream__` (strong), called directly, or null: then the
  /// method is looked up on each call. Only an immutable Stream type's is kept (no one can
  /// replace it then).
  PyObject* cuda_stream_method{};
  PyObject* stream_kwnames{};    ///< ("stream",)
  PyObject* allocate_general{};    ///< "_allocate_general"
  PyObject* deallocate_general{};  ///< "_deallocate_general"
  /// The adapter class's own member descriptor of its `_core` slot (strong), or null:
  /// then `_core` is read with getattr. Read through it, the slot is read whatever a
  /// subclass calls `_core`.
  PyObject* core_member{};
  /// Where that slot lies in the adapter's instances (the descriptor's offset), or -1.
  Py_ssize_t core_offset{-1};
  /// Marks of recent stream handles (see marked_handle).
  struct mark {
    /// `Stream.from_handle(handle)`, made here and never handed out, so never closed
    /// (strong, or null).
    PyObject* stream{};
    std::uintptr_t handle{0};  ///< nonzero
  };
  mark marks[2]{};
  int last_mark{0};  ///< the mark last made or matched
  /// The handle of the last Stream that matched no mark: a mark is made for a handle
  /// seen twice in a row, not for every stream passing by.
  std::uintptr_t unmarked{0};
  /// Marks that may be made now. Making one (cuda.core's `Stream.from_handle`) costs
  /// microseconds: where more streams take turns than there are marks, one is made at
  /// most every `misses_per_mark` handles read without a mark.
  int mark_tokens{2};
  std::uint32_t misses{0};  ///< handles read without a mark since the last token came
  std::uint64_t marks_made{0};  ///< (for tests)
};

constexpr std::uint32_t misses_per_mark = 1024;

adapter_types* types = nullptr;

/// The nbrmm resource of `self` when the fast path applies (a new reference), else null
/// (no Python error set). `types` is set.
PyObject* fast_resource(PyObject* self)
{
  if (PyObject_TypeCheck(self, reinterpret_cast<PyTypeObject*>(types->adapter)) == 0) {
    return nullptr;
  }
  PyObject* core = nullptr;
  if (types->core_member != nullptr) {
    // The slot itself: what NbrmmMemoryResource.__init__ (or the exit's detach) stored
    // there, whatever a subclass calls `_core` (null where it was never stored).
#if defined(Py_GIL_DISABLED)
    core = Py_TYPE(types->core_member)->tp_descr_get(types->core_member, self, types->adapter);
#else
    core = Py_XNewRef(*reinterpret_cast<PyObject**>(reinterpret_cast<char*>(self) +
                                                   types->core_offset));
#endif
  } else {
    core = PyObject_GetAttr(self, types->core_name);
  }
  if (core == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (!is_resource(core)) {  // None: the resource's own methods are Python's, or detached
    Py_DECREF(core);
    return nullptr;
  }
  return core;
}

/// What the type `type` itself defines as `name` (borrowed), or null (no Python error set).
PyObject* own_attribute(PyObject* type, PyObject* name)
{
  PyObject* dict  = reinterpret_cast<PyTypeObject*>(type)->tp_dict;
  PyObject* found = dict != nullptr ? PyDict_GetItemWithError(dict, name) : nullptr;
  if (found == nullptr) { PyErr_Clear(); }
  return found;
}

/// `adapter`'s own member descriptor of its object slot `name` (a new reference), with the
/// slot's offset, or null (no Python error set).
PyObject* own_slot(PyObject* adapter, PyObject* name, Py_ssize_t& offset)
{
  PyObject* found = own_attribute(adapter, name);
  if (found == nullptr) { return nullptr; }
  if (!Py_IS_TYPE(found, &PyMemberDescr_Type) ||
      PyDescr_TYPE(found) != reinterpret_cast<PyTypeObject*>(adapter)) {
    return nullptr;
  }
  PyMemberDef const* member = reinterpret_cast<PyMemberDescrObject*>(found)->d_member;
#if PY_VERSION_HEX >= 0x030C0000
  int const object_ex = Py_T_OBJECT_EX;
#else
  int const object_ex = T_OBJECT_EX;
#endif
  if (member == nullptr || member->type != object_ex || member->offset <= 0) { return nullptr; }
  offset = member->offset;
  return Py_NewRef(found);
}

/// `type`'s own method `name` (a new reference) where `type` is immutable (its methods
/// cannot be replaced), or null (no Python error set).
PyObject* own_method(PyObject* type, PyObject* name)
{
  if (!PyType_HasFeature(reinterpret_cast<PyTypeObject*>(type), Py_TPFLAGS_IMMUTABLETYPE)) {
    return nullptr;
  }
  PyObject* found = own_attribute(type, name);
  if (found == nullptr ||
      !PyType_HasFeature(Py_TYPE(found), Py_TPFLAGS_METHOD_DESCRIPTOR)) {
    return nullptr;
  }
  return Py_NewRef(found);
}

/// Whether the cuda.core Stream `stream` equals a mark: then `handle` is its handle.
///
/// A Stream's handle never changes while it is open, and Streams compare equal when their
/// handles are equal (a closed one has none; only handle 0 equals it, which is never
/// marked). A mark is never closed, as nobody else has it: a Stream equal to one is open,
/// with the mark's handle. cuda.core hands deallocate a Stream object of its own for each
/// free, and allocations come on the caller's: a comparison costs much less than a
/// `__cuda_stream__` call. Marks are kept where the GIL is enabled.
bool marked_handle([[maybe_unused]] PyObject* stream,
                   [[maybe_unused]] std::uintptr_t& handle) noexcept
{
#if !defined(Py_GIL_DISABLED)
  for (int k = 0; k < 2; ++k) {
    int const i                     = (types->last_mark + k) % 2;
    adapter_types::mark const& mark = types->marks[i];
    if (mark.stream == nullptr) { continue; }
    int const equal = PyObject_RichCompareBool(stream, mark.stream, Py_EQ);
    if (equal == 1) {
      handle           = mark.handle;
      types->last_mark = i;
      return true;
    }
    if (equal < 0) { PyErr_Clear(); }
  }
#endif
  return false;
}

/// Notes `handle` (nonzero), just read from a Stream that matched no mark; the second time
/// in a row, a mark is made for it (in place of the one least recently used). Runs
/// cuda.core's `Stream.from_handle`; a failure leaves no mark and no Python error.
void note_handle([[maybe_unused]] std::uintptr_t handle) noexcept
{
#if !defined(Py_GIL_DISABLED)
  if (++types->misses == misses_per_mark) {
    types->misses      = 0;
    types->mark_tokens = std::min(types->mark_tokens + 1, 2);
  }
  if (handle == 0 || handle != std::exchange(types->unmarked, handle) ||
      types->mark_tokens == 0) {
    return;
  }
  --types->mark_tokens;
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyObject* made = nullptr;
  if (PyObject* number = PyLong_FromUnsignedLongLong(handle)) {
    made = PyObject_CallMethod(types->stream, "from_handle", "O", number);
    Py_DECREF(number);
  }
  PyErr_Clear();
  PyErr_Restore(type, value, trace);
  // (Python code ran: exit may have released `types` meanwhile, see allocate_method.)
  if (made == nullptr || types == nullptr ||
      !Py_IS_TYPE(made, reinterpret_cast<PyTypeObject*>(types->stream))) {
    Py_XDECREF(made);
    return;
  }
  int const i = 1 - types->last_mark;
  std::swap(types->marks[i].stream, made);
  types->marks[i].handle = handle;
  types->last_mark       = i;
  types->unmarked        = 0;
  ++types->marks_made;
  Py_XDECREF(made);  // the mark replaced
#endif
}

/// The handle of a cuda.core Stream (a mark's, or `__cuda_stream__()[1]`), or false where
/// it has none this path takes (no Python error set then, unless the call itself raised:
/// then throws).
bool stream_handle(PyObject* stream, std::uintptr_t& handle)
{
  if (Py_TYPE(stream) != reinterpret_cast<PyTypeObject*>(types->stream)) { return false; }
  if (marked_handle(stream, handle)) { return true; }
  PyObject* args[] = {stream};
  nb::object value =
    nb::steal(types->cuda_stream_method != nullptr
                ? PyObject_Vectorcall(types->cuda_stream_method, args, 1, nullptr)
                : PyObject_VectorcallMethod(types->cuda_stream_name, args,
                                            1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  if (!value.is_valid()) { throw nb::python_error(); }
  if (!PyTuple_CheckExact(value.ptr()) || PyTuple_GET_SIZE(value.ptr()) != 2) { return false; }
  PyObject* h = PyTuple_GET_ITEM(value.ptr(), 1);
  if (!PyLong_CheckExact(h)) { return false; }
  unsigned long long const v = PyLong_AsUnsignedLongLong(h);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    return false;
  }
  handle = static_cast<std::uintptr_t>(v);
  value.reset();
  note_handle(handle);
  return true;
}

/// A pointer value: an int (or an object with __index__, not a bool) in [0, 2**64), or
/// false (no Python error set).
bool pointer_value(PyObject* obj, std::uintptr_t& out)
{
  if (PyBool_Check(obj)) { return false; }
  PyObject* index = PyLong_Check(obj) ? Py_NewRef(obj) : PyNumber_Index(obj);
  if (index == nullptr) {
    PyErr_Clear();
    return false;
  }
  unsigned long long const v = PyLong_AsUnsignedLongLong(index);
  Py_DECREF(index);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    return false;
  }
  out = static_cast<std::uintptr_t>(v);
  return true;
}

/// A non-negative exact int below 2**63, or false.
bool small_uint(PyObject* obj, std::size_t& out)
{
  if (!PyLong_CheckExact(obj)) { return false; }
  int overflow      = 0;
  long long const v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0 || v < 0) { return false; }  // (v == -1 with an error is v < 0)
  out = static_cast<std::size_t>(v);
  return true;
}

/// `type(self).<name>(self, *args, stream=stream)`: the adapter's general path. `types`
/// is set.
nb::object general(PyObject* self, PyObject* name, std::initializer_list<PyObject*> args,
                   PyObject* stream)
{
  nb::object method = nb::steal(PyObject_GetAttr(types->adapter, name));
  if (!method.is_valid()) { throw nb::python_error(); }
  PyObject* argv[4] = {self};
  std::size_t n     = 1;
  for (PyObject* a : args) { argv[n++] = a; }
  argv[n] = stream;
  nb::object result =
    nb::steal(PyObject_Vectorcall(method.ptr(), argv, n, types->stream_kwnames));
  if (!result.is_valid()) { throw nb::python_error(); }
  return result;
}

/// Memory allocate_method hands to cuda.core's `Buffer.from_handle`, while that call runs
/// (Python code: other threads, and other greenlets of this one, run meanwhile). Until the
/// call returns, the address is known only to it and to the Buffer it makes. The records
/// live on the heap, not on a stack that a greenlet switch moves, and are found by serial.
struct handover {
  std::uint64_t serial;
  PyObject* adapter;   ///< identity only
  std::uintptr_t ptr;
  bool given_back;     ///< deallocate of `adapter` was called for `ptr` meanwhile
};

/// The handovers under way, oldest first: made by bind_cuda_core_adapter, never destroyed
/// (calls may end at exit).
std::vector<handover>* handover_list = nullptr;
std::vector<handover>& handovers() noexcept { return *handover_list; }
std::uint64_t next_handover = 1;  // (under handover_lock)

#if defined(Py_GIL_DISABLED)
/// Whether any handover is under way (read without the lock: a hint; a thread sees its
/// own).
std::atomic<std::size_t> handovers_under_way{0};
std::mutex& handover_mutex()
{
  static auto* const m = new std::mutex;
  return *m;
}
#endif

/// Whether any handover may be under way.
bool any_handover() noexcept
{
#if defined(Py_GIL_DISABLED)
  return handovers_under_way.load(std::memory_order_relaxed) != 0;
#else
  return !handover_list->empty();  // (the GIL is held)
#endif
}

/// Held while handovers() is used; nothing in its scope runs Python code. The GIL guards
/// the list where it is enabled; free-threaded builds lock a mutex.
class handover_lock {
#if defined(Py_GIL_DISABLED)
  std::lock_guard<std::mutex> lock_{handover_mutex()};
#endif
};

/// Registers a handover of `ptr` by `adapter` for the scope's life; serial() is 0 where
/// there was no memory to register it (then nothing can be told about it).
class handover_scope {
 public:
  handover_scope(PyObject* adapter, std::uintptr_t ptr) noexcept
  {
    handover_lock const lock;
    try {
      handovers().push_back({next_handover, adapter, ptr, false});
      serial_ = next_handover++;
#if defined(Py_GIL_DISABLED)
      handovers_under_way.fetch_add(1, std::memory_order_relaxed);
#endif
    } catch (...) {
    }
  }
  handover_scope(handover_scope const&)            = delete;
  handover_scope& operator=(handover_scope const&) = delete;
  ~handover_scope() { end(); }

  /// Ends the handover: whether deallocate was called for it meanwhile (registered ones).
  bool end() noexcept
  {
    if (serial_ == 0) { return false; }
    handover_lock const lock;
    auto& list = handovers();
    for (auto it = list.end(); it != list.begin();) {
      if ((--it)->serial == serial_) {
        bool const given_back = it->given_back;
        list.erase(it);
#if defined(Py_GIL_DISABLED)
        handovers_under_way.fetch_sub(1, std::memory_order_relaxed);
#endif
        serial_ = 0;
        return given_back;
      }
    }
    serial_ = 0;
    return false;
  }
  [[nodiscard]] std::uint64_t serial() const noexcept { return serial_; }

 private:
  std::uint64_t serial_{0};
};

/// Marks the newest handover of `ptr` by `adapter` not yet given back given back
/// (deallocate_method calls it while any is under way). A Python error pending on entry
/// stays pending; none of its own is left.
void note_given_back(PyObject* adapter, PyObject* ptr) noexcept
{
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  std::uintptr_t p = 0;
  bool const known = pointer_value(ptr, p);  // (deallocate words any error of its own)
  PyErr_Restore(type, value, trace);
  if (!known) { return; }
  handover_lock const lock;
  auto& list = handovers();
  for (auto it = list.end(); it != list.begin();) {
    --it;
    if (it->adapter == adapter && it->ptr == p && !it->given_back) {
      it->given_back = true;
      return;
    }
  }
}

/// `Buffer.from_handle(ptr, size, self, stream=stream)` (`from_handle`, `kwnames`: those of
/// `types`) for memory just allocated. Should it raise before its Buffer took the memory,
/// nobody else has the address: `reclaim()` gives it back, and the error propagates. A
/// Buffer it made takes the memory even if the call then fails: dropping the Buffer gives
/// it back through deallocate, which the handover notes, and nothing more is done.
template <class Reclaim>
nb::object make_buffer(PyObject* from_handle, PyObject* kwnames, nb::handle self,
                       std::uintptr_t ptr, PyObject* size, PyObject* stream, Reclaim&& reclaim)
{
  PyObject* buffer = nullptr;
  handover_scope scope{self.ptr(), ptr};
  if (PyObject* address = PyLong_FromSize_t(ptr)) {
    PyObject* argv[] = {address, size, self.ptr(), stream};
    buffer           = PyObject_Vectorcall(from_handle, argv, 3, kwnames);
    Py_DECREF(address);
  }
  bool const registered = scope.serial() != 0;
  bool const given_back = scope.end();
  if (buffer != nullptr) { return nb::steal(buffer); }
  // Unregistered (no memory to note it), the memory stays lost rather than risk a second
  // free.
  if (registered && !given_back) {
    PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
    PyErr_Fetch(&type, &value, &trace);
    try {
      reclaim();
    } catch (...) {  // the memory stays lost; the first error is the one to report
    }
    PyErr_Clear();
    PyErr_Restore(type, value, trace);
  }
  throw nb::python_error();
}

/// The work of allocate_method, which checked that `types` is set.
nb::object cuda_core_allocate(nb::handle self, nb::handle size, nb::handle stream)
{
  std::size_t bytes = 0;
  std::uintptr_t handle = 0;
  nb::object mr = nb::steal(fast_resource(self.ptr()));
  if (!mr.is_valid() || !small_uint(size.ptr(), bytes) ||
      !stream_handle(stream.ptr(), handle)) {
    // The general path checks the arguments (Python code, which may outlast interpreter
    // exit's wait, which releases `types`: what comes after is held here). The allocation
    // is made from here, so that no Python code runs between it and the handover.
    nb::object from_handle = nb::borrow(types->from_handle);
    nb::object kwnames     = nb::borrow(types->stream_kwnames);
    nb::object got = general(self.ptr(), types->allocate_general, {size.ptr()}, stream.ptr());
    // (size, the cuda.core stream, the nbrmm stream), from NbrmmMemoryResource.
    if (!PyTuple_CheckExact(got.ptr()) || PyTuple_GET_SIZE(got.ptr()) != 3) {
      throw nb::type_error("NbrmmMemoryResource._allocate_general returned no arguments");
    }
    nb::handle bytes_obj = PyTuple_GET_ITEM(got.ptr(), 0), on = PyTuple_GET_ITEM(got.ptr(), 1);
    nb::handle nb_stream = PyTuple_GET_ITEM(got.ptr(), 2);
    nb::object ptr_obj   = self.attr("_allocate")(bytes_obj, nb_stream);
    std::uintptr_t ptr   = 0;
    if (!pointer_value(ptr_obj.ptr(), ptr)) {
      nb::object upstream = self.attr("upstream_mr");
      throw nb::type_error((std::string{nb::type_name(upstream.type()).c_str()} +
                            ".allocate returned no pointer: got " +
                            nb::type_name(ptr_obj.type()).c_str())
                             .c_str());
    }
    return make_buffer(from_handle.ptr(), kwnames.ptr(), self, ptr, bytes_obj.ptr(), on.ptr(),
                       [&] { self.attr("_deallocate")(ptr_obj, bytes_obj, nb_stream); });
  }
  if (types == nullptr) {  // (stream_handle may run Python code: exit may have begun)
    throw nb::builtin_exception(nb::exception_type::runtime_error,
                                "the interpreter is shutting down: nbrmm no longer "
                                "allocates for cuda.core");
  }
  check_request(bytes, default_alignment, "size");
  cuda::stream_ref const on{reinterpret_cast<cudaStream_t>(handle)};
  std::uintptr_t const ptr = raw_allocate(mr, bytes, default_alignment, on);
  return make_buffer(types->from_handle, types->stream_kwnames, self, ptr, size.ptr(),
                     stream.ptr(),
                     [&] { raw_deallocate(mr, ptr, bytes, default_alignment, on); });
}

/// The work of deallocate_method, which checked that `types` is set.
void cuda_core_deallocate(nb::handle self, nb::handle ptr, nb::handle size, nb::handle stream)
{
  std::size_t address = 0, bytes = 0;
  std::uintptr_t handle = 0;
  nb::object mr = nb::steal(fast_resource(self.ptr()));
  if (!mr.is_valid() || !small_uint(ptr.ptr(), address) || !small_uint(size.ptr(), bytes) ||
      !stream_handle(stream.ptr(), handle)) {
    general(self.ptr(), types->deallocate_general, {ptr.ptr(), size.ptr()}, stream.ptr());
    return;
  }
  raw_deallocate(mr, address, bytes, default_alignment,
                 cuda::stream_ref{reinterpret_cast<cudaStream_t>(handle)});
}

// The methods, as CPython method descriptors of the adapter class (METH_FASTCALL |
// METH_KEYWORDS: no bound-method object, no dispatch layer between cuda.core's call and
// the work).

PyObject* interned(char const* text) { return PyUnicode_InternFromString(text); }

/// Sorts the arguments of `params` (see sort_arguments) and checks that each was given;
/// false with a TypeError (or MemoryError) set otherwise.
bool required_arguments(parameters const& params, PyObject* const* args, Py_ssize_t nargsf,
                        PyObject* kwnames, PyObject** slots) noexcept
{
  auto const flags = static_cast<std::size_t>(nargsf);
  if (sort_common_call(params, args, flags, kwnames, slots)) { return true; }  // (all given)
  if (!sort_arguments(params, args, flags, kwnames, slots)) {
    return false;
  }
  for (int i = 0; i < params.count; ++i) {
    if (slots[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() missing 1 required %s argument: '%S'",
                   params.function, i < params.positional ? "positional" : "keyword-only",
                   params.names[i]);
      return false;
    }
  }
  return true;
}

/// allocate(self, size, *, stream)
PyObject* allocate_method(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                          PyObject* kwnames) noexcept
{
  static PyObject* const names[] = {interned("size"), interned("stream")};
  static parameters const params{"allocate", names, 2, 1};
  PyObject* slots[2];
  if (!required_arguments(params, args, nargsf, kwnames, slots)) { return nullptr; }
  // The call runs Python code (cuda.core's, or the general path): counted as a call into
  // Python, so that interpreter exit waits for it to end (see gil.hpp); once exit began,
  // other threads are refused.
  python_call const python;
  if (!python.ok() || types == nullptr) {  // (null after exit: release_cuda_core_adapter)
    PyErr_SetString(PyExc_RuntimeError,
                    "the interpreter is shutting down: nbrmm no longer allocates for cuda.core");
    return nullptr;
  }
  try {
    return cuda_core_allocate(self, slots[0], slots[1]).release().ptr();
  } catch (...) {
    raise_current_exception();
    return nullptr;
  }
}

/// deallocate(self, ptr, size, *, stream)
PyObject* deallocate_method(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                            PyObject* kwnames) noexcept
{
  static PyObject* const names[] = {interned("ptr"), interned("size"), interned("stream")};
  static parameters const params{"deallocate", names, 3, 2};
  PyObject* slots[3];
  if (!required_arguments(params, args, nargsf, kwnames, slots)) { return nullptr; }
  python_call const python;  // as in allocate_method
  if (!python.ok() || types == nullptr) {  // at exit: nothing is freed then (nor by cuda.core)
    Py_RETURN_NONE;
  }
  if (any_handover()) { note_given_back(self, slots[0]); }
  try {
    cuda_core_deallocate(self, slots[0], slots[1], slots[2]);
    Py_RETURN_NONE;
  } catch (...) {
    raise_current_exception();
    return nullptr;
  }
}

PyMethodDef allocate_def{
  "allocate", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(allocate_method)),
  METH_FASTCALL | METH_KEYWORDS,
  R"doc(allocate($self, size, *, stream)
--

Allocate ``size`` bytes from the nbrmm resource, ordered on ``stream``.

Parameters
----------
size : int
    Bytes to allocate.
stream : cuda.core.Stream, cuda.core.graph.GraphBuilder or stream-like object
    The stream the allocation is ordered on; the buffer's deallocation is ordered on it
    too unless ``Buffer.close`` is given another.

Returns
-------
cuda.core.Buffer
    The memory; its ``memory_resource`` is this object.

Raises
------
TypeError, ValueError
    If ``size`` is not an int in ``[0, 2**64)``, or ``stream`` is not stream-like
    (nothing is allocated then).
MemoryError
    If the nbrmm resource cannot allocate (``nbrmm.OutOfMemory`` when out of memory).)doc"};

PyMethodDef deallocate_def{
  "deallocate", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(deallocate_method)),
  METH_FASTCALL | METH_KEYWORDS,
  R"doc(deallocate($self, ptr, size, *, stream)
--

Give memory back to the nbrmm resource, ordered on ``stream``.

cuda.core calls this when a buffer from :meth:`allocate` is closed or collected.

Parameters
----------
ptr : int
    The buffer's pointer.
size : int
    The buffer's size.
stream : cuda.core.Stream or stream-like object
    The stream the deallocation is ordered on.)doc"};

}  // namespace

void release_cuda_core_adapter() noexcept
{
  adapter_types* t = std::exchange(types, nullptr);
  if (t == nullptr) { return; }
  for (PyObject* o : {t->adapter, t->stream, t->from_handle, t->core_name, t->core_member,
                      t->cuda_stream_name, t->cuda_stream_method, t->stream_kwnames,
                      t->allocate_general, t->deallocate_general, t->marks[0].stream,
                      t->marks[1].stream}) {
    Py_XDECREF(o);
  }
  delete t;
}

void bind_cuda_core_adapter(nb::module_& m)
{
  if (handover_list == nullptr) {  // (once per process: every interpreter shares it)
    handover_list = new std::vector<handover>;
    handover_list->reserve(16);  // (no allocation per call in the common case)
  }
  m.def(
    "_cuda_core_adapter_setup",
    [](nb::handle adapter, nb::handle stream, nb::handle from_handle) {
      if (!PyType_Check(adapter.ptr()) || !PyType_Check(stream.ptr()) ||
          !PyCallable_Check(from_handle.ptr())) {
        throw nb::type_error("expected (the adapter class, cuda.core's Stream, Buffer.from_handle)");
      }
      auto* type = reinterpret_cast<PyTypeObject*>(adapter.ptr());
      nb::object allocate   = nb::steal(PyDescr_NewMethod(type, &allocate_def));
      nb::object deallocate = nb::steal(PyDescr_NewMethod(type, &deallocate_def));
      if (!allocate.is_valid() || !deallocate.is_valid()) { throw nb::python_error(); }
      auto* t             = new adapter_types{};
      t->adapter          = nb::borrow(adapter).release().ptr();
      t->stream           = nb::borrow(stream).release().ptr();
      t->from_handle      = nb::borrow(from_handle).release().ptr();
      t->core_name        = PyUnicode_InternFromString("_core");
      t->cuda_stream_name = PyUnicode_InternFromString("__cuda_stream__");
      t->stream_kwnames   = Py_BuildValue("(s)", "stream");
      t->allocate_general   = PyUnicode_InternFromString("_allocate_general");
      t->deallocate_general = PyUnicode_InternFromString("_deallocate_general");
      release_cuda_core_adapter();
      types = t;
      if (t->core_name != nullptr) {
        t->core_member = own_slot(t->adapter, t->core_name, t->core_offset);
      }
      if (t->cuda_stream_name != nullptr) {
        t->cuda_stream_method = own_method(t->stream, t->cuda_stream_name);
      }
      if (t->core_name == nullptr || t->cuda_stream_name == nullptr ||
          t->stream_kwnames == nullptr || t->allocate_general == nullptr ||
          t->deallocate_general == nullptr) {
        release_cuda_core_adapter();
        throw nb::python_error();
      }
      return nb::make_tuple(allocate, deallocate);
    },
    nb::arg("adapter"), nb::arg("stream"), nb::arg("from_handle"),
    nb::sig("def _cuda_core_adapter_setup(adapter: type, stream: type, from_handle: "
            "collections.abc.Callable[..., typing.Any]) -> "
            "tuple[types.MethodDescriptorType, types.MethodDescriptorType]"),
    "Register nbrmm.interop.NbrmmMemoryResource and the cuda.core objects its methods "
    "use (done by nbrmm.interop at import); returns the class's ``allocate`` and "
    "``deallocate`` methods (written in src/cuda_core_adapter.cpp).");
  m.def(
    "_cuda_core_stream_marks",
    []() -> std::uint64_t { return types != nullptr ? types->marks_made : 0; },
    "How many Stream marks the adapter's methods made since nbrmm.interop registered them "
    "(for tests).");
}

}  // namespace nbrmm
