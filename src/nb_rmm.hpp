// nbrmm's internal header: the types that several binding files share, and the
// declaration of every `bind_*` function that `nb_rmm.cpp` calls in order.
//
// Ownership rules (see docs/design.md):
//  * Every nbrmm resource object holds an owning `device_resource`. Copies share the
//    underlying librmm state, so C++ keeps alive what it uses, whatever Python does.
//  * Python objects that C++ must keep (callables behind callback resources, the Python
//    object set as a per-device resource) are held by `py_owned`, which may be dropped on
//    any thread and never touches a finalized interpreter.
//  * Python-side references (upstream, kept objects) are GC-visible through tp_traverse.
#pragma once

#include "pch.hpp"

#include <nbrmm/nbrmm.hpp>  // the public C++ API (capsule protocol)

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace nb = nanobind;

namespace nbrmm {


/// librmm's default allocation alignment (CUDA's 256 bytes).
inline constexpr std::size_t default_alignment = rmm::CUDA_ALLOCATION_ALIGNMENT;

// ------------------------------------------------------------------------------------
// Python references owned by C++
// ------------------------------------------------------------------------------------

/// A strong reference to a Python object that C++ owns. It may be released on any
/// thread; after interpreter shutdown it is leaked instead of touching Python.
class py_owned {
 public:
  py_owned() = default;
  explicit py_owned(nb::handle h) noexcept : ptr_{h.ptr()} { Py_XINCREF(ptr_); }
  py_owned(py_owned const&)            = delete;
  py_owned& operator=(py_owned const&) = delete;
  ~py_owned() { reset(); }

  void reset() noexcept
  {
    PyObject* p = ptr_;
    ptr_        = nullptr;
    if (p != nullptr) {
      if (nb::detail::cleanup_guard guard{}) { Py_DECREF(p); }
    }
  }
  [[nodiscard]] nb::handle get() const noexcept { return ptr_; }

 private:
  PyObject* ptr_{nullptr};
};

// ------------------------------------------------------------------------------------
// Streams
// ------------------------------------------------------------------------------------

/// Backing struct of `nbrmm.Stream`.
struct Stream {
  cudaStream_t handle{nullptr};
  std::shared_ptr<rmm::cuda_stream> owned;  ///< set when nbrmm created (and owns) the stream
  nb::object owner;                         ///< wrapped foreign stream object, kept alive

  [[nodiscard]] cuda::stream_ref ref() const noexcept { return cuda::stream_ref{handle}; }
};

/// Whether `s` is the legacy default stream (spelled 0 or cudaStreamLegacy).
inline bool is_legacy_default(cudaStream_t s) noexcept
{
  return s == nullptr || s == cudaStreamLegacy;
}

/// Whether this thread holds the GIL (has an attached thread state). From Python 3.12 on
/// this reads the thread's own state directly, without PyGILState_Check's lookups.
inline bool holds_gil() noexcept
{
#if PY_VERSION_HEX >= 0x030D0000
  return PyThreadState_GetUnchecked() != nullptr;
#elif PY_VERSION_HEX >= 0x030C0000
  return _PyThreadState_UncheckedGet() != nullptr;
#else
  return PyGILState_Check() != 0;
#endif
}

/// Converts any stream-like Python object (nbrmm.Stream or an object implementing
/// `__cuda_stream__`) to a stream handle; raises TypeError naming `param` otherwise.
cuda::stream_ref stream_arg(nb::handle obj, char const* param);

/// Returns `obj` when it is an nbrmm.Stream, otherwise a new nbrmm.Stream wrapping it.
nb::object stream_object(nb::handle obj, char const* param);

/// A (non-owning) nbrmm.Stream for a raw handle, e.g. to pass to Python callbacks.
nb::object stream_for_handle(cudaStream_t handle);

/// The default stream object (nbrmm.DEFAULT_STREAM), borrowed from the module; for use
/// as a default argument while the module initialises.
nb::handle default_stream();

// ------------------------------------------------------------------------------------
// Resources
// ------------------------------------------------------------------------------------

/// Something (an nbrmm Buffer) whose C++ memory holds a copy of a resource's Python
/// callables; the resource lists its holders (see DeviceMemoryResource::holders).
/// (No virtual functions: nanobind destroys a Buffer as the bound class of its Python type.)
class resource_holder {
 public:
  using release_fn = void (*)(resource_holder*) noexcept;
  explicit resource_holder(release_fn release) noexcept : release_{release} {}

