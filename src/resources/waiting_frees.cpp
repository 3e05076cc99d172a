// The deferred-free queue (see deferred_frees.hpp).
#include "deferred_frees.hpp"

#include "bindings.hpp"
#include "errors.hpp"
#include "gil.hpp"
#include "stream.hpp"

#include <atomic>
#include <mutex>
#include <new>
#include <vector>

namespace nbrmm::deferred_frees {
namespace {

/// One queued free, holding its resource (and the resource's Python object) alive.
struct entry {
  held_resource res;
  block b;
  cudaStream_t stream;
  int device;
  DeviceMemoryResource* owner;  ///< counts this entry in queued_frees (or null)
  std::unique_ptr<rmm::device_buffer> adopted;  ///< freed by its own destructor, if set

  void free() noexcept
  {
    if (adopted) {
      device_scope const on_device{device};
      adopted.reset();
      return;
    }
    free_block(res.get(), cuda::stream_ref{stream}, b, device);
  }
};

}  // namespace

/// Room for up to `capacity` entries, constructed in place as they arrive, plus the frees
/// that must wait beyond the limits.
class entries {
 public:
  entries() noexcept {}
  entries(entries const&)            = delete;
  entries& operator=(entries const&) = delete;
  ~entries() {}  // only ever destroyed empty

  [[nodiscard]] int count() const noexcept { return count_ + static_cast<int>(blocked_.size()); }
  [[nodiscard]] bool full() const noexcept { return count_ == capacity; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

  void emplace(held_resource& res, block const& b, cudaStream_t stream, int device,
               DeviceMemoryResource* owner) noexcept
  {
    if (owner != nullptr) { ++owner->queued_frees; }
    new (&slots_[count_++].e) entry{std::move(res), b, stream, device, owner, nullptr};
    bytes_ += b.raw_bytes;
  }
  /// Returns false when no memory was left for the entry.
  bool emplace_blocked(held_resource& res, block const& b, cudaStream_t stream, int device,
                       DeviceMemoryResource* owner,
                       std::unique_ptr<rmm::device_buffer>& adopted) noexcept
  {
    try {
      blocked_.push_back(entry{std::move(res), b, stream, device, owner, std::move(adopted)});
      if (owner != nullptr) { ++owner->queued_frees; }
      return true;
    } catch (...) {
      return false;
    }
  }
  /// Frees every entry's block and drops what kept its resource alive (which may be the
  /// last owner); drop_owners() then updates the counts (with the GIL).
  void free_all() noexcept
  {
    for (int i = 0; i < count_; ++i) {
      slots_[i].e.free();
      slots_[i].e.res.reset();
    }
    for (entry& e : blocked_) {
      e.free();
      e.res.reset();
    }
  }
  /// Updates the owners' counts and empties the storage (call with the GIL held).
  void drop_owners() noexcept
  {
    for (int i = 0; i < count_; ++i) {
      if (slots_[i].e.owner != nullptr) { --slots_[i].e.owner->queued_frees; }
      slots_[i].e.~entry();
    }
    for (entry& e : blocked_) {
      if (e.owner != nullptr) { --e.owner->queued_frees; }
    }
    blocked_.clear();
    count_ = 0;
    bytes_ = 0;
  }
  /// Stops counting in `owner`.
  void forget(DeviceMemoryResource const* owner) noexcept
  {
    for (int i = 0; i < count_; ++i) {
      if (slots_[i].e.owner == owner) { slots_[i].e.owner = nullptr; }
    }
    for (entry& e : blocked_) {
      if (e.owner == owner) { e.owner = nullptr; }
    }
  }

  /// Links of the list of storage being freed without the GIL (in_flight).
  entries* prev_in_flight{nullptr};
  entries* next_in_flight{nullptr};

 private:
  union slot {
    slot() noexcept {}
    ~slot() {}
    entry e;
  };
  int count_{0};
  std::size_t bytes_{0};
  slot slots_[capacity];
  std::vector<entry> blocked_;
};

namespace {

// Registered predicates: written once each and never removed, so readers need no lock
// (with the GIL disabled, registration may race with frees on other threads).
constexpr int max_predicates = 64;
std::atomic<predicate> predicates[max_predicates];
std::atomic<int> predicate_count{0};
std::mutex register_mutex;

#if !defined(Py_GIL_DISABLED)
// Guarded by the GIL. The queue's storage is never freed: whatever a thread is still
// freeing at exit stays valid.
entries* queue = new entries;
// Empty storage to swap in; more is made only while several threads free at once.
constexpr int spare_capacity = 8;
entries* spares[spare_capacity] = {new entries};
int spare_count                 = 1;
// Storage taken by threads that are freeing it now (without the GIL): a list linked
// through the storage itself, so that taking and giving back storage allocates nothing.
entries* in_flight = nullptr;

void add_in_flight(entries* batch) noexcept
{
  batch->prev_in_flight = nullptr;
  batch->next_in_flight = in_flight;
  if (in_flight != nullptr) { in_flight->prev_in_flight = batch; }
  in_flight = batch;
}

void remove_in_flight(entries* batch) noexcept
{
  (batch->prev_in_flight != nullptr ? batch->prev_in_flight->next_in_flight : in_flight) =
    batch->next_in_flight;
  if (batch->next_in_flight != nullptr) {
    batch->next_in_flight->prev_in_flight = batch->prev_in_flight;
  }
  batch->prev_in_flight = batch->next_in_flight = nullptr;
}
bool accepting{true};  // false when switched off, and for good once stop() ran
bool stopped{false};
#endif

}  // namespace

void register_cache(predicate p)
{
  std::lock_guard<std::mutex> lock{register_mutex};
  int const n = predicate_count.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    if (predicates[i].load(std::memory_order_relaxed) == p) { return; }
  }
  if (n == max_predicates) {
    throw nb::value_error("capsule: too many caching resource types are registered");
  }
  predicates[n].store(p, std::memory_order_relaxed);
  predicate_count.store(n + 1, std::memory_order_release);
}

bool caches(device_resource const& res) noexcept
{
  device_resource const& inner = unwrap(res);
  int const n                  = predicate_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (predicates[i].load(std::memory_order_relaxed)(inner)) { return true; }
  }
  return false;
}

