// Taking the GIL for calls from C++ into Python (see gil.hpp).
#include "core/gil.hpp"

namespace nbrmm {

gil_acquire::gil_acquire() noexcept
{
  bool const held = holds_gil();
  if (!exit_guard::begin_call(held)) { return; }
  ok_ = true;
  if (!held) {
    state_ = PyGILState_Ensure();
    exit_guard::gil_taken();
    taken_ = true;
  }
}

gil_acquire::~gil_acquire()
{
  if (!ok_) { return; }
  // Without the GIL here, the interpreter is unwinding this thread at exit: its thread
  // state is no longer this thread's to release.
  if (taken_ && holds_gil()) { PyGILState_Release(state_); }
  exit_guard::end_call(!taken_);
}

}  // namespace nbrmm
