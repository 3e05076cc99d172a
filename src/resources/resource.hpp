// Resources: the Python resource objects (nbrmm.mr.DeviceMemoryResource and subclasses),
// the C++ resource that calls Python, and the rules that keep both alive and collectable.
//
// Ownership (see docs/design.md, "Ownership"):
//  * Every resource object owns a librmm resource (`res`); C++ copies share its state.
//  * A copy of a Python-made resource that leaves its object (into an adaptor, a bin,
//    librmm's per-device map, another extension, a torch slot) is `owned_copy()`: it
//    carries a strong reference to the object (python_owned_resource). Buffers made from
//    the object hold the object in `mr`. So the object outlives every other owner of its
//    librmm state, and the Python references inside that state (callables, the objects of
//    upstream copies) are the object's own: its tp_traverse reports them, and the garbage
//    collector can find and break any cycle through them.
//  * An object that wraps a resource C++ made (`from_cpp`) shares its state with C++
//    owners that hold no reference to it, and reports only its Python attributes.
//
// Re-entrancy: while a Python callback of a resource runs (callback_scope), the resource
// and whatever called it may hold locks. A call from that callback into a resource that
// depends on the calling one (it would call it again) is refused (check_reentry), and a
// free to one waits until the callback has returned (would_reenter, waiting_frees.hpp).
#pragma once

#include "core/device.hpp"
#include "core/history.hpp"
#include "core/py_owned.hpp"
#include "resources/resource_base.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace nbrmm {

// ------------------------------------------------------------------------------------
// Python callbacks run by resources
// ------------------------------------------------------------------------------------

/// Marks this thread as running a Python callback of the resource state `key` (a
/// python_resource's callables, a failure callback) for its lifetime.
class callback_scope {
 public:
  explicit callback_scope(void const* key) noexcept;
  callback_scope(callback_scope const&)            = delete;
  callback_scope& operator=(callback_scope const&) = delete;
  ~callback_scope();

 private:
  bool marked_{false};  ///< the key was recorded (and is removed again)
};

namespace detail {
/// Callback scopes marked on any thread: while it is 0, no thread runs a callback, so the
/// hot paths (every allocation and free) skip the per-thread record. A thread sees its own
/// scopes in the count, whatever other threads do.
extern std::atomic<int> callbacks_running;
/// Whether this thread's record lists a callback (the per-thread part of inside_callback).
bool inside_callback_slow() noexcept;
}  // namespace detail

/// Whether this thread is running a Python callback of a resource.
inline bool inside_callback() noexcept
{
  return detail::callbacks_running.load(std::memory_order_relaxed) != 0 &&
         detail::inside_callback_slow();
}

/// A resource that calls Python: `allocate(nbytes, stream) -> int` and
/// `deallocate(ptr, nbytes, stream)`. Every C++ copy shares (and owns) the callables.
class python_resource : public resource_base<python_resource> {
 public:
  struct state {
    state(nb::handle alloc, nb::handle dealloc, std::string name_)
      : allocate{alloc}, deallocate{dealloc}, name{std::move(name_)}
    {
    }
    py_owned allocate;    ///< allocate(nbytes, stream) -> int
    py_owned deallocate;  ///< deallocate(ptr, nbytes, stream)
    std::string name;     ///< how messages name the allocate callable
  };

  python_resource(nb::handle allocate, nb::handle deallocate, std::string name);

  void* allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t alignment);
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment) noexcept;

  bool operator==(python_resource const& other) const noexcept { return state_ == other.state_; }

  [[nodiscard]] state const& callbacks() const noexcept { return *state_; }
  [[nodiscard]] state const* state_ptr() const noexcept { return state_.get(); }

 private:
  std::shared_ptr<state> state_;
};

/// A copy of a Python-made resource with a strong reference to its Python object (see the
/// comment at the top). Also the entry nbrmm writes into librmm's per-device map
/// (`map_entry`), so that Python gets back the very object it set; the entry records what
/// C++ allocates through it in the memory history. Copies share one reference.
class python_owned_resource : public forwarding_resource<python_owned_resource> {
 public:
  python_owned_resource(device_resource inner, nb::handle owner, bool map_entry = false)
    : inner_{std::move(inner)}, owner_{std::make_shared<py_owned>(owner)}, map_entry_{map_entry}
  {
  }

