// Frees that must wait (see docs/design.md, "Re-entrancy").
//
// Memory goes back to its resource when its owner is closed or dies, on that thread. One
// exception: while this thread runs a Python callback of a resource (a Python upstream of a
// pool, a failure callback), that resource and whatever called it may hold locks, so a free
// into one of them (a Buffer the callback drops) would deadlock. Such a free waits here,
// holding its resource and the resource object alive, until the next allocation or free
// nbrmm makes outside any callback (on any thread), or interpreter exit. A forked child
// drops the list without freeing: the memory is the parent's.
#pragma once

#include "resources/resource.hpp"

#include <atomic>
#include <memory>

namespace nbrmm::waiting_frees {

/// Keeps the free of `b` to `res` on `stream` (`device` current) for later, moving `res`;
/// or, when `adopted` is given, the destruction of that rmm::device_buffer (which frees
/// itself). `owner` (the resource object the memory goes back to) is kept alive until the
/// free is done, so the garbage collector sees it referenced. Call with the GIL.
void add(held_resource& res, block const& b, cudaStream_t stream, int device,
         nb::handle owner, std::unique_ptr<rmm::device_buffer> adopted = nullptr) noexcept;

namespace detail {
extern std::atomic<int> count;
void perform_slow() noexcept;
}  // namespace detail

/// Performs the waiting frees, unless this thread runs a Python callback of a resource.
/// Call with the GIL held (it is released while the memory is freed).
inline void perform() noexcept
{
  if (detail::count.load(std::memory_order_relaxed) != 0) { detail::perform_slow(); }
}

/// Drops the waiting frees without freeing anything (in a forked child).
void forget() noexcept;

}  // namespace nbrmm::waiting_frees
