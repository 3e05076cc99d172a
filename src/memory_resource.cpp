// The resource base classes (rmm/resource_ref.hpp): nbrmm.mr.DeviceMemoryResource, which
// owns a type-erased librmm resource, and UpstreamResourceAdaptor. Also the resource that
// calls into Python, which backs CallbackMemoryResource and Python subclasses.
#include "nb_rmm.hpp"
#include "rmm_compat.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace nbrmm {

// ------------------------------------------------------------------------------------
// python_resource
// ------------------------------------------------------------------------------------

python_resource::python_resource(nb::handle allocate, nb::handle deallocate)
  : state_{std::make_shared<state>(allocate, deallocate)}
{
}

void* python_resource::allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t)
{
  if (!nb::is_alive()) { throw rmm::bad_alloc{"the Python interpreter has shut down"}; }
  nb::gil_scoped_acquire gil;
  nb::error_scope pending;
  nb::object result = state_->allocate.get()(bytes, stream_for_handle(stream.get()));
  if (!PyLong_Check(result.ptr())) {
    throw nb::type_error(("allocate callback must return the pointer as an int, got " +
                          std::string{nb::type_name(result.type()).c_str()})
                           .c_str());
  }
  auto const raw = PyLong_AsUnsignedLongLong(result.ptr());
  if (PyErr_Occurred()) { throw nb::python_error(); }
  if (raw == 0 && bytes != 0) {
    throw rmm::bad_alloc{"allocate callback returned a null pointer for " + std::to_string(bytes) +
                         " bytes"};
  }
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(raw));
}

void python_resource::deallocate(cuda::stream_ref stream,
                                 void* ptr,
                                 std::size_t bytes,
                                 std::size_t) noexcept
{
  nb::detail::cleanup_guard guard{};
  if (!guard) { return; }  // interpreter gone: nothing can free Python-managed memory
  // Deallocation often runs while an exception propagates (a temporary buffer dies):
  // set that exception aside so the callback runs cleanly, then restore it.
  nb::error_scope pending;
  try {
    state_->deallocate.get()(reinterpret_cast<std::uintptr_t>(ptr), bytes,
                             stream_for_handle(stream.get()));
  } catch (nb::python_error& e) {
    e.discard_as_unraisable("nbrmm: exception in a deallocate callback");
  } catch (std::exception const& e) {
    PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "nbrmm: deallocate callback failed: %s", e.what());
    if (PyErr_Occurred()) { PyErr_WriteUnraisable(nullptr); }
  }
}

void* python_resource::allocate_sync(std::size_t bytes, std::size_t alignment)
{
  return allocate(cuda::stream_ref{cudaStream_t{nullptr}}, bytes, alignment);
}

void python_resource::deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
{
  deallocate(cuda::stream_ref{cudaStream_t{nullptr}}, ptr, bytes, alignment);
}

namespace {

/// The callables of a python_resource held directly or inside a python_owned_resource.
template <class Res>
python_resource::state const* python_state_in(Res const& res) noexcept
{
  if (auto const* py = cuda::mr::resource_cast<python_resource>(&res)) { return py->state_ptr(); }
  if (auto const* owned = cuda::mr::resource_cast<python_owned_resource>(&res)) {
    return python_state(owned->inner());
  }
  return nullptr;
}

}  // namespace

python_resource::state const* python_state(device_resource const& res) noexcept
{
  return res.has_value() ? python_state_in(res) : nullptr;
}

python_resource::state const* python_state(rmm::device_async_resource_ref res) noexcept
{
  return python_state_in(res);
}

// ------------------------------------------------------------------------------------
// Arguments
// ------------------------------------------------------------------------------------

