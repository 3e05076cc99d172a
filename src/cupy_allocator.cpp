// The CuPy allocator hook behind nbrmm.allocators.cupy.
//
// CuPy calls its allocator with a size and expects a `cupy.cuda.MemoryPointer`. The hook
// does the whole allocation here: it reads CuPy's current stream through CuPy's own C API,
// allocates from the bound resource (or the current one, read from librmm's per-device
// map) with the GIL released, and returns a MemoryPointer to a small memory object.
//
// That memory object is an instance of `nbrmm.allocators.cupy.Memory`, a subclass of
// CuPy's `BaseMemory` created here. It co-owns the resource in C++ and holds the pointer,
// size and stream of the allocation, and frees the memory to that resource on that stream
// when CuPy drops it, whatever the current resource is by then. Per allocation, Python
// sees two new objects: the Memory and the MemoryPointer.
//
// CuPy's current stream is read through `cupy_backends.cuda.stream.get_stream_ptr(device)`
// when this CuPy has it: the record of every device's current stream that CuPy's own
// `get_current_stream_ptr` reads after asking CUDA for the current device. The hook knows
// the device already, so the lookup costs one thread-local read and no CUDA call.
//
// The MemoryPointer must be exactly CuPy's class, not a subclass: CuPy's kernel launcher
// accepts no other as a kernel argument (CUB reductions pass it allocator memory).
//
// Where CuPy's fields live inside its objects is found (and checked) once, by
// `_cupy_init`, from objects built through CuPy's public constructors; building a
// MemoryPointer falls back to calling its constructor whenever that check fails.
#include "hooks.hpp"

#include <structmember.h>

#include <cstring>
#include <new>
#include <string>
#include <utility>

#if PY_VERSION_HEX < 0x030C0000
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_READONLY READONLY
#endif