  void* allocate(cuda::stream_ref stream, std::size_t bytes, std::size_t alignment)
  {
    if (!map_entry_ || !history::recording()) [[likely]] {
      return inner_.allocate(stream, bytes, alignment);
    }
    return allocate_recorded(stream, bytes, alignment);
  }
  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment) noexcept
  {
    if (map_entry_ && history::recording()) [[unlikely]] {
      record_free(stream, ptr, bytes);
    }
    history::nested_call const nested;
    inner_.deallocate(stream, ptr, bytes, alignment);
  }
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    return allocate(cuda::stream_ref{cudaStream_t{nullptr}}, bytes, alignment);
  }
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    deallocate(cuda::stream_ref{cudaStream_t{nullptr}}, ptr, bytes, alignment);
  }

  bool operator==(python_owned_resource const& o) const noexcept { return inner_ == o.inner_; }

  [[nodiscard]] device_resource& target() noexcept { return inner_; }
  [[nodiscard]] nb::handle owner() const noexcept { return owner_->get(); }
  [[nodiscard]] device_resource const& inner() const noexcept { return inner_; }
  /// The reference all copies share (to tell whether one copy is the only one).
  [[nodiscard]] std::weak_ptr<py_owned> group() const noexcept { return owner_; }

 private:
  void* allocate_recorded(cuda::stream_ref stream, std::size_t bytes, std::size_t alignment);
  static void record_free(cuda::stream_ref stream, void const* ptr, std::size_t bytes) noexcept;

  device_resource inner_;
  std::shared_ptr<py_owned> owner_;
  bool map_entry_{false};
};

/// The resource inside a python_owned_resource, or `res` itself.
device_resource const& unwrap(device_resource const& res) noexcept;

/// The shared callables of a Python-implemented resource (also inside a
/// python_owned_resource), or nullptr for any other resource.
python_resource::state const* python_state(device_resource const& res) noexcept;

// ------------------------------------------------------------------------------------
// Resource objects
// ------------------------------------------------------------------------------------

/// Something (an nbrmm Buffer) whose memory a resource object must free while it is
/// finalized as cyclic garbage; the resource lists its holders. (No virtual functions:
/// nanobind destroys a Buffer as the bound class of its Python type.)
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
/// change only when a buffer of a resource that calls Python is created or freed).
class holder_list {
 public:
  holder_list() = default;
  holder_list(holder_list&& o) noexcept { *this = std::move(o); }
  holder_list& operator=(holder_list&& o) noexcept;
  void add(resource_holder* h) noexcept;
  void remove(resource_holder* h) noexcept;
  /// Frees the memory of every holder (each removes itself while doing so).
  void release_all() noexcept;
  [[nodiscard]] long size() const noexcept;

 private:
  void unlink(resource_holder* h) noexcept;
  resource_holder* head_{nullptr};
  long n_{0};
};

/// Backing struct of `nbrmm.mr.DeviceMemoryResource` and all its subclasses.
struct DeviceMemoryResource {
  DeviceMemoryResource()                                  = default;
  DeviceMemoryResource(DeviceMemoryResource&&)            = default;
  DeviceMemoryResource& operator=(DeviceMemoryResource&&) = default;

  device_resource res;          ///< the owning librmm resource (empty only after GC clear)
  int device{-1};               ///< CUDA device active when the resource was created
  bool host_accessible{false};  ///< memory can be read by the host
  bool from_cpp{false};         ///< a wrapper of a resource that C++ created (wrap_resource)
  /// Python code serves or frees this resource's memory, here or in a resource it uses.
  bool calls_python{false};
  /// Identity of this resource's own Python callback (its callables, or a failure
  /// callback), for re-entrancy checks; null if it has none.
  void const* callback_key{nullptr};
  nb::object upstream;  ///< the Python upstream (adaptors), kept alive
  nb::object keep;      ///< further Python objects the resource needs alive (bins, ...)
  /// References to Python objects that `res` alone holds (callables, a failure callback):
  /// reported to the garbage collector while `res` is set.
  std::vector<py_owned const*> own_refs;
  /// The references that copies of other resource objects inside `res` hold (upstream,
  /// bins): reported to the garbage collector while no other copy shares them.
  std::vector<std::weak_ptr<py_owned>> impl_refs;
  /// nbrmm Buffers allocated from this object while it calls Python: their memory is
  /// freed when this object is finalized as cyclic garbage, while the callables are intact.
  holder_list holders;