namespace {

PyTypeObject* resource_type = nullptr;  // nbrmm.mr.DeviceMemoryResource

/// The size a string such as "1.5 GiB" gives, with rmm's grammar (rmm.pylibrmm.helper):
/// digits with an optional fraction, optional spaces or tabs, and an optional
/// case-insensitive unit: B, kB ... PB (powers of 1000) or KiB ... PiB (powers of 1024).
std::size_t parse_size_string(std::string const& text, char const* param)
{
  auto fail = [&]() {
    throw nb::value_error((std::string{param} + ": Could not parse '" + text +
                           "' as a byte specification (a number and an optional unit such "
                           "as B, kB, MB, KiB, MiB or GiB)")
                            .c_str());
  };
  auto digit      = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i   = 0;
  std::size_t end = text.size();
  if (end != 0 && text[end - 1] == '\n') { --end; }  // as Python's re `$` allows
  while (i < end && digit(text[i])) { ++i; }
  if (i == 0) { fail(); }
  if (i < end && text[i] == '.') {
    ++i;
    while (i < end && digit(text[i])) { ++i; }
  }
  double number = 0;
  auto const [last, ec] = std::from_chars(text.data(), text.data() + i, number);
  if (ec != std::errc{} || last != text.data() + i) { fail(); }
  while (i < end && (text[i] == ' ' || text[i] == '\t')) { ++i; }
  std::string unit;
  for (; i < end; ++i) { unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))); }

  static std::pair<char const*, double> const units[] = {
    {"", 1.0},      {"b", 1.0},           {"kb", 1e3},           {"mb", 1e6},
    {"gb", 1e9},    {"tb", 1e12},         {"pb", 1e15},          {"kib", 1024.0},
    {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
    {"pib", 1125899906842624.0},
  };
  for (auto const& [name, factor] : units) {
    if (unit == name) {
      double const value = std::floor(number * factor);
      if (!(value < 18446744073709551616.0)) {
        throw_range_error(std::string{param} + ": '" + text + "' is 2**64 bytes or more");
      }
      return static_cast<std::size_t>(value);
    }
  }
  fail();
  return 0;  // not reached
}

}  // namespace

std::size_t parse_size(nb::handle obj, char const* param)
{
  if (PyLong_CheckExact(obj.ptr())) {
    int overflow       = 0;
    long long const v  = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
    if (overflow == 0 && v >= 0) { return static_cast<std::size_t>(v); }
  }
  if (PyUnicode_Check(obj.ptr())) { return parse_size_string(nb::cast<std::string>(obj), param); }
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) {
    throw nb::type_error((std::string{param} + ": expected a size in bytes (int or str such as '1GiB'), got " +
                          nb::type_name(obj.type()).c_str())
                           .c_str());
  }
  return uint_arg(obj, param);  // negative or too large: ArgumentRangeError
}

std::optional<std::size_t> parse_optional_size(nb::handle obj, char const* param)
{
  if (obj.is_none()) { return std::nullopt; }
  return parse_size(obj, param);
}

device_resource& DeviceMemoryResource::get()
{
  if (!res.has_value()) {
    throw nb::value_error("this memory resource was cleared by the garbage collector");
  }
  return res;
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
}

bool DeviceMemoryResource::caches() noexcept
{
  if (caches_ < 0) { caches_ = res.has_value() && deferred_frees::caches(res) ? 1 : 0; }
  return caches_ == 1;
}

DeviceMemoryResource::~DeviceMemoryResource()
{
  if (res.has_value() && holds_gil()) { deferred_frees::flush(); }
}

// ------------------------------------------------------------------------------------
// Deferred frees
// ------------------------------------------------------------------------------------

namespace deferred_frees {
namespace {

/// One queued free, holding its resource alive.
struct entry {
  held_resource res;
  void* ptr;
  std::size_t bytes;
  std::size_t alignment;
  cudaStream_t stream;
  int device;

  void free() noexcept
  {
    deallocate_on_device(res.get(), cuda::stream_ref{stream}, ptr, bytes, alignment, device);
  }
};

}  // namespace

/// Room for up to `capacity` entries, constructed in place as they arrive.
class entries {
 public:
  entries() noexcept {}
  entries(entries const&)            = delete;
  entries& operator=(entries const&) = delete;
  ~entries() {}  // only ever destroyed empty

