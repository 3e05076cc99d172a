// Interpreter exit with threads still running (the rules: docs/design.md, "Interpreter
// exit").
//
// Python 3.11 to 3.13 end a thread that asks for the GIL once the interpreter is finalizing
// by unwinding its stack (pthread_exit), which aborts the process when the unwinding meets a
// C++ `noexcept` frame or a `catch (...)`; nbrmm's code is full of both. So on those
// versions no thread may ask for the GIL from inside nbrmm once finalization can begin: at
// exit (begin(), run by nbrmm's atexit hook with the GIL held) nbrmm waits, bounded, until
// no thread is between deciding to take the GIL and having it, nor inside a call from C++
// into Python; from then on every other thread parks for good where it would take the GIL
// back after a librmm call (the process ends around it), and a call from C++ into Python on
// such a thread does without Python.
//
// Python 3.14 hangs such a thread itself instead of unwinding it (CPython gh-87135), so
// there this file only says whether Python can still be entered.
#pragma once

#include "core/common.hpp"

namespace nbrmm::exit_guard {

/// Takes the GIL back after PyEval_SaveThread (gil_release). Before 3.14, once exit began,
/// a thread other than the exiting one parks here for good instead.
void restore_thread(PyThreadState* state) noexcept;

/// Begins a call from C++ into Python (gil_acquire): `holds_gil` says whether this thread
/// holds the GIL already. Returns false when Python may no longer be entered from this
/// thread; otherwise the call must be ended with end_call, and a thread that did not hold
/// the GIL takes it with PyGILState_Ensure and then calls gil_taken().
bool begin_call(bool holds_gil) noexcept;
void gil_taken() noexcept;
/// Ends a call begun by begin_call (`held` as passed there; the GIL released already when
/// it was not held).
void end_call(bool held) noexcept;

/// Called from nbrmm's atexit hook (with the GIL): see the comment at the top.
void begin() noexcept;

/// Whether interpreter exit began (begin() ran or the interpreter is finalizing).
bool exiting() noexcept;

}  // namespace nbrmm::exit_guard