  /// Frees the holder's memory now (its resource is about to be torn down).
  void release_memory() noexcept { release_(this); }

 private:
  friend class holder_list;
  release_fn release_;
  resource_holder* prev_{nullptr};
  resource_holder* next_{nullptr};
};

/// The holders of one resource object. One process-wide lock guards every list (they
/// change only when a buffer over Python callables is created or freed). A move leaves
/// the source empty: resources are moved only before anything holds them.
class holder_list {
 public:
  holder_list() = default;
  holder_list(holder_list&& o) noexcept { *this = std::move(o); }
  holder_list& operator=(holder_list&& o) noexcept
  {
    std::lock_guard lock{mutex()};
    head_ = std::exchange(o.head_, nullptr);
    n_    = std::exchange(o.n_, 0);
    return *this;
  }

  void add(resource_holder* h) noexcept
  {
    std::lock_guard lock{mutex()};
    h->prev_ = nullptr;
    h->next_ = head_;
    if (head_ != nullptr) { head_->prev_ = h; }
    head_ = h;
    ++n_;
  }
  void remove(resource_holder* h) noexcept
  {
    std::lock_guard lock{mutex()};
    unlink(h);
  }
  /// Frees the memory of every holder (each removes itself while doing so).
  void release_all() noexcept
  {
    for (;;) {
      resource_holder* h = nullptr;
      {
        std::lock_guard lock{mutex()};
        h = head_;
      }
      if (h == nullptr) { return; }
      h->release_memory();
      std::lock_guard lock{mutex()};
      if (head_ == h) { unlink(h); }  // a holder that did not remove itself
    }
  }
  [[nodiscard]] long size() const noexcept
  {
    std::lock_guard lock{mutex()};
    return n_;
  }

 private:
  static std::mutex& mutex() noexcept
  {
    static std::mutex m;
    return m;
  }
  void unlink(resource_holder* h) noexcept
  {
    (h->prev_ != nullptr ? h->prev_->next_ : head_) = h->next_;
    if (h->next_ != nullptr) { h->next_->prev_ = h->prev_; }
    h->prev_ = h->next_ = nullptr;
    --n_;
  }

  resource_holder* head_{nullptr};
  long n_{0};
};

/// A resource that calls Python: `allocate(nbytes, stream) -> int` and
/// `deallocate(ptr, nbytes, stream)`. Every C++ copy shares (and owns) the callables.
class python_resource {
 public:
  struct state {
    state(nb::handle alloc, nb::handle dealloc) : allocate{alloc}, deallocate{dealloc} {}
    py_owned allocate;    ///< allocate(nbytes, stream) -> int
    py_owned deallocate;  ///< deallocate(ptr, nbytes, stream)
  };

  python_resource(nb::handle allocate, nb::handle deallocate);

  void* allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t alignment);
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment) noexcept;
  void* allocate_sync(std::size_t bytes, std::size_t alignment);
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept;

  bool operator==(python_resource const& other) const noexcept { return state_ == other.state_; }
  bool operator!=(python_resource const& other) const noexcept { return !(*this == other); }
  friend void get_property(python_resource const&, cuda::mr::device_accessible) noexcept {}

  [[nodiscard]] state const& callbacks() const noexcept { return *state_; }
  [[nodiscard]] state const* state_ptr() const noexcept { return state_.get(); }
  [[nodiscard]] long use_count() const noexcept { return state_.use_count(); }

 private:
  std::shared_ptr<state> state_;
};

/// Backing struct of `nbrmm.mr.DeviceMemoryResource` and all its subclasses.
struct DeviceMemoryResource {
  DeviceMemoryResource()                                   = default;
  DeviceMemoryResource(DeviceMemoryResource&&)             = default;
  DeviceMemoryResource& operator=(DeviceMemoryResource&&)  = default;
  /// Performs the deferred frees: they may hold the last C++ copy of this resource.
  ~DeviceMemoryResource();