namespace nbrmm {
namespace {

// ------------------------------------------------------------------------------------
// What _cupy_init learns about CuPy
// ------------------------------------------------------------------------------------

using stream_ptr_fn        = std::intptr_t (*)();
using device_stream_ptr_fn = std::intptr_t (*)(int);
using stream_obj_fn        = PyObject* (*)(int, void*);

struct cupy_api {
  PyTypeObject* base_memory{};      ///< cupy.cuda.memory.BaseMemory
  PyTypeObject* memory_pointer{};   ///< cupy.cuda.memory.MemoryPointer
  PyObject* oom_error{};            ///< cupy.cuda.memory.OutOfMemoryError
  PyObject* get_current_stream{};   ///< cupy.cuda.stream.get_current_stream (Python)
  stream_ptr_fn current_stream_ptr{};  ///< CuPy's C API, when its signature is known
  /// cupy_backends' per-device lookup (its signature checked), or null.
  device_stream_ptr_fn device_stream_ptr{};
  bool by_device{false};               ///< the stream is read with device_stream_ptr
  stream_obj_fn current_stream{};      ///< CuPy's C API (new reference), idem
  PyTypeObject* memory_type{};      ///< nbrmm.allocators.cupy.Memory
  Py_ssize_t ptr_off{-1};           ///< BaseMemory.ptr (intptr_t)
  Py_ssize_t size_off{-1};          ///< BaseMemory.size (size_t)
  Py_ssize_t device_off{-1};        ///< BaseMemory.device_id (int)
  Py_ssize_t fields_off{-1};        ///< our fields inside a Memory
  bool fast_possible{false};        ///< MemoryPointer's fields were found and checked
  bool fast_pointer{false};         ///< MemoryPointer fields are written directly
  Py_ssize_t mp_ptr_off{-1};        ///< MemoryPointer.ptr (intptr_t)
  Py_ssize_t mp_device_off{-1};     ///< MemoryPointer.device_id (int)
  Py_ssize_t mp_mem_off{-1};        ///< MemoryPointer.mem (object)
  PyObject* empty_tuple{};
  PyObject* zero{};
};

cupy_api* cupy = nullptr;  // set once by _cupy_init; lives until the process exits

// nbrmm's exception classes (borrowed from the module, which outlives every call).
PyObject* out_of_memory_type = nullptr;
PyObject* bad_alloc_type     = nullptr;
PyObject* cuda_error_type    = nullptr;
PyObject* logic_error_type   = nullptr;

// ------------------------------------------------------------------------------------
// nbrmm.allocators.cupy.Memory
// ------------------------------------------------------------------------------------

/// The C++ part of a Memory object, placed after CuPy's BaseMemory fields.
struct memory_fields {
  /// The resource that allocated the memory (empty for 0 bytes): a share of the bound
  /// resource object's shared copy (see DeviceMemoryResource::shared), or a copy of the
  /// current resource.
  held_resource res;
  void* ptr{nullptr};          ///< the allocation (null for 0 bytes)
  std::size_t bytes{0};        ///< its size
  cudaStream_t stream{nullptr};  ///< the stream it was allocated on, and is freed on
  PyObject* keep{nullptr};     ///< an object keeping that stream alive (strong), or null
  bool caches{false};          ///< the resource is a caching one (deferred_frees::caches)
};

memory_fields* fields_of(PyObject* obj)
{
  return std::launder(
    reinterpret_cast<memory_fields*>(reinterpret_cast<char*>(obj) + cupy->fields_off));
}

template <class T>
void write_at(PyObject* obj, Py_ssize_t offset, T value)
{
  std::memcpy(reinterpret_cast<char*>(obj) + offset, &value, sizeof(T));
}

template <class T>
T read_at(PyObject* obj, Py_ssize_t offset)
{
  T value;
  std::memcpy(&value, reinterpret_cast<char*>(obj) + offset, sizeof(T));
  return value;
}

/// Freed Memory objects kept for reuse (BaseMemory holds no Python references, so a
/// freed object is plain storage). Guarded by the GIL; free-threaded builds keep none.
#if defined(Py_GIL_DISABLED)
constexpr int memory_freelist_capacity = 0;
#else
constexpr int memory_freelist_capacity = 64;
#endif
PyObject* memory_freelist[memory_freelist_capacity > 0 ? memory_freelist_capacity : 1];
int memory_freelist_count = 0;

void memory_dealloc(PyObject* self)
{
  PyTypeObject* type = Py_TYPE(self);
  memory_fields* f   = fields_of(self);
  int const device   = read_at<int>(self, cupy->device_off);
  block const b{f->ptr, f->ptr, f->bytes, default_alignment};
  if (f->ptr != nullptr && f->caches &&
      deferred_frees::defer(f->res, b, f->stream, device, nullptr)) {
    f->ptr = nullptr;  // the queue frees it (and keeps the resource alive now)
  }
  if (f->ptr != nullptr || !f->res.empty()) {
    gil_release release;
    if (f->ptr != nullptr) {
      free_block(f->res.get(), cuda::stream_ref{f->stream}, b, device);
      f->ptr = nullptr;
    }
    f->res.reset();  // may be the last owner of the resource: free it here too
  }
  PyObject* keep = f->keep;  // released only now: the stream had to outlive the free
  f->~memory_fields();
  Py_XDECREF(keep);
  if (memory_freelist_count < memory_freelist_capacity && type == cupy->memory_type) {
    memory_freelist[memory_freelist_count++] = self;
  } else {
    type->tp_free(self);
  }
  Py_DECREF(type);
}

PyObject* memory_stream_handle(PyObject* self, void*)
{
  return PyLong_FromVoidPtr(fields_of(self)->stream);
}

PyGetSetDef memory_getset[] = {
  {"stream_handle", memory_stream_handle, nullptr,
   "The stream (``cudaStream_t`` as an int) the memory was allocated on and is freed on.",
   nullptr},
  {nullptr, nullptr, nullptr, nullptr, nullptr}};

char const memory_doc[] =
  "Device memory allocated by an nbrmm CuPy allocator.\n\n"
  "A ``cupy.cuda.memory.BaseMemory`` that owns its allocation: when CuPy drops it, the\n"
  "memory goes back to the resource that allocated it, on the stream it was allocated on.";

/// A new Memory object with empty fields (owns nothing yet).
PyObject* new_memory()
{
  PyTypeObject* type = cupy->memory_type;
  PyObject* obj      = nullptr;
  if (memory_freelist_count > 0) {
    obj = PyObject_Init(memory_freelist[--memory_freelist_count], type);  // new reference
  } else {
    obj = type->tp_alloc(type, 0);
    if (obj == nullptr) { throw nb::python_error(); }
  }
  new (reinterpret_cast<char*>(obj) + cupy->fields_off) memory_fields{};
  return obj;
}

void set_base_fields(PyObject* mem, void* ptr, std::size_t size, int device)
{
  write_at(mem, cupy->ptr_off, reinterpret_cast<std::intptr_t>(ptr));
  write_at(mem, cupy->size_off, size);
  write_at(mem, cupy->device_off, device);
}

/// A MemoryPointer to the start of `mem` (a reference this function steals).
PyObject* make_pointer(PyObject* mem, void* ptr, int device)
{
  if (cupy->fast_pointer) {
    PyTypeObject* type = cupy->memory_pointer;
    PyObject* mp       = type->tp_new(type, cupy->empty_tuple, nullptr);
    if (mp == nullptr) {
      Py_DECREF(mem);
      return nullptr;
    }
    write_at(mp, cupy->mp_ptr_off, reinterpret_cast<std::intptr_t>(ptr));
    write_at(mp, cupy->mp_device_off, device);
    auto* old = read_at<PyObject*>(mp, cupy->mp_mem_off);
    write_at(mp, cupy->mp_mem_off, mem);  // the pointer takes our reference
    Py_XDECREF(old);
    return mp;
  }
  PyObject* args[] = {mem, cupy->zero};
  PyObject* mp     = PyObject_Vectorcall(reinterpret_cast<PyObject*>(cupy->memory_pointer), args, 2,
                                     nullptr);
  Py_DECREF(mem);
  return mp;
}

// ------------------------------------------------------------------------------------
// Learning CuPy's layout
// ------------------------------------------------------------------------------------

/// The offset at which `value` is stored in `obj`, searching the instance body; -1 unless
/// exactly one place holds it.
template <class T>
Py_ssize_t find_unique(PyObject* obj, T value)
{
  Py_ssize_t const end = Py_TYPE(obj)->tp_basicsize;
  Py_ssize_t found     = -1;
  for (auto off = static_cast<Py_ssize_t>(sizeof(PyObject));
       off + static_cast<Py_ssize_t>(sizeof(T)) <= end;
       off += static_cast<Py_ssize_t>(alignof(T))) {
    if (read_at<T>(obj, off) == value) {
      if (found >= 0) { return -1; }
      found = off;
    }
  }
  return found;
}

[[noreturn]] void unsupported(std::string const& why)
{
  throw nb::import_error(("nbrmm.allocators.cupy does not support this CuPy version: " + why)
                           .c_str());
}

// Distinctive values used to find fields.
constexpr std::intptr_t probe_ptr = 0x1234'5678'9abc'def0;
constexpr std::size_t probe_size  = 0x0fed'cba9'8765'4321;
constexpr int probe_device        = 0x2bad'f00d;

void learn_base_memory(cupy_api& api)
{
  PyTypeObject* base = api.base_memory;
  if (base->tp_itemsize != 0 || (base->tp_flags & Py_TPFLAGS_BASETYPE) == 0) {
    unsupported("BaseMemory cannot be subclassed");
  }
  nb::object probe = nb::borrow(reinterpret_cast<PyObject*>(base))();
  probe.attr("ptr")       = nb::int_(probe_ptr);
  probe.attr("size")      = nb::int_(probe_size);
  probe.attr("device_id") = nb::int_(probe_device);
  api.ptr_off    = find_unique(probe.ptr(), probe_ptr);
  api.size_off   = find_unique(probe.ptr(), probe_size);
  api.device_off = find_unique(probe.ptr(), probe_device);
  if (api.ptr_off < 0 || api.size_off < 0 || api.device_off < 0) {
    unsupported("the fields of BaseMemory were not found");
  }
}

void make_memory_type(cupy_api& api)
{
  Py_ssize_t const align = alignof(memory_fields);
  api.fields_off = (api.base_memory->tp_basicsize + align - 1) / align * align;
  static PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(memory_dealloc)},
                                {Py_tp_getset, memory_getset},
                                {Py_tp_doc, const_cast<char*>(memory_doc)},
                                {0, nullptr}};
  static PyType_Spec spec{"nbrmm.allocators.cupy.Memory", 0, 0,
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, slots};
  spec.basicsize =
    static_cast<int>(api.fields_off + static_cast<Py_ssize_t>(sizeof(memory_fields)));
  nb::object bases = nb::make_tuple(nb::handle(reinterpret_cast<PyObject*>(api.base_memory)));
  PyObject* type   = PyType_FromSpecWithBases(&spec, bases.ptr());
  if (type == nullptr) { throw nb::python_error(); }
  api.memory_type = reinterpret_cast<PyTypeObject*>(type);
}

