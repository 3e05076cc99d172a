// nbrmm_testing: C++ helpers for nbrmm's tests and benchmarks, built by the tests (see
// tests/extensions.py) and never installed. Like any third-party extension it uses
// librmm directly and reaches nbrmm only through the public header <nbrmm/nbrmm.hpp>.
//
//  * Timing loops: librmm's own cost of the work a Python call does (the "floor" under
//    any binding), measured in C++ with the GIL released, beside the Python call.
//  * Host-memory C++ resources (a heap, a caching heap): C++-made resources that work on
//    machines without a GPU.
//  * set_current_cpp: a librmm resource or adaptor made in C++ over an nbrmm resource,
//    written into librmm's per-device map as C++ code would.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <nbrmm/nbrmm.hpp>

#include <rmm/cuda_device.hpp>
#include <rmm/device_buffer.hpp>
#include <rmm/error.hpp>
#include <rmm/mr/aligned_resource_adaptor.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/failure_callback_resource_adaptor.hpp>
#include <rmm/mr/fixed_size_memory_resource.hpp>
#include <rmm/mr/limiting_resource_adaptor.hpp>
#include <rmm/mr/logging_resource_adaptor.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/mr/prefetch_resource_adaptor.hpp>
#include <rmm/mr/statistics_resource_adaptor.hpp>
#include <rmm/mr/thread_safe_resource_adaptor.hpp>
#include <rmm/mr/tracking_resource_adaptor.hpp>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

namespace nb = nanobind;