  /// The resource, or a ValueError when it was cleared.
  device_resource& get();

  /// A copy of the resource for a new C++ owner outside this object: it keeps `self` (the
  /// Python object of this struct) alive, unless this object wraps a C++-made resource.
  device_resource owned_copy(nb::handle self);

  /// Takes what a C++ copy of `upstream` (made by `upstream.owned_copy`) brings into this
  /// object's resource: its reference for the garbage collector, and its Python callers.
  void adopt(DeviceMemoryResource const& upstream, device_resource const& copy);

  /// The resource as Buffers hold it: one more C++ copy of `res`, made once, which every
  /// Buffer allocated from this object co-owns. Raises like get().
  std::shared_ptr<device_resource> const& shared();

  /// Drops `res`, this object's share of the shared copy and the references of impl_refs
  /// (garbage collector's clear).
  void clear() noexcept;

  /// python_state(res), worked out once: `res` is set once, when the object is made.
  [[nodiscard]] python_resource::state const* callables() noexcept;

 private:
  std::shared_ptr<device_resource> shared_;
  python_resource::state const* callables_{nullptr};
  bool callables_known_{false};
};

/// Backing struct of `nbrmm.mr.UpstreamResourceAdaptor` (adaptors derive from it).
struct UpstreamResourceAdaptor : DeviceMemoryResource {};

/// Returns the nbrmm resource behind a Python object, or raises TypeError naming `param`.
DeviceMemoryResource& resource_arg(nb::handle obj, char const* param);

/// Whether `obj` is an nbrmm resource object (ready).
bool is_resource(nb::handle obj) noexcept;

/// Resolves an `mr=` argument: None means the current device resource, read from
/// librmm's per-device map at call time. Returns the Python object (to keep alive).
nb::object resource_or_current(nb::handle mr, char const* param);

namespace detail {
void check_reentry_slow(nb::handle mr, char const* what);
bool would_reenter_slow(nb::handle mr) noexcept;
}  // namespace detail

/// Raises RuntimeError when this thread runs a Python callback of a resource that the
/// resource object `mr` depends on (so using `mr` here would call back into it, which may
/// deadlock); `what` names the call.
inline void check_reentry(nb::handle mr, char const* what)
{
  if (inside_callback()) { detail::check_reentry_slow(mr, what); }
}

/// Whether a free to `mr` now would call back into a resource whose Python callback this
/// thread runs (the free must then wait: waiting_frees).
inline bool would_reenter(nb::handle mr) noexcept
{
  return inside_callback() && detail::would_reenter_slow(mr);
}

/// DeviceMemoryResource.allocate of the resource object `self`, its arguments checked
/// (`bytes` passed check_request with `alignment`): allocates, records the allocation
/// under its address (keeping `self` alive) and returns the address (0 for 0 bytes).
std::uintptr_t raw_allocate(nb::handle self, std::size_t bytes, std::size_t alignment,
                            cuda::stream_ref stream);

/// DeviceMemoryResource.deallocate of `self`, its arguments parsed: frees a recorded
/// allocation of `self` made with these `bytes` and `alignment`, or raises ValueError
/// naming what does not match (nothing is freed then).
void raw_deallocate(nb::handle self, std::uintptr_t ptr, std::size_t bytes,
                    std::size_t alignment, cuda::stream_ref stream);

/// Lets go of the resource objects that outstanding DeviceMemoryResource.allocate
/// allocations keep alive (at interpreter exit; the allocations stay recorded).
void release_raw_allocation_owners() noexcept;

/// Whether the resource object `from` is `target` or depends on it (through upstreams and
/// bins).
bool depends_on(nb::handle from, nb::handle target);

