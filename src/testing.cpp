// nbrmm._nbrmm._testing: measurement helpers for the benchmark suite and the tests.
//
// The functions here run librmm in tight C++ loops with the GIL released, so that one
// process can measure both a Python call and librmm's own cost of the same work (the
// "floor" under any binding), side by side.
#include "hooks.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace nbrmm {
namespace {

using clock_type = std::chrono::steady_clock;

double ns_per_iteration(clock_type::time_point start, clock_type::time_point stop, long iterations)
{
  return std::chrono::duration<double, std::nano>(stop - start).count() /
         static_cast<double>(iterations);
}

long iterations_arg(long iterations)
{
  if (iterations < 1) {
    throw nb::value_error(
      ("iterations: must be at least 1, got " + std::to_string(iterations)).c_str());
  }
  return iterations;
}

double allocate_round_trip_ns(nb::handle mr,
                              nb::handle nbytes,
                              long iterations,
                              nb::handle stream,
                              std::size_t alignment)
{
  std::size_t const n      = parse_size(nbytes, "nbytes");
  long const count         = iterations_arg(iterations);
  cuda::stream_ref const s = stream_arg(stream, "stream");
  // A copy shares the resource's state and keeps it alive while the GIL is released.
  device_resource res = resource_arg(mr, "mr").get();
  nb::gil_scoped_release release;
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    void* p = res.allocate(s, n, alignment);
    res.deallocate(s, p, n, alignment);
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

double device_buffer_round_trip_ns(nb::handle mr, nb::handle nbytes, long iterations, nb::handle stream)
{
  std::size_t const n      = parse_size(nbytes, "nbytes");
  long const count         = iterations_arg(iterations);
  cuda::stream_ref const s = stream_arg(stream, "stream");
  device_resource res      = resource_arg(mr, "mr").get();
  nb::gil_scoped_release release;
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    rmm::device_buffer b{n, default_alignment, s, res};
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

double memcpy_ns(std::uintptr_t dst, std::uintptr_t src, nb::handle nbytes, long iterations, nb::handle stream)
{
  std::size_t const n      = parse_size(nbytes, "nbytes");
  long const count         = iterations_arg(iterations);
  cuda::stream_ref const s = stream_arg(stream, "stream");
  if (n != 0 && (dst == 0 || src == 0)) {
    throw nb::value_error(dst == 0 ? "dst: null pointer" : "src: null pointer");
  }
  nb::gil_scoped_release release;
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    auto status = cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src),
                                  n, cudaMemcpyDefault, s.get());
    if (status != cudaSuccess) { throw_cuda_error(status, "cudaMemcpyAsync"); }
    status = cudaStreamSynchronize(s.get());
    if (status != cudaSuccess) { throw_cuda_error(status, "cudaStreamSynchronize"); }
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

/// A C++ resource over the host heap (aligned malloc/free): lets the binding's own
/// overhead be measured, and C++-resource paths be tested, on machines without a GPU.
class host_heap_resource {
 public:
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    if (bytes == 0) { return nullptr; }
    std::size_t const rounded = (bytes + alignment - 1) / alignment * alignment;
    void* p                   = std::aligned_alloc(alignment, rounded);
    if (p == nullptr) { throw rmm::out_of_memory{"host heap: out of memory"}; }
    return p;
  }
  void deallocate_sync(void* ptr, std::size_t, std::size_t) noexcept { std::free(ptr); }
  void* allocate(cuda::stream_ref, std::size_t bytes, std::size_t alignment)
  {
    return allocate_sync(bytes, alignment);
  }
  void deallocate(cuda::stream_ref, void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    deallocate_sync(ptr, bytes, alignment);
  }
  bool operator==(host_heap_resource const&) const noexcept { return true; }
  bool operator!=(host_heap_resource const&) const noexcept { return false; }
  friend void get_property(host_heap_resource const&, cuda::mr::device_accessible) noexcept {}
  friend void get_property(host_heap_resource const&, cuda::mr::host_accessible) noexcept {}
};

/// A caching C++ host resource, like librmm's pool in miniature: freed blocks go to its
/// own free lists (so it is registered as a caching resource, whose frees may wait; see
/// deferred_frees), and it fails with out_of_memory past `limit` bytes in use. Copies
/// share the state.
class host_cache_resource {
 public:
  explicit host_cache_resource(std::size_t limit) : state_{std::make_shared<state>(limit)} {}

  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    if (bytes == 0) { return nullptr; }
    std::size_t const rounded = round(bytes, alignment);
    std::lock_guard lock{state_->mutex};
    if (rounded > state_->limit - state_->live) {
      throw rmm::out_of_memory{"host cache: " + std::to_string(bytes) + " bytes exceed the limit"};
    }
    void* p = nullptr;
    if (auto it = state_->free.find(rounded); it != state_->free.end()) {
      p = it->second;
      state_->free.erase(it);
    } else {
      p = std::aligned_alloc(default_alignment, rounded);
      if (p == nullptr) { throw rmm::out_of_memory{"host cache: out of memory"}; }
    }
    state_->live += rounded;
    return p;
  }
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    if (ptr == nullptr) { return; }
    std::size_t const rounded = round(bytes, alignment);
    std::lock_guard lock{state_->mutex};
    state_->live -= rounded;
    state_->free.emplace(rounded, ptr);
  }
  void* allocate(cuda::stream_ref, std::size_t bytes, std::size_t alignment)
  {
    return allocate_sync(bytes, alignment);
  }
  void deallocate(cuda::stream_ref, void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    deallocate_sync(ptr, bytes, alignment);
  }
  /// Bytes handed out and not yet freed.
  [[nodiscard]] std::size_t live() const
  {
    std::lock_guard lock{state_->mutex};
    return state_->live;
  }
  bool operator==(host_cache_resource const& o) const noexcept { return state_ == o.state_; }
  bool operator!=(host_cache_resource const& o) const noexcept { return !(*this == o); }
  friend void get_property(host_cache_resource const&, cuda::mr::device_accessible) noexcept {}
  friend void get_property(host_cache_resource const&, cuda::mr::host_accessible) noexcept {}

 private:
  static std::size_t round(std::size_t bytes, std::size_t alignment)
  {
    alignment = std::max(alignment, default_alignment);
    return (bytes + alignment - 1) / alignment * alignment;
  }
  struct state {
    explicit state(std::size_t l) : limit{l} {}
    state(state const&)            = delete;
    state& operator=(state const&) = delete;
    ~state()
    {
      for (auto& [size, p] : free) { std::free(p); }
    }
    std::mutex mutex;
    std::size_t limit;
    std::size_t live{0};
    std::unordered_multimap<std::size_t, void*> free;
  };
  std::shared_ptr<state> state_;
};

}  // namespace

