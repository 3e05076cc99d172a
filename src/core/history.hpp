// The memory history (nbrmm.memory): while recording, every allocation and free that goes
// through nbrmm, and those C++ code makes through librmm's current resource, is recorded
// with its time, size, device, stream, tag and (for allocations) the Python frames of the
// caller. The rules: docs/design.md, "Memory history".
//
// Where it is recorded (each place calls allocated/failed/freed below):
//  * allocate_block / free_block (resources/resource.hpp): every allocation nbrmm makes for
//    Python (Buffer, DeviceBuffer, DeviceMemoryResource.allocate, the CuPy hook, and so the
//    Numba hook and the cuda.core adapter, which use those);
//  * librmm's per-device map entry that nbrmm writes (python_owned_resource): C++ callers
//    of the current resource ("native");
//  * the PyTorch hook ("torch").
// A call that reaches a second recording place inside the first (torch's slot 0 through the
// map entry, a Buffer over a C++ resource built on the entry) is recorded once, by the
// outermost (nested_call).
//
// Off, each place costs one relaxed atomic load. On, an allocation of a thread that Python
// knows takes the GIL (if this thread does not hold it) to read the Python frames: the
// library that allocated (the CuPy, Numba and cuda.core hooks are Python functions,
// registered when recording starts) and, with stacks="python", the call stack. Threads
// Python does not know, and frees, are recorded without the GIL.
#pragma once

#include "core/common.hpp"

#include <atomic>
#include <cstddef>

namespace nbrmm::history {

/// Who made an allocation, as far as C++ knows (a Python hook found in the frames refines
/// `nbrmm`).
enum class source : unsigned char { nbrmm, native, torch };

namespace detail {
extern std::atomic<bool> recording;
/// Nesting of recording places on this thread (nested_call).
extern thread_local int nesting;
void allocated(void const* ptr, std::size_t bytes, int device, void const* stream,
               source src) noexcept;
void failed(std::size_t bytes, int device, void const* stream, source src) noexcept;
void freed(void const* ptr, std::size_t bytes, int device, void const* stream) noexcept;
}  // namespace detail

/// Whether any device is being recorded.
inline bool recording() noexcept { return detail::recording.load(std::memory_order_relaxed); }

/// Marks, for its lifetime, that this thread is inside a recording place, so that places
/// reached from inside it do not record the same call again.
class nested_call {
 public:
  nested_call() noexcept : on_{recording()}
  {
    if (on_) { ++detail::nesting; }
  }
  nested_call(nested_call const&)            = delete;
  nested_call& operator=(nested_call const&) = delete;
  ~nested_call()
  {
    if (on_) { --detail::nesting; }
  }

 private:
  bool on_;  ///< counted (only while recording: off, it costs the one load)
};

/// Records an allocation of `bytes` bytes at `ptr` (called after it succeeded, outside
/// the nested_call around it).
inline void allocated(void const* ptr, std::size_t bytes, int device, void const* stream,
                      source src) noexcept
{
  if (recording() && detail::nesting == 0) [[unlikely]] {
    detail::allocated(ptr, bytes, device, stream, src);
  }
}

/// Records an allocation that raised (from the catch block around it).
inline void failed(std::size_t bytes, int device, void const* stream, source src) noexcept
{
  if (recording() && detail::nesting == 0) [[unlikely]] {
    detail::failed(bytes, device, stream, src);
  }
}

/// Records a free (before the memory goes back).
inline void freed(void const* ptr, std::size_t bytes, int device, void const* stream) noexcept
{
  if (recording() && detail::nesting == 0) [[unlikely]] {
    detail::freed(ptr, bytes, device, stream);
  }
}

/// Drops the history and the references it holds (interpreter exit).
void clear() noexcept;

}  // namespace nbrmm::history