  device_resource res;          ///< the owning librmm resource (empty only after GC clear)
  int device{-1};               ///< CUDA device active when the resource was created
  bool host_accessible{false};  ///< memory can be read by the host
  bool from_cpp{false};         ///< a wrapper of a resource that C++ created (wrap_resource)
  nb::object upstream;          ///< the Python upstream (adaptors), kept alive
  nb::object keep;              ///< further Python objects the resource needs alive
  /// nbrmm Buffers that reference this object and hold a C++ copy of its Python callables
  /// (see python_state): the garbage collector may treat such copies as owned by it, and
  /// the object frees their memory when it is finalized as cyclic garbage.
  holder_list holders;

  /// The resource, or a ValueError when it was cleared.
  device_resource& get();

  /// The resource as Buffers hold it: one more C++ copy of `res`, made once, which every
  /// Buffer allocated from this object co-owns (taking a share is one reference count
  /// rather than a copy of the type-erased resource). Raises like get().
  std::shared_ptr<device_resource> const& shared();

  /// How many owners (this object included) share the copy made by shared(); 0 before.
  [[nodiscard]] long shared_uses() const noexcept { return shared_ ? shared_.use_count() : 0; }

  /// Drops `res` and this object's share of the shared copy (garbage collector's clear).
  void clear() noexcept;

  /// python_state(res), worked out once: `res` is set once, when the object is made.
  [[nodiscard]] python_resource::state const* callables() noexcept;

  /// deferred_frees::caches(res), worked out once.
  [[nodiscard]] bool caches() noexcept;

 private:
  std::shared_ptr<device_resource> shared_;
  python_resource::state const* callables_{nullptr};
  bool callables_known_{false};
  signed char caches_{-1};  ///< -1: not worked out yet
};

/// Backing struct of `nbrmm.mr.UpstreamResourceAdaptor` (adaptors derive from it).
struct UpstreamResourceAdaptor : DeviceMemoryResource {};

/// The entry that nbrmm stores in librmm's per-device map: the resource itself plus the
/// Python object it was set from, so that Python gets back the very object it set.
class python_owned_resource {
 public:
  python_owned_resource(device_resource inner, nb::handle owner)
    : inner_{std::move(inner)}, owner_{std::make_shared<py_owned>(owner)}
  {
  }

  void* allocate(cuda::stream_ref s, std::size_t bytes, std::size_t alignment)
  {
    return inner_.allocate(s, bytes, alignment);
  }
  void deallocate(cuda::stream_ref s, void* p, std::size_t bytes, std::size_t alignment) noexcept
  {
    inner_.deallocate(s, p, bytes, alignment);
  }
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    return inner_.allocate_sync(bytes, alignment);
  }
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment) noexcept
  {
    inner_.deallocate_sync(p, bytes, alignment);
  }
  bool operator==(python_owned_resource const& o) const noexcept { return inner_ == o.inner_; }
  bool operator!=(python_owned_resource const& o) const noexcept { return !(*this == o); }
  friend void get_property(python_owned_resource const&, cuda::mr::device_accessible) noexcept {}

  [[nodiscard]] nb::handle owner() const noexcept { return owner_->get(); }
  [[nodiscard]] device_resource const& inner() const noexcept { return inner_; }

 private:
  device_resource inner_;
  std::shared_ptr<py_owned> owner_;
};

/// The shared callables of a Python-implemented resource (also inside a
/// python_owned_resource), or nullptr for any other resource.
python_resource::state const* python_state(device_resource const& res) noexcept;
python_resource::state const* python_state(rmm::device_async_resource_ref res) noexcept;

