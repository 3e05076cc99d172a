// The PyTorch allocator hook behind nbrmm.allocators.torch.
//
// `torch.cuda.memory.CUDAPluggableAllocator` loads a shared library by path and calls two
// C functions by name. This extension exports them itself (default visibility):
//
//   void* nbrmm_torch_alloc_<slot>(size_t size, int device, cudaStream_t stream)
//   void  nbrmm_torch_free_<slot>(void* ptr, size_t size, int device, cudaStream_t stream)
//
// Slot 0 allocates from the current resource of `device` (read from librmm's per-device
// map at each call): each of its allocations records its pointer with a C++ copy of the
// resource that served it and the stream it was allocated on, so that its free returns the
// memory to that resource on that stream, whatever is current by then. Every other slot is
// bound, once and for the life of the process, to chosen resources (one per device): its
// free returns the memory to the slot's resource for the device, on the stream, size and
// device that torch recorded with the pointer (torch pairs each free with the allocation
// function that made the pointer), so its calls take no lock and record nothing.
//
// Both functions run on whatever thread torch calls them from, with or without the GIL,
// and never touch Python (torch may hold its own locks while calling them), except while
// the memory history records Python stacks: then an allocation on a thread Python knows
// takes the GIL to read the caller's frames, as torch's own recorder does.
#include "core/args.hpp"
#include "bindings.hpp"
#include "core/device.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "core/history.hpp"
#include "resources/per_device_map.hpp"
#include "resources/resource.hpp"
#include "streams/stream.hpp"

#include <rmm/cuda_device.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nbrmm {

/// Number of torch hook slots (nbrmm_torch_alloc_<slot> / nbrmm_torch_free_<slot>).
inline constexpr int torch_slot_count = 16;

namespace {

/// What one slot allocates from. Its members never change once published (the resources
/// themselves are thread-safe, and are used in place).
struct torch_binding {
  bool current{false};  ///< the current resource of the requested device
  std::vector<std::pair<int, device_resource>> by_device;  ///< device -1: any device

  [[nodiscard]] device_resource* find(int device) noexcept
  {
    for (auto& [d, res] : by_device) {
      if (d == device || d < 0) { return &res; }
    }
    return nullptr;
  }