  [[nodiscard]] int count() const noexcept { return count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

  /// Adds an entry made from `fields` (in the order of `entry`'s members).
  template <class... Fields>
  void emplace(Fields&&... fields) noexcept
  {
    entry& e = *new (&slots_[count_++].e) entry{std::forward<Fields>(fields)...};
    bytes_ += e.bytes;
  }
  /// Frees every entry's block and drops what kept its resource alive (which may be the
  /// last owner).
  void free_all() noexcept
  {
    for (int i = 0; i < count_; ++i) {
      slots_[i].e.free();
      slots_[i].e.~entry();
    }
    count_ = 0;
    bytes_ = 0;
  }

 private:
  union slot {
    slot() noexcept {}
    ~slot() {}
    entry e;
  };
  int count_{0};
  std::size_t bytes_{0};
  slot slots_[capacity];
};

namespace {

std::vector<predicate>& predicates()
{
  static std::vector<predicate> p;
  return p;
}

#if !defined(Py_GIL_DISABLED)
// Guarded by the GIL. The queue's storage is never freed: whatever a thread is still
// freeing at exit stays valid.
entries* queue = new entries;
// Empty storage to swap in; more is made only while several threads free at once.
constexpr int spare_capacity = 8;
entries* spares[spare_capacity] = {new entries};
int spare_count                 = 1;
bool accepting{true};  // false when switched off, and for good once stop() ran
bool stopped{false};
#endif

}  // namespace

void register_cache(predicate p) { predicates().push_back(p); }

bool caches(device_resource const& res) noexcept
{
  device_resource const* inner = &res;
  if (auto const* owned = cuda::mr::resource_cast<python_owned_resource>(&res)) {
    inner = &owned->inner();
  }
  for (predicate p : predicates()) {
    if (p(*inner)) { return true; }
  }
  return false;
}

bool defer(held_resource& res,
           void* ptr,
           std::size_t bytes,
           std::size_t alignment,
           cudaStream_t stream,
           int device) noexcept
{
#if defined(Py_GIL_DISABLED)
  return false;
#else
  if (!accepting || queue->count() == capacity || bytes > byte_budget - queue->bytes() ||
      !is_legacy_default(stream)) {
    return false;
  }
  queue->emplace(std::move(res), ptr, bytes, alignment, stream, device);
  return true;
#endif
}

PyThreadState* release_gil(entries** taken) noexcept
{
#if !defined(Py_GIL_DISABLED)
  if (queue->count() != 0) {
    // Swap in empty storage under the GIL; other threads queue into it meanwhile.
    entries* fresh = spare_count > 0 ? spares[--spare_count] : new (std::nothrow) entries;
    if (fresh != nullptr) {  // (without memory for a swap the queue waits for the next one)
      entries* batch = std::exchange(queue, fresh);
      *taken         = batch;
      PyThreadState* state = PyEval_SaveThread();
      batch->free_all();
      return state;
    }
  }
#endif
  *taken = nullptr;
  return PyEval_SaveThread();
}

void recycle(entries* taken) noexcept
{
#if !defined(Py_GIL_DISABLED)
  if (spare_count < spare_capacity) {
    spares[spare_count++] = taken;
  } else {
    delete taken;  // empty
  }
#endif
}

void flush() noexcept
{
#if !defined(Py_GIL_DISABLED)
  if (queue->count() != 0) { gil_release release; }
#endif
}

void stop() noexcept
{
#if !defined(Py_GIL_DISABLED)
  accepting = false;
  stopped   = true;
  flush();
#endif
}

void forget() noexcept
{
#if !defined(Py_GIL_DISABLED)
  if (queue->count() != 0) {
    entries* fresh = new (std::nothrow) entries;
    if (fresh != nullptr) { queue = fresh; }  // the old storage and its entries are leaked
  }
#endif
}

bool enable(bool on) noexcept
{
#if !defined(Py_GIL_DISABLED)
  bool const was = accepting;
  accepting      = on && !stopped;
  if (!accepting) { flush(); }
  return was;
#else
  return false;
#endif
}

std::pair<int, std::size_t> pending() noexcept
{
#if !defined(Py_GIL_DISABLED)
  return {queue->count(), queue->bytes()};
#else
  return {0, 0};
#endif
}

}  // namespace deferred_frees

DeviceMemoryResource& resource_arg(nb::handle obj, char const* param)
{
  if (resource_type != nullptr && PyType_IsSubtype(Py_TYPE(obj.ptr()), resource_type) &&
      nb::inst_ready(obj)) {
    return *nb::inst_ptr<DeviceMemoryResource>(obj);
  }
  throw nb::type_error((std::string{param} +
                        ": expected an nbrmm.mr.DeviceMemoryResource, got " +
                        nb::type_name(obj.type()).c_str())
                         .c_str());
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
    if (nb::hasattr(fn, "__self__")) {
      nb::object self = fn.attr("__self__");
      if (PyType_IsSubtype(Py_TYPE(self.ptr()), resource_type)) { return self; }
    }
  }
  for (wrapper_fn fn : wrappers()) {
    if (nb::object obj = fn(res, device); obj.is_valid()) { return obj; }
  }
  return make_resource_object<DeviceMemoryResource>(res, device);
}

// ------------------------------------------------------------------------------------
// GC support
// ------------------------------------------------------------------------------------