/// The resource a block was allocated from, kept alive by whoever will free the block: a
/// share of a resource object's shared copy (DeviceMemoryResource::shared), a copy of its
/// own, or nothing (no block). Moving one leaves it empty.
class held_resource {
 public:
  held_resource() noexcept = default;
  held_resource(held_resource&& other) noexcept : held_{std::move(other.held_)} { other.reset(); }
  held_resource& operator=(held_resource&& other) noexcept
  {
    if (this != &other) {
      held_ = std::move(other.held_);
      other.reset();
    }
    return *this;
  }
  held_resource(held_resource const&)            = delete;
  held_resource& operator=(held_resource const&) = delete;
  ~held_resource()                               = default;
  explicit held_resource(std::shared_ptr<device_resource> share) noexcept
    : held_{std::in_place_index<1>, std::move(share)}
  {
  }
  explicit held_resource(device_resource copy) noexcept
    : held_{std::in_place_index<2>, std::move(copy)}
  {
  }

  [[nodiscard]] bool empty() const noexcept { return held_.index() == 0; }
  /// The resource (not empty()).
  [[nodiscard]] device_resource& get() noexcept
  {
    return held_.index() == 1 ? **std::get_if<1>(&held_) : *std::get_if<2>(&held_);
  }
  [[nodiscard]] device_resource const& get() const noexcept
  {
    return const_cast<held_resource*>(this)->get();
  }
  [[nodiscard]] device_resource* operator->() noexcept { return &get(); }
  /// Drops the share or copy, which may be the last owner of the resource.
  void reset() noexcept { held_.emplace<0>(); }

 private:
  std::variant<std::monostate, std::shared_ptr<device_resource>, device_resource> held_;
};

// ------------------------------------------------------------------------------------
// Deferred frees
// ------------------------------------------------------------------------------------

/// Frees that wait for nbrmm's next GIL release (see docs/design.md, "Deferred frees").
///
/// Freeing memory releases the GIL, because a deallocate may block or enter CUDA. When
/// a Buffer (or memory lent to CuPy) dies with the GIL held, a small block on the legacy
/// default stream that goes back to a caching sub-allocator (pool, arena, fixed-size:
/// their deallocate only returns the block to their own free lists, so no adaptor or
/// upstream sees when it happens) is queued instead. Every window in which nbrmm
/// releases the GIL frees the queue first: any allocation, any other free, any change of
/// a per-device resource. The death of any resource object and interpreter exit free it
/// too. At most `capacity` blocks and `byte_budget` bytes wait; with the GIL disabled
/// nothing is deferred.
namespace deferred_frees {

inline constexpr int capacity                 = 16;
inline constexpr std::size_t byte_budget      = std::size_t{1} << 20;

/// Recognises a resource type whose deallocate only refills its own cache.
using predicate = bool (*)(device_resource const& res) noexcept;

/// Registers a caching resource type (called by the bind_* functions).
void register_cache(predicate p);

/// Registers the librmm resource type `T` as a caching resource.
template <class T>
void register_cache()
{
  register_cache([](device_resource const& res) noexcept {
    return cuda::mr::resource_cast<T>(&res) != nullptr;
  });
}

/// Whether frees to `res` may wait: it is (or, as a per-device entry set from Python,
/// wraps) a registered caching resource.
bool caches(device_resource const& res) noexcept;

/// Queues the free of `ptr` (`bytes`, `alignment`) to `res` on `stream`, moving `res`
/// into the queue, when `stream` is the legacy default stream, the queue has room and
/// deferral is still on. The caller holds the GIL and has checked caches(res.get()).
/// Returns false (and leaves `res` alone) when the caller must free now.
bool defer(held_resource& res,
           void* ptr,
           std::size_t bytes,
           std::size_t alignment,
           cudaStream_t stream,
           int device) noexcept;

/// Storage of queued frees (defined in memory_resource.cpp).
class entries;

/// Releases the GIL and performs the queued frees: with the GIL held, the queue's
/// storage is swapped for an empty one (`*taken` receives it, or null when nothing was
/// queued), then the GIL is released and the taken frees are done. Returns the thread
/// state for PyEval_RestoreThread; give `*taken` back with recycle() once the GIL is
/// held again.
PyThreadState* release_gil(entries** taken) noexcept;

/// Returns storage taken by release_gil (call with the GIL held).
void recycle(entries* taken) noexcept;

/// Performs the queued frees now (releasing the GIL only if there are any). Call with
/// the GIL held.
void flush() noexcept;

/// Frees the queue and stops deferring for good (at interpreter exit). Call with the GIL
/// held.
void stop() noexcept;

/// Drops the queue without freeing anything (in a forked child: the blocks and resources
/// belong to the parent's CUDA context, which the child must not touch).
void forget() noexcept;

/// Turns deferral on or off (a measurement switch; it stays off after stop()). Returns
/// whether it was on. Call with the GIL held.
bool enable(bool on) noexcept;

/// Number of queued frees and their bytes.
std::pair<int, std::size_t> pending() noexcept;

}  // namespace deferred_frees

