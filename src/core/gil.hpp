// The GIL: whether this thread holds it, releasing it around calls into librmm and CUDA,
// and taking it for calls from C++ into Python. What happens to threads at interpreter
// exit is exit.hpp's.
#pragma once

#include "core/exit.hpp"

#if defined(Py_LIMITED_API)
// Exported by every CPython that runs the stable-ABI build, each under one of these names
// (3.13 made it public): weak, so that the one the running Python lacks is null.
extern "C" {
[[gnu::weak]] PyThreadState* PyThreadState_GetUnchecked(void);  // 3.13+
[[gnu::weak]] PyThreadState* _PyThreadState_UncheckedGet(void);  // 3.12
}
#endif

namespace nbrmm {

#if defined(Py_LIMITED_API)
namespace limited_api {
/// This thread's attached thread state, or null (never a fatal error).
inline PyThreadState* current_thread_state() noexcept
{
  return PyThreadState_GetUnchecked != nullptr ? PyThreadState_GetUnchecked()
                                               : _PyThreadState_UncheckedGet();
}
}  // namespace limited_api
#endif

/// Whether this thread holds the GIL (has an attached thread state).
inline bool holds_gil() noexcept
{
#if defined(Py_LIMITED_API)
  // The stable ABI has no such query; the running Python exports one under its own name.
  return limited_api::current_thread_state() != nullptr;
#elif PY_VERSION_HEX >= 0x030D0000
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

/// Releases the GIL for its lifetime, and nothing else. Use it around every call that may
/// allocate, free, block or enter CUDA.
class gil_release {
 public:
  gil_release() noexcept : state_{PyEval_SaveThread()} {}
  gil_release(gil_release const&)            = delete;
  gil_release& operator=(gil_release const&) = delete;
  ~gil_release() { exit_guard::restore_thread(state_); }

 private:
  PyThreadState* state_;
};

/// Takes the GIL for a call from C++ into Python on a thread that may or may not hold it
/// (a callback that librmm or another library calls). ok() is false when Python may no
/// longer be entered from this thread (interpreter exit): the caller then does without.
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
  bool taken_{false};  ///< this scope took the GIL (the thread did not hold it)
};

}  // namespace nbrmm
