// Interpreter exit with threads still running (see exit.hpp).
#include "core/exit.hpp"

#include <atomic>

#if PY_VERSION_HEX < 0x030E0000
#include <chrono>
#include <thread>

#include <pythread.h>
#endif

#if defined(Py_LIMITED_API)
// Exported by every CPython that runs the stable-ABI build, under one of these names
// (3.13 made it public): weak, so that the one the running Python lacks is null.
extern "C" {
[[gnu::weak]] int Py_IsFinalizing(void);   // 3.13+
[[gnu::weak]] int _Py_IsFinalizing(void);  // 3.12
}
#endif

namespace nbrmm::exit_guard {
namespace {

bool finalizing() noexcept
{
#if defined(Py_LIMITED_API)
  return (Py_IsFinalizing != nullptr ? Py_IsFinalizing() : _Py_IsFinalizing()) != 0;
#elif PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

}  // namespace

#if PY_VERSION_HEX < 0x030E0000

namespace {

std::atomic<bool> begun{false};
std::atomic<unsigned long> exit_thread{0};
/// Threads between deciding to take the GIL and having it: an arrival is counted before
/// the thread looks at `begun`, a departure once it holds the GIL (or turns back).
std::atomic<unsigned long> arrivals{0};
std::atomic<unsigned long> departures{0};
/// Calls from C++ into Python under way (gil_acquire scopes).
std::atomic<int> calls{0};
/// Those of them on threads parked for good: they never end, so begin() does not wait.
std::atomic<int> parked_calls{0};
constinit thread_local int calls_on_this_thread = 0;

/// Whether this thread must not take the GIL any more.
bool locked_out() noexcept
{
  return begun.load() && PyThread_get_thread_ident() != exit_thread.load();
}

[[noreturn]] void park() noexcept
{
  parked_calls.fetch_add(calls_on_this_thread);
  for (;;) { std::this_thread::sleep_for(std::chrono::hours{1}); }
}

}  // namespace

void restore_thread(PyThreadState* state) noexcept
{
  arrivals.fetch_add(1);
  if (locked_out()) {
    departures.fetch_add(1);
    park();
  }
  PyEval_RestoreThread(state);
  departures.fetch_add(1);
}

bool begin_call(bool holds_gil) noexcept
{
  if (holds_gil) {
    if (locked_out()) { return false; }
  } else {
    arrivals.fetch_add(1);
    if (locked_out() || finalizing() || !nb::is_alive()) {
      departures.fetch_add(1);
      return false;
    }
  }
  calls.fetch_add(1);
  ++calls_on_this_thread;
  return true;
}

void gil_taken() noexcept { departures.fetch_add(1); }

void end_call(bool) noexcept
{
  --calls_on_this_thread;
  calls.fetch_sub(1);
}

void begin() noexcept
{
  exit_thread.store(PyThread_get_thread_ident());
  begun.store(true);
  // Threads that decided to take the GIL before now get it, run on, and park the next time
  // they would take it from inside nbrmm. Calls into Python that C++ made (callbacks of
  // resources) finish too: Python code may release the GIL, and a thread that takes it back
  // once the interpreter finalizes is unwound through the C++ frames below it. Give them
  // the GIL until none is left (bounded: exit must not hang on a thread that never comes).
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds{2};
  auto busy           = [] {
    return arrivals.load() != departures.load() || calls.load() - parked_calls.load() > 0;
  };
  while (busy() && std::chrono::steady_clock::now() < deadline) {
    Py_BEGIN_ALLOW_THREADS std::this_thread::sleep_for(std::chrono::milliseconds{1});
    Py_END_ALLOW_THREADS
  }
}

bool exiting() noexcept { return begun.load() || finalizing(); }

#else  // Python 3.14 and later hang such threads themselves.

namespace {
std::atomic<bool> begun{false};
}  // namespace

void restore_thread(PyThreadState* state) noexcept { PyEval_RestoreThread(state); }

bool begin_call(bool holds_gil) noexcept
{
  return holds_gil || !(finalizing() || !nb::is_alive());
}

void gil_taken() noexcept {}

void end_call(bool) noexcept {}

void begin() noexcept { begun.store(true); }

bool exiting() noexcept { return begun.load() || finalizing(); }

#endif

}  // namespace nbrmm::exit_guard
