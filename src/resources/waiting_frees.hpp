// Frees that wait for nbrmm's next GIL release (see docs/design.md, "Deferred frees").
//
// Freeing memory releases the GIL, because a deallocate may block or enter CUDA. When a
// Buffer (or memory lent to CuPy) dies with the GIL held, a small block on the legacy
// default stream that goes back to a caching sub-allocator (pool, arena, fixed-size: their
// deallocate only returns the block to their own free lists, so no adaptor or upstream
// sees when it happens) is queued instead. Every window in which nbrmm releases the GIL
// frees the queue first: any allocation, any other free, any change of a per-device
// resource. The death of any resource object and interpreter exit free it too. At most
// `capacity` blocks and `byte_budget` bytes wait; with the GIL disabled nothing is deferred.
//
// A free that would call back into a resource whose Python callback this thread is running
// (see resource.hpp) must wait whatever its size or stream: it joins the queue beyond its
// limits. Nothing in the queue is freed while the releasing thread runs such a callback.
#pragma once

#include "resource.hpp"

#include <memory>
#include <utility>

namespace nbrmm::deferred_frees {

inline constexpr int capacity            = 16;
inline constexpr std::size_t byte_budget = std::size_t{1} << 20;

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

/// Whether frees to `res` may wait: it is (or, as a python_owned_resource, wraps) a
/// registered caching resource.
bool caches(device_resource const& res) noexcept;

/// Queues the free of `b` to `res` on `stream`, moving `res` into the queue, when `stream`
/// is the legacy default stream, the queue has room and deferral is on. `owner` is the
/// resource object whose C++ copy `res` shares (or null): it counts the frees queued for
/// it (DeviceMemoryResource::queued_frees) until they are done. The caller holds the GIL
/// and has checked caches(res.get()). Returns false (and leaves `res` alone) when the
/// caller must free now.
bool defer(held_resource& res, block const& b, cudaStream_t stream, int device,
           DeviceMemoryResource* owner) noexcept;

/// Queues a free that must wait (see the comment at the top), moving `res`: the free of
/// `b` to `res`, or, when `adopted` is given, the destruction of that rmm::device_buffer
/// (which frees itself). `owner` as for defer(). The caller holds the GIL.
void defer_blocked(held_resource& res, block const& b, cudaStream_t stream, int device,
                   DeviceMemoryResource* owner,
                   std::unique_ptr<rmm::device_buffer> adopted = nullptr) noexcept;

/// Stops counting queued frees in `owner` (called as it dies, once flush() ran).
void forget_owner(DeviceMemoryResource const* owner) noexcept;

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

}  // namespace nbrmm::deferred_frees
