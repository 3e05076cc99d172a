// The GIL: whether this thread holds it, releasing it around calls into librmm and CUDA,
// taking it for calls from C++ into Python, and interpreter exit.
//
// Exit with threads still running. CPython ends a thread that asks for the GIL once the
// interpreter is finalizing by unwinding its stack (pthread_exit), which aborts the process
// when the unwinding meets a C++ `noexcept` frame or a `catch (...)`. nbrmm's code is full
// of both, so no thread may ask for the GIL from inside nbrmm once finalization can begin:
// at exit (begin_exit(), run by nbrmm's atexit hook while the GIL is held) nbrmm waits
// until no thread is between deciding to take the GIL and having it; from then on every
// thread except the exiting one parks for good where it would take the GIL back after a
// librmm call (the process ends around it), and a call from C++ into Python made on such a
// thread does without Python (gil_acquire::ok() is false).
#pragma once

#include "common.hpp"

#include <atomic>
#include <exception>

namespace nbrmm {

/// Whether this thread holds the GIL (has an attached thread state).
inline bool holds_gil() noexcept
{
#if PY_VERSION_HEX >= 0x030D0000
  return PyThreadState_GetUnchecked() != nullptr;
#elif PY_VERSION_HEX >= 0x030C0000
  return _PyThreadState_UncheckedGet() != nullptr;  // this thread's
#else
  // 3.11's current thread state is the process's (whichever thread holds the GIL): it is
  // this thread's own. (Not PyGILState_Check, which says yes on every thread once any
  // subinterpreter has existed.)
  PyThreadState* const current = _PyThreadState_UncheckedGet();
  return current != nullptr && current == PyGILState_GetThisThreadState();
#endif
}

/// Takes the GIL back after PyEval_SaveThread. Once interpreter exit began, a thread other
/// than the exiting one parks here for good instead.
void restore_gil(PyThreadState* state) noexcept;

/// Called from nbrmm's atexit hook (with the GIL): see the comment at the top.
void begin_exit() noexcept;

/// Whether interpreter exit began (begin_exit() ran or the interpreter is finalizing).
bool exiting() noexcept;

/// Takes the GIL for a call from C++ into Python on a thread that may not hold it (a
/// callback that librmm or another library calls). ok() is false when Python may no
/// longer be entered from this thread: the caller then does without Python.
class gil_acquire {
 public:
  gil_acquire() noexcept;
  gil_acquire(gil_acquire const&)            = delete;
  gil_acquire& operator=(gil_acquire const&) = delete;
  ~gil_acquire();
  [[nodiscard]] bool ok() const noexcept { return ok_; }

 private:
  PyGILState_STATE state_{};
  bool ok_{false};
  bool taken_{false};
};

namespace detail {
/// What gil.cpp keeps for interpreter exit, read inline by python_call.
extern std::atomic<bool> exit_begun;
extern std::atomic<int> calls_with_gil;
extern constinit thread_local int calls_on_this_thread;
/// Whether this thread is not the one running exit (once exit began).
bool locked_out_slow() noexcept;

/// Counts calls from C++ into Python begun by a thread that held the GIL. With the GIL
/// enabled, only threads holding it change the count, so it needs no atomic
/// read-modify-write; begin_exit reads it with the GIL held.
inline void count_call_with_gil(int change) noexcept
{
#if defined(Py_GIL_DISABLED)
  calls_with_gil.fetch_add(change);
#else
  calls_with_gil.store(calls_with_gil.load(std::memory_order_relaxed) + change,
                       std::memory_order_relaxed);
#endif
}

/// Begins a call into Python on a thread that holds the GIL (counted on the thread and in
/// calls_with_gil), or refuses it once exit began on another thread (false).
inline bool begin_call_with_gil() noexcept
{
  if (exit_begun.load() && locked_out_slow()) { return false; }
  count_call_with_gil(1);
  ++calls_on_this_thread;
  return true;
}

/// Ends a call begun by begin_call_with_gil (with the GIL held again).
inline void end_call_with_gil() noexcept
{
  --calls_on_this_thread;
  count_call_with_gil(-1);
}
}  // namespace detail

/// gil_acquire for a method that Python called, which holds the GIL already: counts the
/// calls into Python it makes (cuda.core's code, a resource written in Python) so that
/// interpreter exit waits for them, as gil_acquire does, without asking whether this
/// thread holds the GIL. ok() is false once exit began on another thread.
class python_call {
 public:
  python_call() noexcept : ok_{detail::begin_call_with_gil()} {}
  python_call(python_call const&)            = delete;
  python_call& operator=(python_call const&) = delete;
  ~python_call()
  {
    if (ok_) { detail::end_call_with_gil(); }
  }
  [[nodiscard]] bool ok() const noexcept { return ok_; }

 private:
  bool ok_{false};
};

namespace detail {
/// Threads holding a MemoryError for translation (errors.cpp): while it is 0, no thread
/// does, and forget_python_memory_error() need not look at this thread's record. A thread
/// sees its own in the count, whatever other threads do.
extern std::atomic<int> memory_errors_held;
void forget_python_memory_error_slow() noexcept;
}  // namespace detail

/// Forgets the MemoryError that a callback of this call left for the translation of
/// librmm's out-of-memory error (errors.hpp; called with the GIL once a call succeeded).
inline void forget_python_memory_error() noexcept
{
  if (detail::memory_errors_held.load(std::memory_order_relaxed) != 0) {
    detail::forget_python_memory_error_slow();
  }
}

namespace deferred_frees {
class entries;
/// Releases the GIL, performing the queued frees first (see deferred_frees.hpp).
PyThreadState* release_gil(entries** taken) noexcept;
/// Returns storage taken by release_gil (call with the GIL held).
void recycle(entries* taken) noexcept;
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
    restore_gil(state_);
    if (taken_ != nullptr) { deferred_frees::recycle(taken_); }
    if (detail::memory_errors_held.load(std::memory_order_relaxed) != 0 &&
        std::uncaught_exceptions() == 0) {
      detail::forget_python_memory_error_slow();
    }
  }

 private:
  deferred_frees::entries* taken_{nullptr};
  PyThreadState* state_;
};

}  // namespace nbrmm
