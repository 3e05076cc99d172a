// Helpers shared by the framework allocator hooks (cupy_allocator.cpp, torch_allocator.cpp).
#pragma once

#include "args.hpp"
#include "bindings.hpp"
#include "deferred_frees.hpp"
#include "device.hpp"
#include "errors.hpp"
#include "gil.hpp"
#include "per_device_map.hpp"
#include "resource.hpp"
#include "stream.hpp"

#include <mutex>

namespace nbrmm::hooks {

/// An owning copy of the resource of `device` in librmm's per-device map, read now.
/// Never touches Python, so it can run on any thread with or without the GIL.
inline device_resource current_resource(int device) { return device_map::get(device); }

}  // namespace nbrmm::hooks

namespace nbrmm {

/// Number of torch hook slots (nbrmm_torch_alloc_<slot> / nbrmm_torch_free_<slot>).
inline constexpr int torch_slot_count = 16;

/// What `nbrmm_torch_alloc_<slot>` does (torch_allocator.cpp): allocates `size` bytes on
/// `device`, ordered on `stream`, from what the slot allocates from. Throws if the slot is
/// not bound.
void* torch_hook_alloc(int slot, std::size_t size, int device, cudaStream_t stream);

/// What `nbrmm_torch_free_<slot>` does: frees `ptr`, which the slot's allocation function
/// returned for `size`, `device` and `stream`.
void torch_hook_free(
  int slot, void* ptr, std::size_t size, int device, cudaStream_t stream) noexcept;

}  // namespace nbrmm