namespace {

/// The Python callables that only this object owns: every C++ use of them is either this
/// object's own or an nbrmm Buffer's that references this object (the buffers'
/// finalizers free their memory and drop their uses before any cycle is cleared). A
/// Buffer uses them through a copy of its own (adopted from C++) or a share of this
/// object's shared copy; anything else (an adaptor, a queued free, ...) is one use more.
python_resource const* exclusive_python_resource(DeviceMemoryResource& r)
{
  if (!r.res.has_value()) { return nullptr; }
  auto const* py = cuda::mr::resource_cast<python_resource>(&r.res);
  if (py == nullptr) { return nullptr; }
  // Copies besides `res` (the shared copy among them) plus owners of the shared copy
  // besides this object.
  long const shared = r.shared_uses();
  long const uses   = py->use_count() - 1 + (shared > 0 ? shared - 2 : 0);
  return uses == r.holders.size() ? py : nullptr;
}

int resource_traverse(PyObject* self, visitproc visit, void* arg)
{
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) { return 0; }
  auto* r = nb::inst_ptr<DeviceMemoryResource>(self);
  Py_VISIT(r->upstream.ptr());
  Py_VISIT(r->keep.ptr());
  if (auto const* py = exclusive_python_resource(*r)) {
    Py_VISIT(py->callbacks().allocate.get().ptr());
    Py_VISIT(py->callbacks().deallocate.get().ptr());
  }
  return 0;
}

int resource_clear(PyObject* self)
{
  if (!nb::inst_ready(self)) { return 0; }
  auto* r = nb::inst_ptr<DeviceMemoryResource>(self);
  r->upstream.reset();
  r->keep.reset();
  if (exclusive_python_resource(*r) != nullptr) { r->clear(); }
  return 0;
}

}  // namespace

/// Run by the garbage collector before it clears any object of a cycle: the buffers that
/// hold this resource's Python callables (and so are in the cycle too) free their memory
/// while the callables are intact.
void resource_finalize(PyObject* self)
{
  if (nb::inst_ready(self)) { nb::inst_ptr<DeviceMemoryResource>(self)->holders.release_all(); }
}

PyType_Slot resource_type_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(resource_traverse)},
                                     {Py_tp_clear, reinterpret_cast<void*>(resource_clear)},
                                     {Py_tp_finalize, reinterpret_cast<void*>(resource_finalize)},
                                     {0, nullptr}};

// ------------------------------------------------------------------------------------
// Bindings
// ------------------------------------------------------------------------------------

namespace {

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
  if (auto const* py = cuda::mr::resource_cast<python_resource>(&r.res)) {
    return std::hash<void const*>{}(&py->callbacks());
  }
  // Equal resources must hash alike; the type is the finest key valid for all of them.
  return std::hash<std::string>{}(nb::type_name(self.type()).c_str());
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
be the upstream of any adaptor, a buffer's ``mr`` and the current device resource.)doc");
  resource_type = reinterpret_cast<PyTypeObject*>(base.ptr());

