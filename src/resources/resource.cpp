// Resources (see resource.hpp): the resource that calls Python, resource objects, their
// garbage-collector slots, re-entrancy checks, the wrapper registry and aligned blocks.
#include "resources/resource.hpp"

#include "core/args.hpp"
#include "core/errors.hpp"
#include "core/rmm_compat.hpp"
#include "streams/stream.hpp"

#include <rmm/aligned.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

namespace nbrmm {

// ------------------------------------------------------------------------------------
// Python callbacks
// ------------------------------------------------------------------------------------

namespace {

/// The callbacks this thread is running, innermost last.
thread_local std::vector<void const*> active_callbacks;

bool running(void const* key) noexcept
{
  return key != nullptr && std::find(active_callbacks.begin(), active_callbacks.end(), key) !=
                             active_callbacks.end();
}

}  // namespace

std::atomic<int> detail::callbacks_running{0};

callback_scope::callback_scope(void const* key) noexcept
{
  try {
    active_callbacks.push_back(key);
    marked_ = true;
    detail::callbacks_running.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    // Without memory the callback runs unmarked; re-entry is then not detected.
  }
}

callback_scope::~callback_scope()
{
  if (!marked_) { return; }
  detail::callbacks_running.fetch_sub(1, std::memory_order_relaxed);
  active_callbacks.pop_back();
}

bool detail::inside_callback_slow() noexcept { return !active_callbacks.empty(); }

// ------------------------------------------------------------------------------------
// python_resource
// ------------------------------------------------------------------------------------

python_resource::python_resource(nb::handle allocate, nb::handle deallocate, std::string name)
  : state_{std::make_shared<state>(allocate, deallocate, std::move(name))}
{
}

namespace {

/// Raises `type` with `message` as a Python exception through librmm (GIL held).
[[noreturn]] void throw_as_python(PyObject* type, std::string const& message)
{
  PyErr_SetString(type, message.c_str());
  throw_python_error();
}

/// The pointer an allocate callback returned, checked against librmm's contract.
void* checked_pointer(python_resource::state const& st, nb::handle result, std::size_t bytes,
                      cuda::stream_ref stream, nb::handle stream_obj)
{
  if (!PyLong_Check(result.ptr()) || PyBool_Check(result.ptr())) {
    throw_as_python(PyExc_TypeError, st.name + " must return the pointer as an int, got " +
                                       type_of(result));
  }
  auto const raw = PyLong_AsUnsignedLongLong(result.ptr());
  if (PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    throw_as_python(invalid_argument_type(), st.name + " returned " + utf8(result) +
                                               ", which is not a pointer value");
  }
  if (raw == 0) {
    if (bytes == 0) { return nullptr; }
    throw_as_python(invalid_argument_type(),
                    st.name + " returned a null pointer for " + std::to_string(bytes) +
                      " bytes (raise MemoryError when it cannot allocate)");
  }
  if (raw % default_alignment != 0) {
    // Give the memory back before refusing it.
    if (nb::handle dealloc = st.deallocate.get(); dealloc.is_valid()) {
      nb::object r = nb::steal(PyObject_CallFunction(dealloc.ptr(), "KKO", raw,
                                                     static_cast<unsigned long long>(bytes),
                                                     stream_obj.ptr()));
      if (!r.is_valid()) { PyErr_WriteUnraisable(dealloc.ptr()); }
    }
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", raw);
    throw_as_python(invalid_argument_type(), st.name + " returned " + hex +
                                               ", which is not aligned to 256 bytes (librmm's "
                                               "resources guarantee 256-byte alignment)");
  }
  (void)stream;
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(raw));
}

}  // namespace

void* python_resource::allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t)
{
  gil_acquire gil;
  if (!gil.ok() || !state_->allocate.get().is_valid()) {
    throw rmm::bad_alloc{"the Python interpreter is shutting down"};
  }
  callback_scope scope{state_.get()};
  nb::error_scope pending;  // an allocation may happen while an exception propagates
  nb::object stream_obj = stream_for_handle(stream.get());
  PyObject* result = PyObject_CallFunction(state_->allocate.get().ptr(), "KO",
                                           static_cast<unsigned long long>(bytes), stream_obj.ptr());
  if (result == nullptr) { throw_python_error(); }
  return checked_pointer(*state_, nb::steal(result), bytes, stream, stream_obj);
}