bool defer(held_resource& res, block const& b, cudaStream_t stream, int device,
           DeviceMemoryResource* owner) noexcept
{
#if defined(Py_GIL_DISABLED)
  return false;
#else
  if (!accepting || queue->full() || b.raw_bytes > byte_budget - queue->bytes() ||
      !is_legacy_default(stream)) {
    return false;
  }
  queue->emplace(res, b, stream, device, owner);
  return true;
#endif
}

void defer_blocked(held_resource& res, block const& b, cudaStream_t stream, int device,
                   DeviceMemoryResource* owner,
                   std::unique_ptr<rmm::device_buffer> adopted) noexcept
{
#if !defined(Py_GIL_DISABLED)
  if (queue->emplace_blocked(res, b, stream, device, owner, adopted)) { return; }
#endif
  // Nowhere to keep it: the memory is lost rather than freed into a locked resource.
  (void)adopted.release();
  res.reset();
}

void forget_owner(DeviceMemoryResource const* owner) noexcept
{
#if !defined(Py_GIL_DISABLED)
  queue->forget(owner);
  for (entries* batch = in_flight; batch != nullptr; batch = batch->next_in_flight) {
    batch->forget(owner);
  }
#endif
}

PyThreadState* release_gil(entries** taken) noexcept
{
  forget_python_memory_error();
#if !defined(Py_GIL_DISABLED)
  // Inside a resource's Python callback, a queued free could need a lock this thread
  // already holds: the queue waits for a release outside any callback.
  if (queue->count() != 0 && !inside_callback()) {
    // Swap in empty storage under the GIL; other threads queue into it meanwhile.
    entries* fresh = spare_count > 0 ? spares[--spare_count] : new (std::nothrow) entries;
    if (fresh != nullptr) {  // (without memory for a swap the queue waits for the next one)
      entries* batch = std::exchange(queue, fresh);
      add_in_flight(batch);
      *taken = batch;
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
  taken->drop_owners();
  remove_in_flight(taken);
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
  if (queue->count() != 0 && !inside_callback()) { gil_release release; }
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

}  // namespace nbrmm::deferred_frees

namespace nbrmm {

void bind_deferred_frees(nb::module_& m)
{
  m.def(
    "_deferred_frees", []() { return deferred_frees::pending(); },
    nb::sig("def _deferred_frees() -> tuple[int, int]"),
    "The frees waiting for nbrmm's next GIL release: ``(count, bytes)``.");
  m.def(
    "_flush_deferred_frees", []() { deferred_frees::flush(); },
    "Perform the frees waiting for nbrmm's next GIL release now.");
  m.def("_defer_frees", &deferred_frees::enable, nb::arg("enabled"),
        R"doc(Turn the deferral of frees on or off (to measure its effect).

Turning it off performs the waiting frees. It cannot be turned on again after
interpreter exit has begun.

Parameters
----------
enabled : bool
    Whether small frees to caching resources may wait for the next GIL release.

Returns
-------
bool
    Whether deferral was on before the call.)doc");
}

}  // namespace nbrmm
