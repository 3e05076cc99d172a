// The CuPy allocator hook behind nbrmm.allocators.cupy.
//
// CuPy calls its allocator with a size and expects a `cupy.cuda.MemoryPointer`. The hook
// does the whole allocation here: it reads CuPy's current stream through CuPy's C API,
// allocates from the bound resource (or the current one, read from librmm's per-device
// map) with the GIL released, and returns a MemoryPointer to a small memory object.
//
// That memory object is an instance of `nbrmm.allocators.cupy.Memory`, a subclass of
// CuPy's `BaseMemory` created here, whose C part (after BaseMemory's instance, whose size
// CuPy's type reports) co-owns the resource and holds the pointer, size and stream of the
// allocation; it frees the memory to that resource on that stream when CuPy drops it,
// whatever the current resource is by then. Per allocation, Python sees two new objects:
// the Memory and the MemoryPointer.
//
// Only CuPy's public API is used: BaseMemory's public attributes (`ptr`, `size`,
// `device_id`) are set as attributes (through the data descriptors that setattr would
// call, found once, where every type that resolves them is immutable), the MemoryPointer
// is made by its constructor (CuPy's kernel launcher accepts no subclass of it), and
// CuPy's current stream is read through the functions its Cython modules export for
// `cimport` (`__pyx_capi__`): `cupy_backends.cuda.stream.get_stream_ptr(device)` where
// this CuPy has it (one thread-local read for a known device), else
// `cupy.cuda.stream.get_current_stream_ptr`.
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
  Py_ssize_t fields_off{-1};        ///< our fields inside a Memory
  PyObject* ptr_name{};             ///< "ptr", "size", "device_id" (interned)
  PyObject* size_name{};
  PyObject* device_name{};
  /// BaseMemory's data descriptors of those attributes, where the types that resolve them
  /// cannot change (then setting one is calling its __set__, as object.__setattr__
  /// would); null: set through setattr.
  PyObject* ptr_desc{};
  PyObject* size_desc{};
  PyObject* device_desc{};
  PyObject* zero{};
};

cupy_api* cupy = nullptr;  // set once by _cupy_init; lives until the process exits


// ------------------------------------------------------------------------------------
// nbrmm.allocators.cupy.Memory
// ------------------------------------------------------------------------------------

/// The C++ part of a Memory object, placed after CuPy's BaseMemory instance.
struct memory_fields {
  /// The resource that allocated the memory (empty for 0 bytes): a share of the bound
  /// resource object's shared copy (see DeviceMemoryResource::shared), or a copy of the
  /// current resource.
  held_resource res;
  void* ptr{nullptr};          ///< the allocation (null for 0 bytes)
  std::size_t bytes{0};        ///< its size
  cudaStream_t stream{nullptr};  ///< the stream it was allocated on, and is freed on
  int device{-1};              ///< the device it lives on
  PyObject* keep{nullptr};     ///< an object keeping that stream alive (strong), or null
  /// The bound resource object whose shared copy `res` shares (strong), or null: copies
  /// of a Python-made resource carry their object (see resource.hpp).
  PyObject* owner{nullptr};
  bool caches{false};          ///< the resource is a caching one (deferred_frees::caches)
};