void python_resource::deallocate(cuda::stream_ref stream,
                                 void* ptr,
                                 std::size_t bytes,
                                 std::size_t) noexcept
{
  gil_acquire gil;
  // Python is gone for this thread, or the callables were let go at exit: the memory is lost.
  if (!gil.ok() || !state_->deallocate.get().is_valid()) { return; }
  callback_scope scope{state_.get()};
  // Deallocation often runs while an exception propagates (a temporary buffer dies):
  // set that exception aside so the callback runs cleanly, then restore it.
  nb::error_scope pending;
  try {
    nb::object stream_obj = stream_for_handle(stream.get());
    PyObject* r = PyObject_CallFunction(state_->deallocate.get().ptr(), "KKO",
                                        static_cast<unsigned long long>(
                                          reinterpret_cast<std::uintptr_t>(ptr)),
                                        static_cast<unsigned long long>(bytes), stream_obj.ptr());
    if (r == nullptr) {
      PyErr_WriteUnraisable(state_->deallocate.get().ptr());
    } else {
      Py_DECREF(r);
    }
  } catch (nb::python_error& e) {
    e.discard_as_unraisable("nbrmm: exception in a deallocate callback");
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "nbrmm: a deallocate callback failed");
    PyErr_WriteUnraisable(state_->deallocate.get().ptr());
  }
}

device_resource const& unwrap(device_resource const& res) noexcept
{
  if (auto const* owned = cuda::mr::resource_cast<python_owned_resource>(&res)) {
    return owned->inner();
  }
  return res;
}

python_resource::state const* python_state(device_resource const& res) noexcept
{
  if (!res.has_value()) { return nullptr; }
  auto const* py = cuda::mr::resource_cast<python_resource>(&unwrap(res));
  return py != nullptr ? py->state_ptr() : nullptr;
}

// ------------------------------------------------------------------------------------
// Holders
// ------------------------------------------------------------------------------------

namespace {

std::mutex& holders_mutex() noexcept
{
  static std::mutex m;
  return m;
}

}  // namespace

holder_list& holder_list::operator=(holder_list&& o) noexcept
{
  std::lock_guard lock{holders_mutex()};
  head_ = std::exchange(o.head_, nullptr);
  n_    = std::exchange(o.n_, 0);
  return *this;
}

void holder_list::add(resource_holder* h) noexcept
{
  std::lock_guard lock{holders_mutex()};
  h->prev_ = nullptr;
  h->next_ = head_;
  if (head_ != nullptr) { head_->prev_ = h; }
  head_ = h;
  ++n_;
}

void holder_list::remove(resource_holder* h) noexcept
{
  std::lock_guard lock{holders_mutex()};
  unlink(h);
}

void holder_list::release_all() noexcept
{
  // A holder that cannot free its memory now (it is exported) stays listed; walk past it.
  resource_holder* skip = nullptr;
  for (;;) {
    resource_holder* h = nullptr;
    {
      std::lock_guard lock{holders_mutex()};
      h = skip == nullptr ? head_ : skip->next_;
    }
    if (h == nullptr) { return; }
    h->release_memory();
    std::lock_guard lock{holders_mutex()};
    bool const still_listed = h->prev_ != nullptr || head_ == h;
    if (still_listed) { skip = h; }
  }
}

long holder_list::size() const noexcept
{
  std::lock_guard lock{holders_mutex()};
  return n_;
}

void holder_list::unlink(resource_holder* h) noexcept
{
  if (h->prev_ == nullptr && head_ != h) { return; }  // not listed
  (h->prev_ != nullptr ? h->prev_->next_ : head_) = h->next_;
  if (h->next_ != nullptr) { h->next_->prev_ = h->prev_; }
  h->prev_ = h->next_ = nullptr;
  --n_;
}

// ------------------------------------------------------------------------------------
// DeviceMemoryResource
// ------------------------------------------------------------------------------------

device_resource& DeviceMemoryResource::get()
{
  if (!res.has_value()) {
    throw nb::value_error("this memory resource was cleared by the garbage collector");
  }
  return res;
}

device_resource DeviceMemoryResource::owned_copy(nb::handle self)
{
  device_resource& r = get();
  if (from_cpp) { return r; }
  return device_resource{python_owned_resource{r, self}};
}

void DeviceMemoryResource::adopt(DeviceMemoryResource const& up, device_resource const& copy)
{
  if (auto const* owned = cuda::mr::resource_cast<python_owned_resource>(&copy)) {
    impl_refs.push_back(owned->group());
  }
  calls_python = calls_python || up.calls_python;
}

python_resource::state const* DeviceMemoryResource::callables() noexcept
{
  if (!res.has_value()) { return nullptr; }  // cleared by the garbage collector
  if (!callables_known_) {
    callables_       = python_state(res);
    callables_known_ = true;
  }
  return callables_;
}

std::shared_ptr<device_resource> const& DeviceMemoryResource::shared()
{
#if defined(Py_GIL_DISABLED)
  static std::mutex lock;  // made once per object; threads may race to make it
  std::lock_guard<std::mutex> guard{lock};
#endif
  if (!shared_) { shared_ = std::make_shared<device_resource>(get()); }
  return shared_;
}