/// ns per GIL release + re-acquire pair, measured in a C++ loop (called with the GIL held).
double gil_round_trip_ns(long iterations)
{
  long const count = iterations_arg(iterations);
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    nb::gil_scoped_release release;
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

/// ns per allocation + free through the torch hook's functions of `slot` (what torch
/// calls through nbrmm_torch_alloc_<slot> and nbrmm_torch_free_<slot>), in a C++ loop.
double torch_hook_round_trip_ns(int slot, nb::handle nbytes, long iterations)
{
  std::size_t const n = parse_size(nbytes, "nbytes");
  long const count    = iterations_arg(iterations);
  if (slot < 0 || slot >= torch_slot_count) {
    throw nb::value_error(("slot: must be in [0, " + std::to_string(torch_slot_count) +
                           "), got " + std::to_string(slot))
                            .c_str());
  }
  int const device = current_device();
  nb::gil_scoped_release release;
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    void* p = torch_hook_alloc(slot, n, device, nullptr);
    torch_hook_free(slot, p, n, device, nullptr);
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

/// ns per librmm current-device query (cudaGetDevice), measured in a C++ loop.
double current_device_ns(long iterations)
{
  long const count = iterations_arg(iterations);
  nb::gil_scoped_release release;
  auto const start = clock_type::now();
  int sink         = 0;
  for (long i = 0; i < count; ++i) { sink += rmm::get_current_cuda_device().value(); }
  auto const stop          = clock_type::now();
  static volatile int keep = 0;
  keep                     = sink;
  return ns_per_iteration(start, stop, count);
}

void bind_testing(nb::module_& m)
{
  nb::module_ t = m.def_submodule(
    "_testing", "Measurement helpers: librmm's own cost of work measured in C++ loops.");

  t.def(
    "set_current_as_cpp",
    [](nb::handle mr) {
      // A plain copy breaks nbrmm's rule that copies of Python-made resources carry their
      // objects: only for tests of wrappers, whose objects stay alive meanwhile.
      device_resource plain = unwrap(resource_arg(mr, "mr").get());
      device_resource old =
        rmm::mr::set_per_device_resource(rmm::cuda_device_id{current_device()}, std::move(plain));
      gil_release release;
      old = device_resource{};
    },
    nb::arg("mr"),
    R"doc(Write ``mr``'s C++ resource into librmm's map without its Python object, as C++
code that made the resource would (for tests of the wrappers of C++-made resources).)doc");
  t.def(
    "host_heap_resource",
    []() {
      return make_resource_object<DeviceMemoryResource>(device_resource{host_heap_resource{}},
                                                        current_device(), nb::none(), true);
    },
    R"doc(A C++ resource over the host heap (aligned ``malloc``/``free``), created by C++.

Returns
-------
DeviceMemoryResource
    A generic wrapper of the C++ resource; its memory is host-accessible.)doc");
  deferred_frees::register_cache<host_cache_resource>();
  t.def(
    "host_cache_resource",
    [](nb::handle limit) {
      std::size_t const cap =
        limit.is_none() ? std::numeric_limits<std::size_t>::max() : parse_size(limit, "limit");
      return make_resource_object<DeviceMemoryResource>(device_resource{host_cache_resource{cap}},
                                                        current_device(), nb::none(), true);
    },
    nb::arg("limit") = nb::none(),
    R"doc(A caching C++ resource over the host heap, created by C++.

Freed blocks go to the resource's own free lists, as in librmm's pool, so its frees may
wait in nbrmm's deferred-free queue. Lets that queue be tested without a GPU.

Parameters
----------
limit : int or str, optional
    Most bytes in use at once; beyond it allocations raise ``nbrmm.OutOfMemory``.
    Unlimited by default.

Returns
-------
DeviceMemoryResource
    A generic wrapper of the C++ resource; its memory is host-accessible.)doc");
  t.def(
    "live_bytes",
    [](nb::handle mr) {
      auto const* res =
        cuda::mr::resource_cast<host_cache_resource>(&resource_arg(mr, "mr").get());
      if (res == nullptr) { throw nb::type_error("mr: not a host_cache_resource()"); }
      return res->live();
    },
    nb::arg("mr"), "Bytes a :func:`host_cache_resource` has handed out and not had back.");
  t.def(
    "deferred_frees",
    []() { return deferred_frees::pending(); },
    "The frees waiting for nbrmm's next GIL release: ``(count, bytes)``.");
  t.def(
    "flush_deferred_frees", []() { deferred_frees::flush(); },
    "Perform the frees waiting for nbrmm's next GIL release now.");
  t.def("defer_frees", &deferred_frees::enable, nb::arg("enabled"),
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
  t.def("gil_round_trip_ns", &gil_round_trip_ns, nb::arg("iterations"),
        "ns per GIL release + re-acquire pair (the cost every allocating call pays twice).");
  t.def("current_device_ns", &current_device_ns, nb::arg("iterations"),
        "ns per current-device query (cudaGetDevice through librmm).");
  t.def("torch_hook_round_trip_ns", &torch_hook_round_trip_ns, nb::arg("slot"),
        nb::arg("nbytes"), nb::arg("iterations"),
        R"doc(Time ``iterations`` allocation + free round trips through the torch hook.

The loop calls what torch calls through ``nbrmm_torch_alloc_<slot>`` and
``nbrmm_torch_free_<slot>``, on the current device and the legacy default stream, with
the GIL released: the hook's own cost beside :func:`allocate_round_trip_ns` on the
slot's resource.

Parameters
----------
slot : int
    A slot from ``nbrmm._nbrmm._torch_bind``.
nbytes : int or str
    Bytes per allocation.
iterations : int
    Number of round trips (at least 1).

Returns
-------
float
    Nanoseconds per round trip.

Raises
------
ValueError
    If ``slot`` is out of range or ``iterations`` is less than 1.
nbrmm.LogicError
    If the slot is not bound to a resource.)doc");
  t.def("allocate_round_trip_ns", &allocate_round_trip_ns, nb::arg("mr"), nb::arg("nbytes"),
        nb::arg("iterations"), nb::arg("stream") = default_stream(),
        nb::arg("alignment") = default_alignment,
        R"doc(Time ``iterations`` allocate+deallocate round trips on ``mr`` in C++.

The loop calls the resource's C++ ``allocate`` and ``deallocate`` directly (through the
same type-erased handle that nbrmm's own calls use), with the GIL released: the floor
under any Python binding of the same resource.

Parameters
----------
mr : DeviceMemoryResource
    The resource.
nbytes : int or str
    Bytes per allocation.
iterations : int
    Number of round trips (at least 1).
stream : Stream, optional
    The stream the allocations are ordered on.
alignment : int, optional
    The alignment asked for, 256 by default.

Returns
-------
float
    Nanoseconds per round trip.)doc");

  t.def("device_buffer_round_trip_ns", &device_buffer_round_trip_ns, nb::arg("mr"),
        nb::arg("nbytes"), nb::arg("iterations"), nb::arg("stream") = default_stream(),
        R"doc(Time ``iterations`` creations and destructions of an ``rmm::device_buffer``.

The C++ counterpart of ``Buffer(nbytes, mr=mr, stream=stream)`` followed by its
destruction, with the GIL released. A buffer of 0 bytes allocates nothing.

Parameters
----------
mr : DeviceMemoryResource
    The resource.
nbytes : int or str
    Bytes per buffer.
iterations : int
    Number of buffers (at least 1).
stream : Stream, optional
    The stream of the buffers.

Returns
-------
float
    Nanoseconds per buffer.)doc");

  t.def("memcpy_ns", &memcpy_ns, nb::arg("dst"), nb::arg("src"), nb::arg("nbytes"),
        nb::arg("iterations"), nb::arg("stream") = default_stream(),
        R"doc(Time ``iterations`` copies of ``nbytes`` bytes from ``src`` to ``dst``.

Each copy is ``cudaMemcpyAsync`` (``cudaMemcpyDefault``) followed by
``cudaStreamSynchronize`` on ``stream``, with the GIL released: the raw copy cost that a
Python copy of the same memory can be compared with.

Parameters
----------
dst, src : int
    Host or device pointers.
nbytes : int or str
    Bytes per copy.
iterations : int
    Number of copies (at least 1).
stream : Stream, optional
    The stream of the copies.

Returns
-------
float
    Nanoseconds per copy.

Raises
------
CudaError
    If a copy fails.)doc");
}

}  // namespace nbrmm