/// Finds MemoryPointer's fields in one built by its constructor, then checks that one
/// built by writing them reads back the same through CuPy's own accessors. Runs once
/// `cupy` is set (with the fast path off).
bool learn_memory_pointer()
{
  cupy_api& api = *cupy;
  nb::handle mp_type{reinterpret_cast<PyObject*>(api.memory_pointer)};
  nb::object mem = nb::steal(new_memory());
  set_base_fields(mem.ptr(), reinterpret_cast<void*>(probe_ptr), probe_size, probe_device);
  nb::object made = mp_type(mem, 0);
  if (Py_TYPE(made.ptr()) != api.memory_pointer) { return false; }
  api.mp_ptr_off    = find_unique(made.ptr(), probe_ptr);
  api.mp_device_off = find_unique(made.ptr(), probe_device);
  api.mp_mem_off    = find_unique(made.ptr(), mem.ptr());
  if (api.mp_ptr_off < 0 || api.mp_device_off < 0 || api.mp_mem_off < 0) { return false; }

  PyObject* fresh = api.memory_pointer->tp_new(api.memory_pointer, api.empty_tuple, nullptr);
  if (fresh == nullptr) { throw nb::python_error(); }
  nb::object fresh_obj = nb::steal(fresh);
  auto* initial        = read_at<PyObject*>(fresh, api.mp_mem_off);
  if (read_at<std::intptr_t>(fresh, api.mp_ptr_off) != 0 ||
      read_at<int>(fresh, api.mp_device_off) != 0 || (initial != nullptr && initial != Py_None)) {
    return false;
  }
  api.fast_pointer = true;
  PyObject* raw =
    make_pointer(mem.inc_ref().ptr(), reinterpret_cast<void*>(probe_ptr), probe_device);
  api.fast_pointer = false;
  if (raw == nullptr) { throw nb::python_error(); }
  nb::object built = nb::steal(raw);
  return nb::cast<std::intptr_t>(built.attr("ptr")) == probe_ptr &&
         nb::cast<int>(built.attr("device_id")) == probe_device && built.attr("mem").is(mem);
}