void DeviceMemoryResource::clear() noexcept
{
  shared_.reset();
  res = device_resource{};
  own_refs.clear();
  impl_refs.clear();
}

namespace {

PyTypeObject* resource_type = nullptr;  // nbrmm.mr.DeviceMemoryResource

}  // namespace

bool is_resource(nb::handle obj) noexcept
{
  return resource_type != nullptr && obj.is_valid() &&
         PyType_IsSubtype(Py_TYPE(obj.ptr()), resource_type) && nb::inst_ready(obj);
}

DeviceMemoryResource& resource_arg(nb::handle obj, char const* param)
{
  if (is_resource(obj)) { return *nb::inst_ptr<DeviceMemoryResource>(obj); }
  throw nb::type_error((std::string{param} +
                        ": expected an nbrmm.mr.DeviceMemoryResource, got " +
                        type_of(obj, reinterpret_cast<PyObject*>(resource_type)))
                         .c_str());
}

// ------------------------------------------------------------------------------------
// The resource graph: re-entrancy and cycles
// ------------------------------------------------------------------------------------

namespace {

/// Depth-first walk of the resource objects `obj` depends on (itself, its upstream, its
/// bins); true as soon as `hit(object)` is.
template <class Hit>
bool walk(nb::handle obj, Hit&& hit, std::vector<PyObject*>& seen)
{
  if (!is_resource(obj)) { return false; }
  if (std::find(seen.begin(), seen.end(), obj.ptr()) != seen.end()) { return false; }
  seen.push_back(obj.ptr());
  if (hit(obj)) { return true; }
  auto& r = *nb::inst_ptr<DeviceMemoryResource>(obj);
  if (r.upstream.is_valid() && walk(r.upstream, hit, seen)) { return true; }
  if (r.keep.is_valid()) {
    if (PyList_Check(r.keep.ptr())) {
      for (nb::handle item : nb::borrow<nb::list>(r.keep)) {
        if (walk(item, hit, seen)) { return true; }
      }
    } else if (walk(r.keep, hit, seen)) {
      return true;
    }
  }
  return false;
}

/// The classes registered with register_gpu_resource_type (owned by the module).
std::vector<PyObject*>& gpu_resource_types()
{
  static std::vector<PyObject*> types;
  return types;
}

bool reaches_running_callback(nb::handle mr)
{
  std::vector<PyObject*> seen;
  return walk(
    mr,
    [](nb::handle node) {
      auto& r = *nb::inst_ptr<DeviceMemoryResource>(node);
      return running(r.callback_key);
    },
    seen);
}

}  // namespace

void detail::check_reentry_slow(nb::handle mr, char const* what)
{
  if (!inside_callback() || !reaches_running_callback(mr)) { return; }
  throw nb::builtin_exception(
    nb::exception_type::runtime_error,
    (std::string{what} + ": this runs inside a Python callback of a memory resource that " +
     utf8(nb::type_name(mr.type())) +
     " depends on; using it here would call that resource again while it is busy (and "
     "may deadlock). Use a resource that does not depend on it.")
      .c_str());
}

bool detail::would_reenter_slow(nb::handle mr) noexcept
{
  if (!inside_callback()) { return false; }
  try {
    return reaches_running_callback(mr);
  } catch (...) {
    return true;
  }
}

bool depends_on(nb::handle from, nb::handle target)
{
  auto const& t = *nb::inst_ptr<DeviceMemoryResource>(target);
  std::vector<PyObject*> seen;
  return walk(
    from,
    [&](nb::handle node) {
      if (node.is(target)) { return true; }
      auto const& r = *nb::inst_ptr<DeviceMemoryResource>(node);
      return r.res.has_value() && t.res.has_value() && unwrap(r.res) == unwrap(t.res);
    },
    seen);
}

// ------------------------------------------------------------------------------------
// Wrapping C++ resources as Python objects
// ------------------------------------------------------------------------------------

namespace {

std::vector<wrapper_fn>& wrappers()
{
  static std::vector<wrapper_fn> fns;
  return fns;
}

}  // namespace

void register_wrapper(wrapper_fn fn) { wrappers().push_back(fn); }

nb::object wrap_resource(device_resource const& res, int device)
{
  if (auto const* owned = cuda::mr::resource_cast<python_owned_resource>(&res)) {
    if (owned->owner().is_valid()) { return nb::borrow(owned->owner()); }
    return wrap_resource(owned->inner(), device);
  }
  if (auto const* py = cuda::mr::resource_cast<python_resource>(&res)) {
    // A Python subclass's resource calls its bound methods: hand back that object.
    nb::handle fn = py->callbacks().allocate.get();
    if (fn.is_valid() && nb::hasattr(fn, "__self__")) {
      nb::object self = fn.attr("__self__");
      if (is_resource(self)) { return self; }
    }
  }
  for (wrapper_fn fn : wrappers()) {
    if (nb::object obj = fn(res, device); obj.is_valid()) {
      auto& r = *nb::inst_ptr<DeviceMemoryResource>(obj);
      if (r.callback_key == nullptr) { r.callback_key = python_state(r.res); }
      return obj;
    }
  }
  nb::object obj = make_resource_object<DeviceMemoryResource>(res, device);
  nb::inst_ptr<DeviceMemoryResource>(obj)->callback_key = python_state(res);
  return obj;
}