/// nbrmm's scoped GIL release: like nb::gil_scoped_release, and it first performs the
/// deferred frees. Use it around every call that may allocate, free, block or enter CUDA.
class gil_release {
 public:
  gil_release() noexcept : state_{deferred_frees::release_gil(&taken_)} {}
  gil_release(gil_release const&)            = delete;
  gil_release& operator=(gil_release const&) = delete;
  ~gil_release()
  {
    PyEval_RestoreThread(state_);
    if (taken_ != nullptr) { deferred_frees::recycle(taken_); }
  }

 private:
  deferred_frees::entries* taken_{nullptr};
  PyThreadState* state_;
};

/// Returns the nbrmm resource behind a Python object, or raises TypeError naming `param`.
DeviceMemoryResource& resource_arg(nb::handle obj, char const* param);

/// Resolves an `mr=` argument: None means the current device resource, read from
/// librmm's per-device map at call time. Returns the Python object (to keep alive).
nb::object resource_or_current(nb::handle mr, char const* param);

/// The Python object for a C++ resource: the object it was set from, an instance of the
/// concrete nbrmm class when nbrmm knows the type, else a generic DeviceMemoryResource.
/// `device` is the device the resource serves.
nb::object wrap_resource(device_resource const& res, int device);

/// A wrapper factory: returns a Python object when `res` holds the type it knows.
using wrapper_fn = nb::object (*)(device_resource const& res, int device);

/// Registers a factory used by `wrap_resource` (called by the bind_* functions).
void register_wrapper(wrapper_fn fn);

/// Creates an instance of the bound class `T` (a DeviceMemoryResource subclass) that
/// wraps `res`, a resource C++ created; `upstream` is the Python upstream for adaptors.
template <class T>
nb::object make_resource_object(device_resource res,
                                int device,
                                nb::object upstream  = nb::none(),
                                bool host_accessible = false)
{
  T value{};
  value.res             = std::move(res);
  value.device          = device;
  value.host_accessible = host_accessible;
  value.from_cpp        = true;
  value.upstream        = std::move(upstream);
  return nb::cast(std::move(value), nb::rv_policy::move);
}

/// Registers a wrapper that recognises the librmm type `Cpp` and wraps it in the bound
/// nbrmm class `Py`.
template <class Py, class Cpp, bool HostAccessible = false>
void register_typed_wrapper()
{
  register_wrapper([](device_resource const& res, int device) -> nb::object {
    if (cuda::mr::resource_cast<Cpp>(&res) == nullptr) { return nb::object{}; }
    return make_resource_object<Py>(res, device, nb::none(), HostAccessible);
  });
}

/// GC slots shared by every resource class (traverse upstream/kept objects and Python
/// callables that only this object owns; clear breaks such cycles).
extern PyType_Slot resource_type_slots[];

/// Binds the resource class `T` (deriving from `Base`) with the GC slots and weak
/// reference support every nbrmm resource has.
template <class T, class Base = DeviceMemoryResource>
nb::class_<T, Base> resource_class(nb::handle scope, char const* name, char const* doc)
{
  return nb::class_<T, Base>(scope, name, nb::type_slots(resource_type_slots),
                             nb::is_weak_referenceable(), doc);
}

/// Parses a size argument: a non-negative int or a string such as "1GiB". Raises
/// TypeError/ValueError naming `param`.
std::size_t parse_size(nb::handle obj, char const* param);

/// Parses an optional size argument (None stays empty).
std::optional<std::size_t> parse_optional_size(nb::handle obj, char const* param);