  [[nodiscard]] bool same_as(torch_binding const& other) const
  {
    if (current != other.current || by_device.size() != other.by_device.size()) { return false; }
    for (std::size_t i = 0; i < by_device.size(); ++i) {
      if (by_device[i].first != other.by_device[i].first ||
          !(by_device[i].second == other.by_device[i].second)) {
        return false;
      }
    }
    return true;
  }
};

struct torch_record {
  device_resource res;  ///< the resource that allocated the memory
  std::size_t bytes;
  cudaStream_t stream;
  int device;
};

/// Process-wide state, never destroyed: torch may call `free` during process teardown.
struct torch_state {
  std::array<std::atomic<torch_binding*>, torch_slot_count> slots{};
  std::mutex bind_lock;
  std::mutex records_lock;
  std::unordered_map<void*, torch_record> records;
};

torch_state& state()
{
  static torch_state* s = [] {
    auto* st = new torch_state{};
    st->slots[0].store(new torch_binding{true, {}}, std::memory_order_release);
    return st;
  }();
  return *s;
}

void torch_free(void* ptr) noexcept
{
  if (ptr == nullptr) { return; }
  torch_state& st = state();
  std::optional<torch_record> rec;
  {
    std::lock_guard<std::mutex> lock{st.records_lock};
    auto node = st.records.extract(ptr);
    if (node.empty()) { return; }  // not ours: nothing to free
    rec.emplace(std::move(node.mapped()));
  }
  try {
    device_scope const with_device{rec->device};
    rec->res.deallocate(cuda::stream_ref{rec->stream}, ptr, rec->bytes, default_alignment);
    rec.reset();
  } catch (...) {
    // A deallocation cannot report failure to torch; the memory is lost.
  }
}

/// The free of a bound slot: `ptr` came from the slot's allocation function, which torch
/// pairs with this one, and `size`, `device` and `stream` are what torch recorded for it.
void torch_free_bound(
  int slot, void* ptr, std::size_t size, int device, cudaStream_t stream) noexcept
{
  if (ptr == nullptr) { return; }
  torch_binding* b = state().slots[slot].load(std::memory_order_acquire);
  device_resource* res = b == nullptr ? nullptr : b->find(device);
  if (res == nullptr) { return; }  // not the slot's: nothing of ours to free
  try {
    device_scope const with_device{device};
    res->deallocate(cuda::stream_ref{stream}, ptr, size, default_alignment);
  } catch (...) {
    // As above: the memory is lost.
  }
}

/// Binds a slot to `binding` (or finds one bound alike) and returns its index.
int bind_slot(torch_binding binding)
{
  torch_state& st = state();
  std::lock_guard<std::mutex> lock{st.bind_lock};
  for (int i = 0; i < torch_slot_count; ++i) {
    torch_binding const* b = st.slots[i].load(std::memory_order_acquire);
    if (b == nullptr) {
      st.slots[i].store(new torch_binding{std::move(binding)}, std::memory_order_release);
      return i;
    }
    if (b->same_as(binding)) { return i; }
  }
  throw nb::value_error(("mr: at most " + std::to_string(torch_slot_count - 1) +
                         " different resource bindings can be given to torch per process")
                          .c_str());
}

int torch_bind(nb::handle mr)
{
  if (mr.is_none()) { return 0; }
  torch_binding binding;
  if (PyDict_Check(mr.ptr())) {
    for (auto [key, value] : nb::borrow<nb::dict>(mr)) {
      if (!PyLong_CheckExact(key.ptr())) {
        throw nb::type_error("mr: the keys of a mapping must be device ids (int)");
      }
      int overflow          = 0;
      long long const id = PyLong_AsLongLongAndOverflow(key.ptr(), &overflow);
      if (overflow != 0 || id < 0 || id > INT_MAX) {
        throw nb::value_error(("mr: device ids must be non-negative ints below 2**31, got " +
                               utf8(nb::repr(key)))
                                .c_str());
      }
      int const device = static_cast<int>(id);
      DeviceMemoryResource& r = resource_arg(value, "mr");
      if (r.device >= 0 && r.device != device) {
        throw nb::value_error(("mr: the resource for device " + std::to_string(device) +
                               " was created on device " + std::to_string(r.device))
                                .c_str());
      }
      binding.by_device.emplace_back(device, r.owned_copy(value));
    }
    if (binding.by_device.empty()) { throw nb::value_error("mr: the mapping is empty"); }
    std::sort(binding.by_device.begin(), binding.by_device.end(),
              [](auto const& a, auto const& b) { return a.first < b.first; });
  } else {
    DeviceMemoryResource& r = resource_arg(mr, "mr");
    binding.by_device.emplace_back(r.device, r.owned_copy(mr));
  }
  return bind_slot(std::move(binding));
}

/// Slot 0's allocations not yet freed. Bound slots keep no count: their resources' own
/// accounting (a statistics adaptor, say) shows what they hold, and a shared counter would
/// cost every allocation a locked read-modify-write on a line all threads contend for.
std::size_t torch_outstanding()
{
  torch_state& st = state();
  std::lock_guard<std::mutex> lock{st.records_lock};
  return st.records.size();
}

}  // namespace

void* allocate_for_torch(int slot, std::size_t size, int device, cudaStream_t stream)
{
  if (size == 0) { return nullptr; }
  check_request(size, default_alignment, "size");
  torch_state& st  = state();
  torch_binding* b = st.slots[slot].load(std::memory_order_acquire);
  if (b == nullptr) {
    throw rmm::logic_error{"nbrmm: torch allocator slot " + std::to_string(slot) +
                           " is not bound to a resource"};
  }
  device_scope const with_device{device};
  if (!b->current) {
    device_resource* bound = b->find(device);
    if (bound == nullptr) {
      throw rmm::logic_error{"nbrmm: this torch allocator has no resource for device " +
                             std::to_string(device)};
    }
    return bound->allocate(cuda::stream_ref{stream}, size, default_alignment);
  }
  device_resource res = device_map::get(device);
  void* ptr = res.allocate(cuda::stream_ref{stream}, size, default_alignment);
  try {
    std::lock_guard<std::mutex> lock{st.records_lock};
    st.records.insert_or_assign(ptr, torch_record{res, size, stream, device});
  } catch (...) {
    res.deallocate(cuda::stream_ref{stream}, ptr, size, default_alignment);
    throw;
  }
  return ptr;
}