// ------------------------------------------------------------------------------------
// Garbage collector slots
// ------------------------------------------------------------------------------------

namespace {

int resource_traverse(PyObject* self, visitproc visit, void* arg)
{
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) { return 0; }
  auto* r = nb::inst_ptr<DeviceMemoryResource>(self);
  Py_VISIT(r->upstream.ptr());
  Py_VISIT(r->keep.ptr());
  if (r->from_cpp || !r->res.has_value()) { return 0; }
  if (auto const* st = r->callables()) {
    Py_VISIT(st->allocate.get().ptr());
    Py_VISIT(st->deallocate.get().ptr());
  }
  for (py_owned const* ref : r->own_refs) { Py_VISIT(ref->get().ptr()); }
  for (auto const& group : r->impl_refs) {
    if (group.use_count() == 1) {
      if (auto ref = group.lock()) { Py_VISIT(ref->get().ptr()); }
    }
  }
  return 0;
}

int resource_clear(PyObject* self)
{
  if (!nb::inst_ready(self)) { return 0; }
  auto* r = nb::inst_ptr<DeviceMemoryResource>(self);
  r->upstream.reset();
  r->keep.reset();
  if (!r->from_cpp) { r->clear(); }
  return 0;
}

/// Run by the garbage collector before it clears any object of a cycle: the buffers that
/// this resource's Python callables free (and so are in the cycle too) free their memory
/// while the callables are intact. The collector marks the object finalized before it
/// calls this; a call of `__del__()` from Python does not, and frees nothing (the buffers
/// are alive and may be in use).
void resource_finalize(PyObject* self)
{
  if (!nb::inst_ready(self) || PyObject_GC_IsFinalized(self) == 0) { return; }
  auto* r = nb::inst_ptr<DeviceMemoryResource>(self);
  r->holders.release_all();
}

}  // namespace

PyType_Slot resource_type_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(resource_traverse)},
                                     {Py_tp_clear, reinterpret_cast<void*>(resource_clear)},
                                     {Py_tp_finalize, reinterpret_cast<void*>(resource_finalize)},
                                     {0, nullptr}};

void set_resource_type(PyTypeObject* type) noexcept { resource_type = type; }

void register_gpu_resource_type(nb::handle type) { gpu_resource_types().push_back(type.ptr()); }

std::string gpu_resource_below(nb::handle mr)
{
  std::string name;
  std::vector<PyObject*> seen;
  walk(mr,
       [&name](nb::handle node) {
         for (PyObject* type : gpu_resource_types()) {
           if (PyObject_TypeCheck(node.ptr(), reinterpret_cast<PyTypeObject*>(type))) {
             name = nb::cast<std::string>(node.type().attr("__name__"));
             return true;
           }
         }
         return false;
       },
       seen);
  return name;
}

// ------------------------------------------------------------------------------------
// Blocks
// ------------------------------------------------------------------------------------

namespace {
/// The device a C++ caller allocates on through the map entry (the current one).
int entry_device() noexcept
{
  try {
    return current_device();
  } catch (...) {
    return -1;
  }
}
}  // namespace

void* python_owned_resource::allocate_recorded(cuda::stream_ref stream, std::size_t bytes,
                                               std::size_t alignment)
{
  int const device = entry_device();
  void* ptr        = nullptr;
  try {
    history::nested_call const nested;
    ptr = inner_.allocate(stream, bytes, alignment);
  } catch (...) {
    history::failed(bytes, device, stream.get(), history::source::native);
    throw;
  }
  history::allocated(ptr, bytes, device, stream.get(), history::source::native);
  return ptr;
}

void python_owned_resource::record_free(cuda::stream_ref stream, void const* ptr,
                                        std::size_t bytes) noexcept
{
  history::freed(ptr, bytes, entry_device(), stream.get());
}

void detail::refuse_block(device_resource& res, cuda::stream_ref stream, block const& b)
{
  if (b.raw != nullptr) { res.deallocate(stream, b.raw, b.raw_bytes, b.raw_alignment); }
  throw rmm::bad_alloc{"the resource returned " +
                       std::string{b.raw == nullptr ? "a null pointer" : "a misaligned pointer"} +
                       " for " + std::to_string(b.raw_bytes) + " bytes"};
}

}  // namespace nbrmm