/// The current CUDA device as librmm reports it (-1 without a usable GPU). With exactly
/// one device (the count is fixed once CUDA is initialised) it is 0 without asking CUDA.
int current_device();

/// Whether this process sees more than one CUDA device.
bool multiple_devices() noexcept;

/// Makes `device` (-1: unknown) current for its lifetime where the process sees several
/// devices; with one, that device is current already and nothing is asked of CUDA.
class device_scope {
 public:
  explicit device_scope(int device)
  {
    if (device >= 0 && multiple_devices()) { guard_.emplace(rmm::cuda_device_id{device}); }
  }

 private:
  std::optional<rmm::cuda_set_device_raii> guard_;
};

/// Frees `ptr` to `res`, ordered on `stream`, with `device` (the device the memory lives
/// on, -1 if unknown) current when the process sees several devices.
inline void deallocate_on_device(device_resource& res,
                                 cuda::stream_ref stream,
                                 void* ptr,
                                 std::size_t bytes,
                                 std::size_t alignment,
                                 int device) noexcept
{
  device_scope const on_device{device};
  res.deallocate(stream, ptr, bytes, alignment);
}

/// Throws nbrmm.CudaError (rmm::cuda_error) for a failed CUDA call `what`, clearing the
/// runtime's last-error state.
[[noreturn]] void throw_cuda_error(cudaError_t status, char const* what);

/// Throws nbrmm.CudaError unless `status` is cudaSuccess.
inline void check_cuda(cudaError_t status, char const* what)
{
  if (status != cudaSuccess) { throw_cuda_error(status, what); }
}

/// Sets the Python exception for the C++ exception being handled (call inside `catch`),
/// translated exactly as nanobind translates exceptions leaving a bound function.
void raise_current_exception() noexcept;

/// Number of CUDA devices (0 without a usable GPU or driver; never raises).
int device_count() noexcept;

/// Raises ValueError unless `device` is an existing device id.
void check_device(int device);

// ------------------------------------------------------------------------------------
// Binding entry points, in the order nb_rmm.cpp calls them
// ------------------------------------------------------------------------------------
void bind_errors(nb::module_& m);
void bind_rmm_compat(nb::module_& m);
void bind_cuda_device(nb::module_& m);
void bind_cuda_stream(nb::module_& m);
void bind_cuda_stream_pool(nb::module_& m);
void bind_memory_resource(nb::module_& m);
void bind_cuda_memory_resource(nb::module_& m);
void bind_callback_memory_resource(nb::module_& m);
void bind_managed_memory_resource(nb::module_& m);
void bind_system_memory_resource(nb::module_& m);
void bind_sam_headroom_memory_resource(nb::module_& m);
void bind_pinned_host_memory_resource(nb::module_& m);
void bind_cuda_async_memory_resource(nb::module_& m);
void bind_cuda_async_view_memory_resource(nb::module_& m);
void bind_cuda_async_managed_memory_resource(nb::module_& m);
void bind_pool_memory_resource(nb::module_& m);
void bind_arena_memory_resource(nb::module_& m);
void bind_fixed_size_memory_resource(nb::module_& m);
void bind_binning_memory_resource(nb::module_& m);
void bind_limiting_resource_adaptor(nb::module_& m);
void bind_logging_resource_adaptor(nb::module_& m);
void bind_statistics_resource_adaptor(nb::module_& m);
void bind_tracking_resource_adaptor(nb::module_& m);
void bind_failure_callback_resource_adaptor(nb::module_& m);
void bind_prefetch_resource_adaptor(nb::module_& m);
void bind_aligned_resource_adaptor(nb::module_& m);
void bind_thread_safe_resource_adaptor(nb::module_& m);
void bind_per_device_resource(nb::module_& m);
void bind_device_buffer(nb::module_& m);
void bind_pointer_copies(nb::module_& m);
void bind_cupy_allocator(nb::module_& m);
void bind_torch_allocator(nb::module_& m);
void bind_logger(nb::module_& m);
void bind_testing(nb::module_& m);

}  // namespace nbrmm