memory_fields* fields_of(PyObject* obj)
{
  return std::launder(
    reinterpret_cast<memory_fields*>(reinterpret_cast<char*>(obj) + cupy->fields_off));
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
  block const b{f->ptr, f->ptr, f->bytes, default_alignment};
  auto* counted = f->owner != nullptr ? nb::inst_ptr<DeviceMemoryResource>(f->owner) : nullptr;
  if (f->ptr != nullptr && f->caches &&
      deferred_frees::defer(f->res, b, f->stream, f->device, counted)) {
    f->ptr = nullptr;  // the queue frees it (and keeps the resource alive now)
  }
  if (f->ptr != nullptr || !f->res.empty()) {
    gil_release release;
    if (f->ptr != nullptr) {
      free_block(f->res.get(), cuda::stream_ref{f->stream}, b, f->device);
      f->ptr = nullptr;
    }
    f->res.reset();  // may be the last owner of the resource: free it here too
  }
  PyObject* keep  = f->keep;  // released only now: the stream had to outlive the free
  PyObject* owner = f->owner;
  f->~memory_fields();
  Py_XDECREF(keep);
  Py_XDECREF(owner);
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

PyObject* memory_mr(PyObject* self, void*)
{
  PyObject* owner = fields_of(self)->owner;
  return Py_NewRef(owner != nullptr ? owner : Py_None);
}

PyGetSetDef memory_getset[] = {
  {"stream_handle", memory_stream_handle, nullptr,
   "The stream (``cudaStream_t`` as an int) the memory was allocated on and is freed on.",
   nullptr},
  {"mr", memory_mr, nullptr,
   "The resource the allocator was bound to (None for an allocator of the current "
   "resource).",
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

/// Sets BaseMemory's public attributes of `mem`.
void set_base_fields(PyObject* mem, void* ptr, std::size_t size, int device)
{
  auto set = [mem](PyObject* desc, PyObject* name, PyObject* value) {
    if (value == nullptr) { throw nb::python_error(); }
    int const rc = desc != nullptr ? Py_TYPE(desc)->tp_descr_set(desc, mem, value)
                                   : PyObject_SetAttr(mem, name, value);
    Py_DECREF(value);
    if (rc != 0) { throw nb::python_error(); }
  };
  set(cupy->ptr_desc, cupy->ptr_name, PyLong_FromVoidPtr(ptr));
  set(cupy->size_desc, cupy->size_name, PyLong_FromSize_t(size));
  set(cupy->device_desc, cupy->device_name, PyLong_FromLong(device));
}

/// A MemoryPointer to the start of `mem` (a reference this function steals).
PyObject* make_pointer(PyObject* mem)
{
  PyObject* args[] = {mem, cupy->zero};
  PyObject* mp     = PyObject_Vectorcall(reinterpret_cast<PyObject*>(cupy->memory_pointer), args, 2,
                                     nullptr);
  Py_DECREF(mem);
  return mp;
}

// ------------------------------------------------------------------------------------
// Learning CuPy's classes
// ------------------------------------------------------------------------------------

[[noreturn]] void unsupported(std::string const& why)
{
  throw nb::import_error(("nbrmm.allocators.cupy does not support this CuPy version: " + why)
                           .c_str());
}

void make_memory_type(cupy_api& api)
{
  PyTypeObject* base = api.base_memory;
  if (base->tp_itemsize != 0 || (base->tp_flags & Py_TPFLAGS_BASETYPE) == 0) {
    unsupported("BaseMemory cannot be subclassed");
  }
  Py_ssize_t const align = alignof(memory_fields);
  api.fields_off = (base->tp_basicsize + align - 1) / align * align;
  static PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(memory_dealloc)},
                                {Py_tp_getset, memory_getset},
                                {Py_tp_doc, const_cast<char*>(memory_doc)},
                                {0, nullptr}};
  static PyType_Spec spec{
    "nbrmm.allocators.cupy.Memory", 0, 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE, slots};
  spec.basicsize =
    static_cast<int>(api.fields_off + static_cast<Py_ssize_t>(sizeof(memory_fields)));
  nb::object bases = nb::make_tuple(nb::handle(reinterpret_cast<PyObject*>(base)));
  PyObject* type   = PyType_FromSpecWithBases(&spec, bases.ptr());
  if (type == nullptr) { throw nb::python_error(); }
  api.memory_type = reinterpret_cast<PyTypeObject*>(type);
}

/// The data descriptor that `setattr(memory, name, value)` calls (object's setattr calls
/// a data descriptor of the type before looking at any instance dict), when every type
/// searched for it is immutable, so that it stays the one; else null. A new reference.
PyObject* fixed_data_descriptor(PyTypeObject* type, PyObject* name)
{
  if (type->tp_setattro != PyObject_GenericSetAttr) { return nullptr; }
  PyObject* mro = type->tp_mro;
  if (mro == nullptr || !PyTuple_Check(mro)) { return nullptr; }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* t = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if ((t->tp_flags & Py_TPFLAGS_IMMUTABLETYPE) == 0 || t->tp_dict == nullptr) {
      return nullptr;
    }
    PyObject* found = PyDict_GetItemWithError(t->tp_dict, name);  // borrowed
    if (found == nullptr) {
      if (PyErr_Occurred() != nullptr) { throw nb::python_error(); }
      continue;
    }
    return Py_TYPE(found)->tp_descr_set != nullptr ? Py_NewRef(found) : nullptr;
  }
  return nullptr;
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
  api->ptr_name    = PyUnicode_InternFromString("ptr");
  api->size_name   = PyUnicode_InternFromString("size");
  api->device_name = PyUnicode_InternFromString("device_id");
  api->zero        = PyLong_FromLong(0);
  if (api->ptr_name == nullptr || api->size_name == nullptr || api->device_name == nullptr ||
      api->zero == nullptr) {
    throw nb::python_error();
  }
  make_memory_type(*api);
  api->ptr_desc    = fixed_data_descriptor(api->memory_type, api->ptr_name);
  api->size_desc   = fixed_data_descriptor(api->memory_type, api->size_name);
  api->device_desc = fixed_data_descriptor(api->memory_type, api->device_name);
  cupy = api.release();
}