namespace {

using device_resource = nbrmm::device_resource;
using clock_type      = std::chrono::steady_clock;
constexpr std::size_t default_alignment = rmm::CUDA_ALLOCATION_ALIGNMENT;

// ------------------------------------------------------------------------------------
// Arguments
// ------------------------------------------------------------------------------------

long iterations_arg(long iterations)
{
  if (iterations < 1) {
    throw nb::value_error(
      ("iterations: must be at least 1, got " + std::to_string(iterations)).c_str());
  }
  return iterations;
}

std::size_t size_arg(nb::handle value, char const* name)
{
  if (!PyLong_Check(value.ptr())) {
    throw nb::type_error((std::string{name} + ": expected an int").c_str());
  }
  std::size_t const n = PyLong_AsSize_t(value.ptr());
  if (n == static_cast<std::size_t>(-1) && PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    throw nb::value_error((std::string{name} + ": must be a non-negative int that fits size_t")
                            .c_str());
  }
  return n;
}

/// None (the legacy default stream) or an object with `__cuda_stream__`.
cuda::stream_ref stream_arg(nb::handle stream)
{
  if (stream.is_none()) { return cuda::stream_ref{cudaStream_t{nullptr}}; }
  if (!nb::hasattr(stream, "__cuda_stream__")) {
    throw nb::type_error("stream: expected None or an object with __cuda_stream__");
  }
  nb::tuple t = nb::cast<nb::tuple>(stream.attr("__cuda_stream__")());
  return cuda::stream_ref{reinterpret_cast<cudaStream_t>(nb::cast<std::uintptr_t>(t[1]))};
}

device_resource resource_arg(nb::handle mr)
{
  if (mr.is_none() || !nb::hasattr(mr, "__nbrmm_resource__")) {
    throw nb::type_error("mr: expected an nbrmm memory resource");
  }
  return nbrmm::resource_from_python(mr.ptr());
}

nb::object to_python(device_resource res, bool host_accessible)
{
  PyObject* obj = nbrmm::resource_to_python(std::move(res), host_accessible);
  if (obj == nullptr) { throw nb::python_error(); }
  return nb::steal(obj);
}

double ns_per_iteration(clock_type::time_point start, clock_type::time_point stop, long count)
{
  return std::chrono::duration<double, std::nano>(stop - start).count() /
         static_cast<double>(count);
}

// ------------------------------------------------------------------------------------
// Timing loops
// ------------------------------------------------------------------------------------

double allocate_round_trip_ns(
  nb::handle mr, nb::handle nbytes, long iterations, nb::handle stream, std::size_t alignment)
{
  std::size_t const n      = size_arg(nbytes, "nbytes");
  long const count         = iterations_arg(iterations);
  cuda::stream_ref const s = stream_arg(stream);
  device_resource res      = resource_arg(mr);  // shares the state; lives while looping
  nb::gil_scoped_release release;
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    void* p = res.allocate(s, n, alignment);
    res.deallocate(s, p, n, alignment);
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

double device_buffer_round_trip_ns(nb::handle mr, nb::handle nbytes, long iterations,
                                   nb::handle stream)
{
  std::size_t const n      = size_arg(nbytes, "nbytes");
  long const count         = iterations_arg(iterations);
  cuda::stream_ref const s = stream_arg(stream);
  device_resource res      = resource_arg(mr);
  nb::gil_scoped_release release;
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    rmm::device_buffer b{n, s, res};
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

void check_cuda(cudaError_t status, char const* what)
{
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string{what} + " failed: " + cudaGetErrorName(status));
  }
}

double memcpy_ns(std::uintptr_t dst, std::uintptr_t src, nb::handle nbytes, long iterations,
                 nb::handle stream)
{
  std::size_t const n      = size_arg(nbytes, "nbytes");
  long const count         = iterations_arg(iterations);
  cuda::stream_ref const s = stream_arg(stream);
  if (n != 0 && (dst == 0 || src == 0)) {
    throw nb::value_error(dst == 0 ? "dst: null pointer" : "src: null pointer");
  }
  nb::gil_scoped_release release;
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    check_cuda(cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src),
                               n, cudaMemcpyDefault, s.get()),
               "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(s.get()), "cudaStreamSynchronize");
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

double gil_round_trip_ns(long iterations)
{
  long const count = iterations_arg(iterations);
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    nb::gil_scoped_release release;
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

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

// What torch calls: nbrmm's exported C functions nbrmm_torch_{alloc,free}_<slot>.
using torch_alloc_fn = void* (*)(std::size_t, int, cudaStream_t);
using torch_free_fn  = void (*)(void*, std::size_t, int, cudaStream_t);

template <class Fn>
Fn torch_symbol(char const* kind, int slot)
{
  std::string const path =
    nb::cast<std::string>(nb::module_::import_("nbrmm._nbrmm").attr("__file__"));
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) { throw std::runtime_error("nbrmm's extension is not loaded"); }
  std::string const name = std::string{"nbrmm_torch_"} + kind + "_" + std::to_string(slot);
  void* sym              = dlsym(lib, name.c_str());
  dlclose(lib);  // RTLD_NOLOAD took a reference; the module stays loaded
  if (sym == nullptr) {
    throw nb::value_error(("slot: nbrmm exports no " + name).c_str());
  }
  return reinterpret_cast<Fn>(sym);
}

double torch_hook_round_trip_ns(int slot, nb::handle nbytes, long iterations)
{
  std::size_t const n = size_arg(nbytes, "nbytes");
  long const count    = iterations_arg(iterations);
  if (slot < 0) { throw nb::value_error("slot: must be non-negative"); }
  auto* alloc     = torch_symbol<torch_alloc_fn>("alloc", slot);
  auto* release_f = torch_symbol<torch_free_fn>("free", slot);
  int const device = rmm::get_current_cuda_device().value();
  nb::gil_scoped_release release;
  auto const start = clock_type::now();
  for (long i = 0; i < count; ++i) {
    void* p = alloc(n, device, nullptr);
    release_f(p, n, device, nullptr);
  }
  return ns_per_iteration(start, clock_type::now(), count);
}

// ------------------------------------------------------------------------------------
// Host-memory C++ resources
// ------------------------------------------------------------------------------------

/// The host heap (aligned malloc/free).
class host_heap_resource {
 public:
  void* allocate_sync(std::size_t bytes, std::size_t alignment)
  {
    if (bytes == 0) { return nullptr; }
    alignment = std::max(alignment, sizeof(void*));
    void* p   = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
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
  friend void get_property(host_heap_resource const&, cuda::mr::device_accessible) noexcept {}
  friend void get_property(host_heap_resource const&, cuda::mr::host_accessible) noexcept {}
};

/// A caching host resource, like librmm's pool in miniature: freed blocks go to its own
/// free lists, and it fails with out_of_memory past `limit` bytes in use. Copies share
/// state.
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
      p = std::aligned_alloc(std::max(alignment, default_alignment), rounded);
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
  [[nodiscard]] std::size_t live() const
  {
    std::lock_guard lock{state_->mutex};
    return state_->live;
  }
  bool operator==(host_cache_resource const& o) const noexcept { return state_ == o.state_; }
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
    mutable std::mutex mutex;
    std::size_t limit;
    std::size_t live{0};
    std::unordered_multimap<std::size_t, void*> free;
  };
  std::shared_ptr<state> state_;
};

// ------------------------------------------------------------------------------------
// librmm resources made in C++
// ------------------------------------------------------------------------------------

bool refuse_retry(std::size_t, void*) { return false; }