/// nbrmm_torch_alloc_<slot>: allocates for torch and records it in the memory history.
void* torch_hook_alloc(int slot, std::size_t size, int device, cudaStream_t stream)
{
  void* ptr = nullptr;
  try {
    history::nested_call const nested;
    ptr = allocate_for_torch(slot, size, device, stream);
  } catch (rmm::out_of_memory const& e) {
    // torch reports the error's text as a RuntimeError: nbrmm's words, not librmm's
    // source locations.
    history::failed(size, device, stream, history::source::torch);
    throw std::runtime_error{"out of memory: nbrmm could not allocate " + std::to_string(size) +
                             " bytes on device " + std::to_string(device) +
                             " for torch: " + clean_message(e.what())};
  } catch (...) {
    history::failed(size, device, stream, history::source::torch);
    throw;
  }
  if (ptr != nullptr) { history::allocated(ptr, size, device, stream, history::source::torch); }
  return ptr;
}

/// nbrmm_torch_free_<slot>.
void torch_hook_free(
  int slot, void* ptr, std::size_t size, int device, cudaStream_t stream) noexcept
{
  if (ptr != nullptr) { history::freed(ptr, size, device, stream); }
  history::nested_call const nested;
  if (slot == 0) {
    torch_free(ptr);
  } else {
    torch_free_bound(slot, ptr, size, device, stream);
  }
}

}  // namespace nbrmm

// ------------------------------------------------------------------------------------
// The C functions torch looks up by name
// ------------------------------------------------------------------------------------

#define NBRMM_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

#define NBRMM_TORCH_SLOT(i)                                                                   \
  NBRMM_TORCH_EXPORT void* nbrmm_torch_alloc_##i(std::size_t size, int device,               \
                                                 cudaStream_t stream)                         \
  {                                                                                           \
    return nbrmm::torch_hook_alloc(i, size, device, stream);                                  \
  }                                                                                           \
  NBRMM_TORCH_EXPORT void nbrmm_torch_free_##i(void* ptr, std::size_t size, int device,      \
                                               cudaStream_t stream) noexcept                  \
  {                                                                                           \
    nbrmm::torch_hook_free(i, ptr, size, device, stream);                                     \
  }

NBRMM_TORCH_SLOT(0)
NBRMM_TORCH_SLOT(1)
NBRMM_TORCH_SLOT(2)
NBRMM_TORCH_SLOT(3)
NBRMM_TORCH_SLOT(4)
NBRMM_TORCH_SLOT(5)
NBRMM_TORCH_SLOT(6)
NBRMM_TORCH_SLOT(7)
NBRMM_TORCH_SLOT(8)
NBRMM_TORCH_SLOT(9)
NBRMM_TORCH_SLOT(10)
NBRMM_TORCH_SLOT(11)
NBRMM_TORCH_SLOT(12)
NBRMM_TORCH_SLOT(13)
NBRMM_TORCH_SLOT(14)
NBRMM_TORCH_SLOT(15)

namespace nbrmm {

void bind_torch_allocator(nb::module_& m)
{
  static_assert(torch_slot_count == 16,
                "export one nbrmm_torch_alloc_<i> and nbrmm_torch_free_<i> per slot");
  m.def("_torch_bind", &torch_bind, nb::arg("mr").none(),
        nb::sig("def _torch_bind(mr: DeviceMemoryResource | dict[int, DeviceMemoryResource] | "
                "None) -> int"),
        R"doc(The slot whose ``nbrmm_torch_alloc_<slot>`` function allocates from ``mr`` (and
whose ``nbrmm_torch_free_<slot>`` frees what it allocated).

Parameters
----------
mr : DeviceMemoryResource, dict[int, DeviceMemoryResource] or None
    None: the current resource of the device torch asks for (slot 0). A resource: that
    resource, for the device it was created on. A dict: one resource per device.

Returns
-------
int
    The slot. Equal bindings share a slot; a slot stays bound (and keeps its resources
    alive) until the process exits.

Raises
------
TypeError
    If ``mr`` is not a resource or a dict of them.
ValueError
    If a resource was created on another device than its key, or every slot is taken.)doc");
  m.def("_torch_outstanding", &torch_outstanding,
        "The number of allocations made through slot 0 of the torch hook (the current\n"
        "resource) and not yet freed.");
  m.attr("_torch_slot_count") = torch_slot_count;
}

}  // namespace nbrmm
