// The GIL at interpreter exit (see gil.hpp).
#include "gil.hpp"

#include <atomic>
#include <chrono>
#include <thread>

#include <pythread.h>

namespace nbrmm {
namespace detail {

std::atomic<bool> exit_begun{false};
/// Calls from C++ into Python in progress begun by a thread that held the GIL
/// (gil_acquire, python_call; see count_call_with_gil).
std::atomic<int> calls_with_gil{0};
/// gil_acquire and python_call scopes under way on this thread.
constinit thread_local int calls_on_this_thread = 0;

}  // namespace detail

namespace {

using detail::calls_on_this_thread;
using detail::calls_with_gil;
using detail::exit_begun;

std::atomic<unsigned long> exit_thread{0};
/// Threads between deciding to take the GIL and having it: arrivals - departures. An arrival
/// is counted (a full barrier, ordered against the read of exit_begun) before the thread
/// looks at exit_begun; a departure is counted once the thread holds the GIL, so with the
/// GIL enabled it needs no atomic read-modify-write: the GIL orders it before begin_exit's
/// reads, which are made with the GIL held. A thread that turns back without the GIL
/// takes its arrival back instead.
std::atomic<unsigned long> arrivals{0};
std::atomic<unsigned long> departures{0};

/// Counts this thread's departure (it holds the GIL now).
void depart() noexcept
{
#if defined(Py_GIL_DISABLED)
  departures.fetch_add(1);
#else
  departures.store(departures.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
#endif
}

/// Whether some thread decided to take the GIL and does not have it yet (GIL held).
bool reacquiring() noexcept
{
  unsigned long const gone = departures.load();
  return arrivals.load() != gone;
}
/// Calls from C++ into Python in progress: gil_acquire scopes that took the GIL
/// (python_calls) and scopes begun by a thread that held it (calls_with_gil).
std::atomic<int> python_calls{0};

bool finalizing() noexcept
{
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

/// Whether this thread must not take the GIL any more.
bool locked_out() noexcept
{
  return exit_begun.load() && PyThread_get_thread_ident() != exit_thread.load();
}

/// Those of threads parked for good at exit: they never end, so begin_exit does not wait
/// for them.
std::atomic<int> parked_calls{0};

[[noreturn]] void park() noexcept
{
  parked_calls.fetch_add(calls_on_this_thread);
  for (;;) { std::this_thread::sleep_for(std::chrono::hours{1}); }
}

/// Calls from C++ into Python that may still end.
int calls_under_way() noexcept
{
  return python_calls.load() + calls_with_gil.load() - parked_calls.load();
}

}  // namespace

void restore_gil(PyThreadState* state) noexcept
{
  arrivals.fetch_add(1);
  if (locked_out()) {
    arrivals.fetch_sub(1);
    park();
  }
  PyEval_RestoreThread(state);
  depart();
}

bool detail::locked_out_slow() noexcept
{
  return PyThread_get_thread_ident() != exit_thread.load();
}

bool exiting() noexcept { return exit_begun.load() || finalizing(); }

void begin_exit() noexcept
{
  exit_thread.store(PyThread_get_thread_ident());
  exit_begun.store(true);
  // Threads that decided to take the GIL before now get it, run on, and park the next time
  // they would take it from inside nbrmm. Calls into Python that C++ made (callbacks of
  // resources) finish too: Python code may release the GIL, and a thread that takes it back
  // once the interpreter finalizes is unwound through the C++ frames below it. Give them
  // the GIL until none is left (bounded: exit must not hang on a thread that never comes).
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds{2};
  while ((reacquiring() || calls_under_way() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    Py_BEGIN_ALLOW_THREADS std::this_thread::sleep_for(std::chrono::milliseconds{1});
    Py_END_ALLOW_THREADS
  }
}

gil_acquire::gil_acquire() noexcept
{
  if (holds_gil()) {
    ok_ = detail::begin_call_with_gil();
    return;
  }
  arrivals.fetch_add(1);
  if (locked_out() || finalizing() || !nb::is_alive()) {
    arrivals.fetch_sub(1);
    return;
  }
  python_calls.fetch_add(1);
  state_ = PyGILState_Ensure();
  depart();
  ++calls_on_this_thread;
  ok_    = true;
  taken_ = true;
}

gil_acquire::~gil_acquire()
{
  if (!ok_) { return; }
  if (!taken_) {
    // The GIL is held again here (the scope began with it), unless the interpreter is
    // unwinding this thread at exit, when the count no longer matters.
    detail::end_call_with_gil();
    return;
  }
  --calls_on_this_thread;
  // Without the GIL here, the interpreter is unwinding this thread at exit: its thread
  // state is no longer this thread's to release.
  if (holds_gil()) { PyGILState_Release(state_); }
  python_calls.fetch_sub(1);
}

}  // namespace nbrmm

// ------------------------------------------------------------------------------------
// py_owned (py_owned.hpp)
// ------------------------------------------------------------------------------------

#include "py_owned.hpp"

#include <mutex>
#include <vector>

namespace nbrmm {
namespace {

std::mutex& owned_mutex() noexcept
{
  static auto* m = new std::mutex;  // never destroyed: references may be dropped at exit
  return *m;
}

py_owned* owned_head = nullptr;

}  // namespace

py_owned::py_owned(nb::handle h, bool guards_memory) noexcept
  : ptr_{h.ptr()}, guards_memory_{guards_memory}
{
  if (ptr_ == nullptr) { return; }
  Py_INCREF(ptr_);
  std::lock_guard lock{owned_mutex()};
  next_ = owned_head;
  if (owned_head != nullptr) { owned_head->prev_ = this; }
  owned_head = this;
}

void py_owned::reset() noexcept
{
  PyObject* p = nullptr;
  {
    std::lock_guard lock{owned_mutex()};
    p    = ptr_;
    ptr_ = nullptr;
    if (p == nullptr) { return; }
    (prev_ != nullptr ? prev_->next_ : owned_head) = next_;
    if (next_ != nullptr) { next_->prev_ = prev_; }
    prev_ = next_ = nullptr;
  }
  if (holds_gil()) {
    Py_DECREF(p);
    return;
  }
  gil_acquire gil;
  if (gil.ok()) { Py_DECREF(p); }
}

void py_owned::release_all(bool (*keep)(PyObject*) noexcept) noexcept
{
  std::vector<PyObject*> released;
  {
    std::lock_guard lock{owned_mutex()};
    for (py_owned* o = owned_head; o != nullptr;) {
      py_owned* next = o->next_;
      if (o->guards_memory_ && !keep(o->ptr_)) {
        o = next;  // stays listed and referenced
        continue;
      }
      try {
        released.push_back(o->ptr_);
      } catch (...) {
        o = next;  // without memory to list it, the reference stays
        continue;
      }
      (o->prev_ != nullptr ? o->prev_->next_ : owned_head) = next;
      if (next != nullptr) { next->prev_ = o->prev_; }
      o->ptr_  = nullptr;
      o->prev_ = o->next_ = nullptr;
      o        = next;
    }
  }
  for (PyObject* p : released) { Py_DECREF(p); }
}

}  // namespace nbrmm