/// librmm's resource or adaptor `kind` over `upstream`, made as C++ code would make it.
device_resource make_cpp(std::string const& kind, device_resource up,
                         std::optional<std::string> const& log_file)
{
  if (kind == "statistics") { return rmm::mr::statistics_resource_adaptor{std::move(up)}; }
  if (kind == "tracking") { return rmm::mr::tracking_resource_adaptor{std::move(up)}; }
  if (kind == "limiting") { return rmm::mr::limiting_resource_adaptor{std::move(up), 1 << 20}; }
  if (kind == "logging") {
    return rmm::mr::logging_resource_adaptor{std::move(up), log_file.value_or("rmm_log.csv")};
  }
  if (kind == "failure_callback") {
    return rmm::mr::failure_callback_resource_adaptor<>{std::move(up), refuse_retry, nullptr};
  }
  if (kind == "prefetch") { return rmm::mr::prefetch_resource_adaptor{std::move(up)}; }
  if (kind == "aligned") { return rmm::mr::aligned_resource_adaptor{std::move(up), 4096}; }
  if (kind == "thread_safe") { return rmm::mr::thread_safe_resource_adaptor{std::move(up)}; }
  if (kind == "pool") { return rmm::mr::pool_memory_resource{std::move(up), 1 << 16}; }
  if (kind == "fixed_size") {
    return rmm::mr::fixed_size_memory_resource{std::move(up), 1024, 8};
  }
  if (kind == "binning") { return rmm::mr::binning_memory_resource{std::move(up), 8, 9}; }
  throw nb::value_error(("kind: unknown kind " + kind).c_str());
}

}  // namespace

NB_MODULE(nbrmm_testing, m)
{
  m.def("allocate_round_trip_ns", &allocate_round_trip_ns, nb::arg("mr").none(),
        nb::arg("nbytes"), nb::arg("iterations"), nb::arg("stream").none() = nb::none(),
        nb::arg("alignment") = default_alignment,
        "ns per allocate + deallocate on ``mr``'s C++ resource, in a C++ loop (GIL released).");
  m.def("device_buffer_round_trip_ns", &device_buffer_round_trip_ns, nb::arg("mr").none(),
        nb::arg("nbytes"), nb::arg("iterations"), nb::arg("stream").none() = nb::none(),
        "ns per rmm::device_buffer made and destroyed on ``mr``, in a C++ loop.");
  m.def("memcpy_ns", &memcpy_ns, nb::arg("dst"), nb::arg("src"), nb::arg("nbytes"),
        nb::arg("iterations"), nb::arg("stream").none() = nb::none(),
        "ns per cudaMemcpyAsync + cudaStreamSynchronize of ``nbytes``, in a C++ loop.");
  m.def("gil_round_trip_ns", &gil_round_trip_ns, nb::arg("iterations"),
        "ns per GIL release + re-acquire pair.");
  m.def("current_device_ns", &current_device_ns, nb::arg("iterations"),
        "ns per current-device query through librmm.");
  m.def("torch_hook_round_trip_ns", &torch_hook_round_trip_ns, nb::arg("slot"),
        nb::arg("nbytes"), nb::arg("iterations"),
        "ns per allocation + free through nbrmm_torch_{alloc,free}_<slot>, as torch calls them.");

  m.def(
    "host_heap_resource",
    []() { return to_python(device_resource{host_heap_resource{}}, true); },
    "A C++ resource over the host heap, as an nbrmm resource object (host-accessible).");
  m.def(
    "host_cache_resource",
    [](nb::handle limit) {
      std::size_t const cap =
        limit.is_none() ? std::numeric_limits<std::size_t>::max() : size_arg(limit, "limit");
      return to_python(device_resource{host_cache_resource{cap}}, true);
    },
    nb::arg("limit").none() = nb::none(),
    "A caching C++ host resource, at most ``limit`` bytes in use.");
  m.def(
    "live_bytes",
    [](nb::handle mr) {
      device_resource res = resource_arg(mr);
      auto const* cache   = cuda::mr::resource_cast<host_cache_resource>(&res);
      if (cache == nullptr) { throw nb::type_error("mr: not a host_cache_resource()"); }
      return cache->live();
    },
    nb::arg("mr").none(), "Bytes a host_cache_resource() has handed out and not had back.");

  m.def(
    "make_cpp",
    [](std::string const& kind, nb::handle upstream_mr, std::optional<std::string> log_file) {
      device_resource made = make_cpp(kind, resource_arg(upstream_mr), log_file);
      return to_python(std::move(made), false);
    },
    nb::arg("kind"), nb::arg("upstream_mr").none(), nb::arg("log_file") = nb::none(),
    "librmm's resource ``kind`` made in C++ over ``upstream_mr``, handed to Python.");
  m.def(
    "set_current_cpp",
    [](std::string const& kind, nb::handle upstream_mr, std::optional<std::string> log_file) {
      device_resource made = make_cpp(kind, resource_arg(upstream_mr), log_file);
      device_resource old  = rmm::mr::set_current_device_resource(std::move(made));
      nb::gil_scoped_release release;
      old = device_resource{};
    },
    nb::arg("kind"), nb::arg("upstream_mr").none(), nb::arg("log_file") = nb::none(),
    "Make librmm's resource ``kind`` over ``upstream_mr`` in C++ and write it into "
    "librmm's per-device map, as C++ code would.");
}