void cupy_init(nb::handle memory_module,
               nb::handle stream_module,
               nb::handle backends_stream,
               bool stream_by_device)
{
  if (cupy == nullptr) { cupy_learn(memory_module, stream_module, backends_stream); }
  cupy->by_device = stream_by_device && cupy->device_stream_ptr != nullptr;
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
  f->device        = device;
  if (nbytes != 0) {
    try {
      if (self->shared != nullptr) {
        f->res    = held_resource{*self->shared};
        f->owner  = Py_NewRef(self->mr);
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
  try {
    set_base_fields(mem, f->ptr, nbytes, device);
  } catch (...) {
    Py_DECREF(mem);  // frees the memory
    throw;
  }
  return make_pointer(mem);
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

/// Sets the Python error for the C++ exception being handled: nbrmm's translation (a
/// Python upstream's exception unchanged), with an out-of-memory error (any MemoryError
/// but CuPy's own) raised as CuPy's OutOfMemoryError caused by it, as CuPy's pools do.
void set_error(std::size_t nbytes)
{
  raise_current_exception();
  if (cupy == nullptr || !PyErr_ExceptionMatches(PyExc_MemoryError) ||
      PyErr_ExceptionMatches(cupy->oom_error)) {
    return;
  }
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr) { PyException_SetTraceback(value, tb); }
  Py_XDECREF(type);
  Py_XDECREF(tb);
  raise_cupy_oom(nbytes, value);
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
  allocator_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&allocator_spec));
  if (allocator_type == nullptr) { throw nb::python_error(); }
  // Every allocator uses the type through this pointer, which keeps it alive until exit.

  m.def("_cupy_init", &cupy_init, nb::arg("memory_module"), nb::arg("stream_module"),
        nb::arg("backends_stream_module").none() = nb::none(),
        nb::arg("stream_by_device") = true,
        nb::sig("def _cupy_init(memory_module: types.ModuleType, stream_module: types.ModuleType, "
                "backends_stream_module: types.ModuleType | None = None, "
                "stream_by_device: bool = True) -> None"),
        R"doc(Prepare the CuPy allocator hook for CuPy's ``cupy.cuda.memory`` module.

Called by ``nbrmm.allocators.cupy`` at import, with ``cupy.cuda.stream`` and
``cupy_backends.cuda.stream`` (None where CuPy has no such module). What is learned
about CuPy is learned once; later calls only switch the paths below.

``stream_by_device=False`` makes the current stream be read through
``cupy.cuda.stream``'s ``get_current_stream_ptr`` (the slower reference path).

Raises
------
ImportError
    If this CuPy's memory classes cannot be used.)doc");

  m.def(
    "_cupy_stream_by_device", []() { return cupy != nullptr && cupy->by_device; },
    "Whether CuPy's current stream is read per device, through ``cupy_backends``.");

  m.def(
    "_cupy_memory_type",
    []() -> nb::object {
      if (cupy == nullptr) { return nb::none(); }
      return nb::borrow(reinterpret_cast<PyObject*>(cupy->memory_type));
    },
    nb::sig("def _cupy_memory_type() -> type | None"),
    "The class of the memory objects the CuPy hook creates (None before ``_cupy_init``).");

  m.def("_cupy_allocator", &make_allocator, nb::arg("mr").none() = nb::none(),
        nb::arg("stream").none() = nb::none(),
        nb::sig("def _cupy_allocator(mr: DeviceMemoryResource | None = None, "
                "stream: nbrmm._typing.CudaStreamLike | None = None) -> "
                "collections.abc.Callable[[int], typing.Any]"),
        R"doc(A CuPy allocator bound to ``mr`` (None: the current device resource at each
allocation) and ``stream`` (None: CuPy's current stream at each allocation).

Raises
------
TypeError
    If ``mr`` is not a resource or ``stream`` is not stream-like.)doc");
}

}  // namespace nbrmm