// ------------------------------------------------------------------------------------
// Wrapping C++ resources as Python objects
// ------------------------------------------------------------------------------------

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
  bool const calls_python = upstream.is_valid() && is_resource(upstream) &&
                            nb::inst_ptr<DeviceMemoryResource>(upstream)->calls_python;
  value.res             = std::move(res);
  value.device          = device;
  value.host_accessible = host_accessible;
  value.from_cpp        = true;
  value.calls_python    = calls_python || python_state(value.res) != nullptr;
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

/// GC slots shared by every resource class (see the comment at the top).
extern PyType_Slot resource_type_slots[];

/// Records a resource class whose resources allocate with CUDA (CudaMemoryResource, ...):
/// without a usable GPU, none of their allocations can succeed.
void register_gpu_resource_type(nb::handle type);

/// The class name of the first resource object that `mr` allocates through (itself, its
/// upstream, its bins) whose class allocates with CUDA; empty when there is none.
std::string gpu_resource_below(nb::handle mr);

/// Records the class nbrmm.mr.DeviceMemoryResource (once, when it is bound).
void set_resource_type(PyTypeObject* type) noexcept;

/// Binds the resource class `T` (deriving from `Base`) with the GC slots and weak
/// reference support every nbrmm resource has.
template <class T, class Base = DeviceMemoryResource>
nb::class_<T, Base> resource_class(nb::handle scope, char const* name, char const* doc)
{
  return nb::class_<T, Base>(scope, name, nb::type_slots(resource_type_slots),
                             nb::is_weak_referenceable(), doc);
}

// ------------------------------------------------------------------------------------
// Allocating with any alignment
// ------------------------------------------------------------------------------------

/// A block of memory from a resource, aligned as asked: librmm's resources align to 256
/// bytes, so a larger alignment is served from a larger block.
struct block {
  void* data{nullptr};      ///< the aligned memory (null for 0 bytes)
  void* raw{nullptr};       ///< what the resource returned
  std::size_t raw_bytes{0};  ///< what was asked of the resource
  std::size_t raw_alignment{default_alignment};  ///< the alignment asked of the resource
};

namespace detail {
/// Gives back a block the resource returned null or misaligned, and throws bad_alloc.
[[noreturn]] void refuse_block(device_resource& res, cuda::stream_ref stream, block const& b);
}  // namespace detail

/// Allocates `bytes` bytes aligned to `alignment` (a power of two, checked with
/// check_request) from `res` (serving `device`, -1 if unknown), ordered on `stream`, and
/// records it in the memory history. Call without the GIL. (Inline: it is on the path of
/// every allocation.)
inline block allocate_block(device_resource& res, cuda::stream_ref stream, std::size_t bytes,
                            std::size_t alignment, int device)
{
  block b;
  if (bytes == 0) { return b; }
  if (alignment <= default_alignment) {
    b.raw_alignment = alignment;
    b.raw_bytes     = bytes;
  } else {
    b.raw_alignment = default_alignment;
    b.raw_bytes     = bytes + (alignment - default_alignment);
  }
  try {
    history::nested_call const nested;
    b.raw = res.allocate(stream, b.raw_bytes, b.raw_alignment);
  } catch (...) {
    history::failed(bytes, device, stream.get(), history::source::nbrmm);
    throw;
  }
  auto const raw = reinterpret_cast<std::uintptr_t>(b.raw);
  if (b.raw == nullptr || raw % b.raw_alignment != 0) [[unlikely]] {
    detail::refuse_block(res, stream, b);
  }
  b.data = reinterpret_cast<void*>((raw + (alignment - 1)) & ~(std::uintptr_t{alignment} - 1));
  history::allocated(b.data, bytes, device, stream.get(), history::source::nbrmm);
  return b;
}

/// Frees `b` to `res`, ordered on `stream`, with `device` (the device the memory lives on,
/// -1 if unknown) current when the process sees several devices. Call without the GIL.
inline void free_block(device_resource& res, cuda::stream_ref stream, block const& b,
                       int device) noexcept
{
  if (b.raw == nullptr) { return; }
  history::freed(b.data, b.raw_bytes, device, stream.get());
  history::nested_call const nested;
  device_scope const on_device{device};
  res.deallocate(stream, b.raw, b.raw_bytes, b.raw_alignment);
}

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

}  // namespace nbrmm