  base
    .def(
      "__init__",
      [](DeviceMemoryResource* self) {
        nb::handle py_self = nb::find(self);
        nb::handle cls     = nb::type<DeviceMemoryResource>();
        if (py_self.type().is(cls)) {
          throw nb::type_error(
            "DeviceMemoryResource is abstract: use a concrete resource, or subclass it and "
            "implement allocate() and deallocate()");
        }
        if (!overrides(py_self, "allocate", cls) || !overrides(py_self, "deallocate", cls)) {
          throw nb::type_error(("a Python subclass of DeviceMemoryResource must implement "
                                "allocate() and deallocate(); " +
                                std::string{nb::type_name(py_self.type()).c_str()} +
                                " does not")
                                 .c_str());
        }
        new (self) DeviceMemoryResource{};
        self->device = current_device();
        self->res    = device_resource{
          python_resource{py_self.attr("allocate"), py_self.attr("deallocate")}};
      },
      "Initialise a Python subclass (which must implement allocate and deallocate).")
    .def(
      "allocate",
      [](DeviceMemoryResource& self, nb::handle nbytes, nb::handle stream, std::size_t alignment) {
        std::size_t const n   = parse_size(nbytes, "nbytes");
        cuda::stream_ref const s = stream_arg(stream, "stream");
        device_resource& res  = self.get();
        gil_release release;
        return reinterpret_cast<std::uintptr_t>(res.allocate(s, n, alignment));
      },
      nb::arg("nbytes"), nb::arg("stream").none() = default_stream(), nb::kw_only(),
      nb::arg("alignment") = default_alignment,
      R"doc(Allocate ``nbytes`` bytes, ordered on ``stream``.

Parameters
----------
nbytes : int or str
    Size in bytes (``"1MiB"`` style strings accepted).
stream : Stream or object with ``__cuda_stream__``, optional
    The stream the allocation is ordered on.
alignment : int, optional
    Required alignment (a power of two), 256 by default.

Returns
-------
int
    The device pointer. Free it with :meth:`deallocate` with the same size, stream
    ordering and alignment.

Raises
------
MemoryError
    If the resource cannot satisfy the request (``nbrmm.OutOfMemory`` when out of memory).)doc")
    .def(
      "deallocate",
      [](DeviceMemoryResource& self, nb::handle ptr_arg, nb::handle nbytes, nb::handle stream,
         std::size_t alignment) {
        auto const ptr        = uint_arg(ptr_arg, "ptr");
        std::size_t const n   = parse_size(nbytes, "nbytes");
        cuda::stream_ref const s = stream_arg(stream, "stream");
        device_resource& res  = self.get();
        gil_release release;
        res.deallocate(s, reinterpret_cast<void*>(ptr), n, alignment);
      },
      nb::arg("ptr").none(), nb::arg("nbytes"), nb::arg("stream").none() = default_stream(), nb::kw_only(),
      nb::arg("alignment") = default_alignment,
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
    The alignment passed to :meth:`allocate`.)doc")
    .def_prop_ro(
      "device", [](DeviceMemoryResource const& self) { return self.device; },
      "The CUDA device that was current when the resource was created (-1 without a GPU).")
    .def_prop_ro(
      "is_device_accessible", [](DeviceMemoryResource const&) { return true; },
      "Whether the memory can be used by the device (always True).")
    .def_prop_ro(
      "is_host_accessible", [](DeviceMemoryResource const& self) { return self.host_accessible; },
      "Whether the memory can be read and written by the host.")
    .def(
      "__eq__",
      [](DeviceMemoryResource& self, nb::handle other) -> nb::object {
        if (!PyType_IsSubtype(Py_TYPE(other.ptr()), resource_type)) {
          return nb::borrow(Py_NotImplemented);
        }
        auto& o = *nb::inst_ptr<DeviceMemoryResource>(other);
        if (&o == &self) { return nb::bool_(true); }
        if (!self.res.has_value() || !o.res.has_value()) { return nb::bool_(false); }
        return nb::bool_(self.res == o.res);
      },
      nb::is_operator(), "Whether both objects use the same underlying resource.")
    .def("__hash__", &resource_identity)
    .def(
      "__nbrmm_resource__",
      [](nb::handle self) {
        auto& r = *nb::inst_ptr<DeviceMemoryResource>(self);
        // The copy carries this object, so a buffer that C++ allocates from it and hands
        // back to Python reports this very object as its `mr`.
        PyObject* cap = resource_capsule(device_resource{python_owned_resource{r.get(), self}});
        if (cap == nullptr) { throw nb::python_error(); }
        return nb::steal(cap);
      },
      R"doc(An owning C++ copy of the resource, for C++ extensions (capsule protocol).

Returns
-------
PyCapsule
    Named ``"nbrmm.device_resource:<librmm major>.<minor>"``, holding a heap-allocated
    ``cuda::mr::any_resource<cuda::mr::device_accessible>`` that the capsule owns. Use
    ``nbrmm::resource_from_python`` from ``<nbrmm/nbrmm.hpp>`` rather than calling this.)doc")
    .def("__repr__", [](nb::handle self) {
      auto& r = *nb::inst_ptr<DeviceMemoryResource>(self);
      std::string text{"<"};
      text.append(nb::type_name(self.type()).c_str())
        .append(" device=")
        .append(std::to_string(r.device))
        .append(">");
      return text;
    });

  resource_class<UpstreamResourceAdaptor>(m, "UpstreamResourceAdaptor", R"doc(
Base class of resources that adapt an upstream resource.

The adaptor owns a C++ copy of its upstream (so C++ keeps the upstream alive) and also
keeps the Python upstream object, returned as ``upstream_mr``.)doc")
    .def_prop_ro(
      "upstream_mr",
      [](UpstreamResourceAdaptor const& self) {
        return self.upstream.is_valid() ? self.upstream : nb::none();
      },
      "The upstream resource object this adaptor was created with.")
    .def(
      "get_upstream",
      [](UpstreamResourceAdaptor const& self) {
        return self.upstream.is_valid() ? self.upstream : nb::none();
      },
      "The upstream resource object this adaptor was created with.");

  m.def("_stop_deferring_frees", &deferred_frees::stop,
        "Free the deferred frees and free at once from now on (run at interpreter exit).");
  m.def("_forget_deferred_frees", &deferred_frees::forget,
        "Drop the deferred frees without performing them (run in a forked child).");
}

}  // namespace nbrmm