/// CuPy's C function `name` from `module.__pyx_capi__`, when its signature is `expected`
/// (or, when `suffix` is given, one that starts with `expected` and ends with `suffix`).
void* capi_function(nb::handle module, char const* name, std::string const& expected,
                    std::string const& suffix = {})
{
  nb::object capi = nb::getattr(module, "__pyx_capi__", nb::none());
  if (!PyDict_Check(capi.ptr())) { return nullptr; }
  PyObject* capsule = PyDict_GetItemString(capi.ptr(), name);  // borrowed
  if (capsule == nullptr || !PyCapsule_CheckExact(capsule)) { return nullptr; }
  char const* sig = PyCapsule_GetName(capsule);
  if (sig == nullptr) { return nullptr; }
  std::string const s{sig};
  auto const ends_with = [&](std::string const& tail) {
    return s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  bool const ok = suffix.empty() ? s == expected
                                 : s.size() >= expected.size() + suffix.size() &&
                                     s.compare(0, expected.size(), expected) == 0 &&
                                     ends_with(suffix);
  if (!ok) { return nullptr; }
  void* fn = PyCapsule_GetPointer(capsule, sig);
  if (fn == nullptr) { PyErr_Clear(); }
  return fn;
}

void cupy_learn(nb::handle memory_module, nb::handle stream_module, nb::handle backends_stream)
{
  auto api = std::make_unique<cupy_api>();
  auto type_attr = [&](char const* name) {
    nb::object t = memory_module.attr(name);
    if (!PyType_Check(t.ptr())) {
      unsupported(std::string{"cupy.cuda.memory."} + name + " is not a class");
    }
    return reinterpret_cast<PyTypeObject*>(t.release().ptr());
  };
  api->base_memory        = type_attr("BaseMemory");
  api->memory_pointer     = type_attr("MemoryPointer");
  api->oom_error          = nb::object(memory_module.attr("OutOfMemoryError")).release().ptr();
  api->get_current_stream = nb::object(stream_module.attr("get_current_stream")).release().ptr();
  api->current_stream_ptr = reinterpret_cast<stream_ptr_fn>(
    capi_function(stream_module, "get_current_stream_ptr", "intptr_t (void)"));
  api->current_stream = reinterpret_cast<stream_obj_fn>(capi_function(
    stream_module, "get_current_stream", "PyObject *(int __pyx_skip_dispatch, struct ",
    "*__pyx_optional_args)"));
  if (!backends_stream.is_none()) {
    api->device_stream_ptr = reinterpret_cast<device_stream_ptr_fn>(
      capi_function(backends_stream, "get_stream_ptr", "intptr_t (int)"));
  }
  api->empty_tuple = PyTuple_New(0);
  api->zero        = PyLong_FromLong(0);
  if (api->empty_tuple == nullptr || api->zero == nullptr) { throw nb::python_error(); }

  learn_base_memory(*api);
  make_memory_type(*api);
  cupy = api.release();
  cupy->fast_possible = learn_memory_pointer();
}

void cupy_init(nb::handle memory_module,
               nb::handle stream_module,
               nb::handle backends_stream,
               bool fast_pointer,
               bool stream_by_device)
{
  if (cupy == nullptr) { cupy_learn(memory_module, stream_module, backends_stream); }
  cupy->fast_pointer = fast_pointer && cupy->fast_possible;
  cupy->by_device    = stream_by_device && cupy->device_stream_ptr != nullptr;
}

// ------------------------------------------------------------------------------------
// The allocator object
// ------------------------------------------------------------------------------------

struct CupyAllocator {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* mr;          ///< the bound resource object, or null: the current resource
  PyObject* stream;      ///< the fixed nbrmm.Stream, or null: CuPy's current stream
  /// A share of the bound resource object's shared copy (owned), or null.
  std::shared_ptr<device_resource>* shared;
  cudaStream_t handle;   ///< the fixed stream's handle
  int device;            ///< the device the bound resource serves (-1: any)
  bool caches;           ///< the bound resource is a caching one (deferred_frees::caches)
};

PyTypeObject* allocator_type = nullptr;

[[noreturn]] void raise_now(PyObject* type, std::string const& message)
{
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

/// CuPy's current stream; `keep` receives a new reference to its stream object when that
/// stream is not one of CUDA's default streams (so it outlives the allocation).
cudaStream_t cupy_current_stream(int device, PyObject*& keep)
{
  std::intptr_t handle = 0;
  if (cupy->by_device || cupy->current_stream_ptr != nullptr) {
    // CuPy builds declare these C functions `except *` or `except? -1`, and the capsule's
    // signature does not say which: an error can come with any return value.
    handle = cupy->by_device ? cupy->device_stream_ptr(device) : cupy->current_stream_ptr();
    if (PyErr_Occurred() != nullptr) { throw nb::python_error(); }
  } else {
    nb::object s = nb::steal(PyObject_CallNoArgs(cupy->get_current_stream));
    if (!s.is_valid()) { throw nb::python_error(); }
    handle = nb::cast<std::intptr_t>(s.attr("ptr"));
    keep   = s.release().ptr();
  }
  auto const h = reinterpret_cast<cudaStream_t>(handle);
  if (keep == nullptr && h != nullptr && h != cudaStreamLegacy && h != cudaStreamPerThread) {
    keep = cupy->current_stream != nullptr ? cupy->current_stream(0, nullptr)
                                           : PyObject_CallNoArgs(cupy->get_current_stream);
    if (keep == nullptr) { throw nb::python_error(); }
  }
  return h;
}

PyObject* allocate(CupyAllocator* self, std::size_t nbytes)
{
  if (cupy == nullptr) {
    raise_now(PyExc_RuntimeError, "import nbrmm.allocators.cupy before using a CuPy allocator");
  }
  int const device = current_device();
  if (self->shared != nullptr && self->device >= 0 && self->device != device) {
    raise_now(PyExc_ValueError, "mr: the resource serves device " + std::to_string(self->device) +
                                  ", but CuPy is allocating on device " + std::to_string(device));
  }
  check_request(nbytes, default_alignment, "nbytes");
  if (inside_callback()) {
    check_reentry(self->mr != nullptr ? nb::handle{self->mr}
                                      : resource_or_current(nb::none(), "mr"),
                  "CuPy allocator");
  }
  PyObject* keep       = nullptr;
  cudaStream_t stream  = nullptr;
  if (self->stream != nullptr) {
    stream = self->handle;
    keep   = Py_NewRef(reinterpret_cast<PyObject*>(self));
  } else {
    stream = cupy_current_stream(device, keep);
  }
  PyObject* mem;
  try {
    mem = new_memory();
  } catch (...) {
    Py_XDECREF(keep);
    throw;
  }
  memory_fields* f = fields_of(mem);
  f->keep          = keep;
  f->stream        = stream;
  f->bytes         = nbytes;
  if (nbytes != 0) {
    try {
      if (self->shared != nullptr) {
        f->res    = held_resource{*self->shared};
        f->caches = self->caches;
      } else {
        f->res    = held_resource{hooks::current_resource(device)};
        f->caches = deferred_frees::caches(f->res.get());
      }
      gil_release release;
      f->ptr = f->res->allocate(cuda::stream_ref{stream}, nbytes, default_alignment);
    } catch (...) {
      Py_DECREF(mem);
      throw;
    }
  }
  set_base_fields(mem, f->ptr, nbytes, device);
  return make_pointer(mem, f->ptr, device);
}

/// Raises CuPy's OutOfMemoryError for `nbytes`, caused by `cause` (stolen; may be null).
void raise_cupy_oom(std::size_t nbytes, PyObject* cause)
{
  PyObject* exc = PyObject_CallFunction(cupy->oom_error, "nn", static_cast<Py_ssize_t>(nbytes),
                                        static_cast<Py_ssize_t>(-1));
  if (exc == nullptr) {
    Py_XDECREF(cause);
    return;
  }
  if (cause != nullptr) { PyException_SetCause(exc, cause); }
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
  Py_DECREF(exc);
}

PyObject* new_exception(PyObject* type, char const* message)
{
  PyObject* exc = PyObject_CallFunction(type, "s", message);
  if (exc == nullptr) { PyErr_Clear(); }
  return exc;
}

/// Sets the Python error for the C++ exception being handled.
void set_error(std::size_t nbytes)
{
  try {
    throw;
  } catch (nb::python_error& e) {
    bool const oom = cupy != nullptr && e.matches(PyExc_MemoryError) && !e.matches(cupy->oom_error);
    e.restore();
    if (oom) {
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      PyErr_NormalizeException(&type, &value, &tb);
      if (tb != nullptr) { PyException_SetTraceback(value, tb); }
      Py_XDECREF(type);
      Py_XDECREF(tb);
      raise_cupy_oom(nbytes, value);
    }
  } catch (rmm::out_of_memory const& e) {
    if (cupy == nullptr) { return PyErr_SetString(out_of_memory_type, e.what()); }
    raise_cupy_oom(nbytes, new_exception(out_of_memory_type, e.what()));
  } catch (std::bad_alloc const& e) {
    if (cupy == nullptr) { return PyErr_SetString(bad_alloc_type, e.what()); }
    raise_cupy_oom(nbytes, new_exception(bad_alloc_type, e.what()));
  } catch (rmm::cuda_error const& e) {
    PyErr_SetString(cuda_error_type, e.what());
  } catch (rmm::logic_error const& e) {
    PyErr_SetString(logic_error_type, e.what());
  } catch (std::invalid_argument const& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (std::exception const& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "nbrmm: unknown C++ exception in a CuPy allocator");
  }
}

PyObject* allocator_vectorcall(PyObject* callable, PyObject* const* args, std::size_t nargsf,
                               PyObject* kwnames)
{
  if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0)) {
    PyErr_SetString(PyExc_TypeError,
                    "a CuPy allocator takes exactly one argument: the size in bytes");
    return nullptr;
  }
  PyObject* arg = args[0];
  std::size_t nbytes;
  if (PyLong_CheckExact(arg)) {
    nbytes = PyLong_AsSize_t(arg);
  } else {
    if (PyBool_Check(arg) || !PyIndex_Check(arg)) {
      PyErr_Format(PyExc_TypeError, "nbytes: expected an int, got %s", Py_TYPE(arg)->tp_name);
      return nullptr;
    }
    PyObject* index = PyNumber_Index(arg);
    if (index == nullptr) { return nullptr; }
    nbytes = PyLong_AsSize_t(index);
    Py_DECREF(index);
  }
  if (nbytes == static_cast<std::size_t>(-1) && PyErr_Occurred() != nullptr) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
      PyErr_Clear();
      PyErr_SetString(PyExc_ValueError, "nbytes: must be a non-negative size that fits in size_t");
    }
    return nullptr;
  }
  try {
    return allocate(reinterpret_cast<CupyAllocator*>(callable), nbytes);
  } catch (...) {
    set_error(nbytes);
    return nullptr;
  }
}

int allocator_traverse(PyObject* self, visitproc visit, void* arg)
{
  auto* a = reinterpret_cast<CupyAllocator*>(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(a->mr);
  Py_VISIT(a->stream);
  return 0;
}

int allocator_clear(PyObject* self)
{
  auto* a = reinterpret_cast<CupyAllocator*>(self);
  Py_CLEAR(a->mr);
  Py_CLEAR(a->stream);
  return 0;
}

void allocator_dealloc(PyObject* self)
{
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  auto* a = reinterpret_cast<CupyAllocator*>(self);
  allocator_clear(self);
  if (auto* shared = std::exchange(a->shared, nullptr)) {
    gil_release release;
    delete shared;
  }
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* allocator_get_mr(PyObject* self, void*)
{
  auto* a = reinterpret_cast<CupyAllocator*>(self);
  return Py_NewRef(a->mr != nullptr ? a->mr : Py_None);
}

PyObject* allocator_get_stream(PyObject* self, void*)
{
  auto* a = reinterpret_cast<CupyAllocator*>(self);
  return Py_NewRef(a->stream != nullptr ? a->stream : Py_None);
}

PyObject* allocator_repr(PyObject* self)
{
  auto* a = reinterpret_cast<CupyAllocator*>(self);
  return PyUnicode_FromFormat("<nbrmm.allocators.cupy.CupyAllocator mr=%R stream=%R>",
                              a->mr != nullptr ? a->mr : Py_None,
                              a->stream != nullptr ? a->stream : Py_None);
}

PyMemberDef allocator_members[] = {
  {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(CupyAllocator, vectorcall), Py_READONLY,
   nullptr},
  {nullptr, 0, 0, 0, nullptr}};

PyGetSetDef allocator_getset[] = {
  {"mr", allocator_get_mr, nullptr,
   "The bound resource, or None: the current device resource at each allocation.", nullptr},
  {"stream", allocator_get_stream, nullptr,
   "The fixed stream (an nbrmm.Stream), or None: CuPy's current stream at each allocation.",
   nullptr},
  {nullptr, nullptr, nullptr, nullptr, nullptr}};

char const allocator_doc[] =
  "A CuPy allocator: ``allocator(nbytes) -> cupy.cuda.MemoryPointer``.\n\n"
  "Use it with ``cupy.cuda.set_allocator`` or ``cupy.cuda.using_allocator``. Created by\n"
  "``nbrmm.allocators.cupy.cupy_allocator(mr=None, stream=None)``.";

PyType_Slot allocator_slots[] = {
  {Py_tp_dealloc, reinterpret_cast<void*>(allocator_dealloc)},
  {Py_tp_traverse, reinterpret_cast<void*>(allocator_traverse)},
  {Py_tp_clear, reinterpret_cast<void*>(allocator_clear)},
  {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
  {Py_tp_repr, reinterpret_cast<void*>(allocator_repr)},
  {Py_tp_members, allocator_members},
  {Py_tp_getset, allocator_getset},
  {Py_tp_doc, const_cast<char*>(allocator_doc)},
  {0, nullptr}};

PyType_Spec allocator_spec{"nbrmm.allocators.cupy.CupyAllocator", sizeof(CupyAllocator), 0,
                           Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                             Py_TPFLAGS_DISALLOW_INSTANTIATION,
                           allocator_slots};

nb::object make_allocator(nb::handle mr, nb::handle stream)
{
  std::shared_ptr<device_resource>* shared = nullptr;
  int device                               = -1;
  bool caches                              = false;
  if (!mr.is_none()) {
    DeviceMemoryResource& r = resource_arg(mr, "mr");
    shared                  = new std::shared_ptr<device_resource>{r.shared()};
    device                  = r.device;
    caches                  = r.caches();
  }
  nb::object stream_obj;
  cudaStream_t handle = nullptr;
  try {
    if (!stream.is_none()) {
      stream_obj = stream_object(stream, "stream");
      handle     = nb::inst_ptr<Stream>(stream_obj)->handle;
    }
  } catch (...) {
    delete shared;
    throw;
  }
  auto* obj = PyObject_GC_New(CupyAllocator, allocator_type);
  if (obj == nullptr) {
    delete shared;
    throw nb::python_error();
  }
  obj->vectorcall = allocator_vectorcall;
  obj->mr         = mr.is_none() ? nullptr : Py_NewRef(mr.ptr());
  obj->stream     = stream_obj.is_valid() ? stream_obj.release().ptr() : nullptr;
  obj->shared     = shared;
  obj->handle     = handle;
  obj->device     = device;
  obj->caches     = caches;
  PyObject_GC_Track(obj);
  return nb::steal(reinterpret_cast<PyObject*>(obj));
}

}  // namespace

void bind_cupy_allocator(nb::module_& m)
{
  out_of_memory_type = m.attr("OutOfMemory").ptr();
  bad_alloc_type     = m.attr("BadAlloc").ptr();
  cuda_error_type    = m.attr("CudaError").ptr();
  logic_error_type   = m.attr("LogicError").ptr();

  allocator_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&allocator_spec));
  if (allocator_type == nullptr) { throw nb::python_error(); }
  // Every allocator uses the type through this pointer, which keeps it alive until exit.

  m.def("_cupy_init", &cupy_init, nb::arg("memory_module"), nb::arg("stream_module"),
        nb::arg("backends_stream_module").none() = nb::none(), nb::arg("fast_pointer") = true,
        nb::arg("stream_by_device") = true,
        R"doc(Prepare the CuPy allocator hook for CuPy's ``cupy.cuda.memory`` module.

Called by ``nbrmm.allocators.cupy`` at import, with ``cupy.cuda.stream`` and
``cupy_backends.cuda.stream`` (None where CuPy has no such module). What is learned
about CuPy is learned once; later calls only switch the paths below.

``fast_pointer=False`` makes every MemoryPointer be built through its constructor, and
``stream_by_device=False`` makes the current stream be read through
``cupy.cuda.stream``'s ``get_current_stream_ptr`` (the slower reference paths).

Raises
------
ImportError
    If this CuPy's memory classes cannot be used.)doc");

  m.def(
    "_cupy_fast_pointer", []() { return cupy != nullptr && cupy->fast_pointer; },
    "Whether MemoryPointers are built by writing their fields (checked by ``_cupy_init``).");

  m.def(
    "_cupy_stream_by_device", []() { return cupy != nullptr && cupy->by_device; },
    "Whether CuPy's current stream is read per device, through ``cupy_backends``.");

  m.def(
    "_cupy_memory_type",
    []() -> nb::object {
      if (cupy == nullptr) { return nb::none(); }
      return nb::borrow(reinterpret_cast<PyObject*>(cupy->memory_type));
    },
    "The class of the memory objects the CuPy hook creates (None before ``_cupy_init``).");

  m.def("_cupy_allocator", &make_allocator, nb::arg("mr").none() = nb::none(),
        nb::arg("stream").none() = nb::none(),
        R"doc(A CuPy allocator bound to ``mr`` (None: the current device resource at each
allocation) and ``stream`` (None: CuPy's current stream at each allocation).

Raises
------
TypeError
    If ``mr`` is not a resource or ``stream`` is not stream-like.)doc");
}

}  // namespace nbrmm
