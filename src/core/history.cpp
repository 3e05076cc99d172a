// The memory history's recorder (see history.hpp) and its private bindings, which
// python/nbrmm/memory/ turns into the public API.
#include "core/history.hpp"

#include "core/args.hpp"
#include "core/gil.hpp"

#include <pthread.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(Py_LIMITED_API)
// Exported by every CPython that runs the stable-ABI build (3.12 and later), though not
// part of the limited API: weak, so that a Python without them falls back to the frame's
// attributes (f_back, f_lasti), which cost more.
extern "C" {
[[gnu::weak]] PyFrameObject* PyFrame_GetBack(PyFrameObject*);
[[gnu::weak]] int PyFrame_GetLasti(PyFrameObject*);
}
#endif

namespace nbrmm::history {

namespace detail {
std::atomic<bool> recording{false};
thread_local int nesting = 0;
}  // namespace detail

namespace {

/// Frames read per allocation: the call stack with stacks="python"; only enough to find a
/// hook otherwise.
constexpr std::size_t max_stack_depth = 32;
constexpr std::size_t hook_search_depth = 8;

enum action : unsigned char { alloc = 0, free_ = 1, failed_alloc = 2 };

struct event {
  std::int64_t time_ns;
  unsigned char action;
  bool before_recording;
  std::uintptr_t address;
  std::size_t size;
  int device;
  std::uintptr_t stream;
  std::uint32_t tag;
  std::uint32_t library;
  std::uint32_t stack;
};

struct frame {
  std::uint32_t filename;
  int line;
  std::uint32_t name;
};

/// Where a frame is: its code object and the offset of its current instruction. The
/// recorder keys frames by it and works out the line once per key: computing a frame's line
/// number is most of what reading a stack costs (a recorded Buffer allocation + free, a
/// stack 10 deep: 2.2 us with the line read each time, 0.5 us keyed so, on a 2-core CPU).
struct code_at {
  PyObject* code;
  int lasti;
  bool operator==(code_at const&) const = default;
};

struct code_at_hash {
  std::size_t operator()(code_at const& k) const noexcept
  {
    return std::hash<void*>{}(k.code) ^ (static_cast<std::size_t>(k.lasti) * 0x9E3779B97F4A7C15ull);
  }
};

/// A frame read from the stack: its key and the frame object (new references).
struct walked {
  code_at key;
  PyObject* frame;
};

/// Everything the recorder keeps. Guarded by `lock`; a thread that holds the GIL may take
/// the lock, and no thread asks for the GIL while holding it.
struct recorder {
  std::mutex lock;
  bool all_devices{true};
  std::vector<int> devices;  ///< recorded devices, when not all
  bool stacks{true};
  std::size_t max_events{100000};
  std::deque<event> events;
  std::uint64_t dropped{0};
  std::unordered_map<std::uintptr_t, event> live;  ///< by address: its alloc event

  /// Interned strings (tags, libraries, file and function names); 0 is "".
  std::vector<std::string> strings{std::string{}};
  std::unordered_map<std::string, std::uint32_t> string_ids{{std::string{}, 0}};
  std::vector<frame> frames;
  std::unordered_map<code_at, std::uint32_t, code_at_hash> frame_ids;
  std::vector<PyObject*> codes;  ///< strong references: a code object's address stays its own
  /// Interned stacks (frame ids, innermost first); 0 is the empty stack.
  std::vector<std::vector<std::uint32_t>> stacks_{{}};
  std::unordered_map<std::string, std::uint32_t> stack_ids{{std::string{}, 0}};
  /// The Python hooks (their functions' code objects) and the library each stands for.
  std::unordered_map<PyObject*, std::uint32_t> hooks;
  /// The names that records use most (strings are never dropped: the ids stay).
  std::uint32_t const unknown_id = intern("unknown");
  std::uint32_t const native_id  = intern("native");
  std::uint32_t const torch_id   = intern("torch");
  std::uint32_t const nbrmm_id   = intern("nbrmm");

  std::uint32_t intern(std::string_view s)
  {
    auto it = string_ids.find(std::string{s});
    if (it != string_ids.end()) { return it->second; }
    auto const id = static_cast<std::uint32_t>(strings.size());
    strings.emplace_back(s);
    string_ids.emplace(strings.back(), id);
    return id;
  }

  [[nodiscard]] bool records(int device) const
  {
    if (all_devices) { return true; }
    for (int d : devices) {
      if (d == device) { return true; }
    }
    return false;
  }

  void push(event const& e)
  {
    if (max_events == 0) {
      ++dropped;
      return;
    }
    while (events.size() >= max_events) {
      events.pop_front();
      ++dropped;
    }
    events.push_back(e);
  }
};

recorder& state()
{
  static auto* r = new recorder;  // never destroyed: frees may come during exit
  return *r;
}

/// One entered tag of this thread: its token (what leaving it names), its name, and the
/// name's interned id once an allocation was recorded under it (0 before: names are
/// interned only when used, so tags entered while nothing records keep nothing).
struct entered_tag {
  std::size_t token;
  std::string name;
  std::uint32_t id;
};

/// This thread's entered tags, innermost last.
thread_local std::vector<entered_tag> tag_stack;
thread_local std::size_t last_token = 0;

std::int64_t now_ns() noexcept
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::uint32_t library_id(recorder& r, source src)
{
  switch (src) {
    case source::native: return r.native_id;
    case source::torch: return r.torch_id;
    default: return r.nbrmm_id;
  }
}

/// A string attribute of `obj` as UTF-8 (empty when it has none). GIL held.
std::string str_attr(PyObject* obj, char const* name)
{
  PyObject* value = PyObject_GetAttrString(obj, name);
  if (value == nullptr) {
    PyErr_Clear();
    return {};
  }
  std::string out = PyUnicode_Check(value) ? utf8(value) : std::string{};
  Py_DECREF(value);
  return out;
}

#if defined(Py_LIMITED_API)
/// An int attribute of a frame (-1 when it has none). GIL held.
int int_attr(PyObject* obj, char const* name)
{
  PyObject* value = PyObject_GetAttrString(obj, name);
  long out        = value != nullptr ? PyLong_AsLong(value) : -1;
  Py_XDECREF(value);
  if (PyErr_Occurred() != nullptr) { PyErr_Clear(); }
  return static_cast<int>(out);
}
#endif

/// The frame that called `f` (a new reference, or null). GIL held.
PyObject* frame_back(PyObject* f)
{
#if defined(Py_LIMITED_API)
  if (PyFrame_GetBack == nullptr) {
    PyObject* back = PyObject_GetAttrString(f, "f_back");
    if (back == nullptr) { PyErr_Clear(); }
    if (back == Py_None) { Py_CLEAR(back); }
    return back;
  }
#endif
  return reinterpret_cast<PyObject*>(PyFrame_GetBack(reinterpret_cast<PyFrameObject*>(f)));
}

int frame_lasti(PyObject* f)
{
#if defined(Py_LIMITED_API)
  if (PyFrame_GetLasti == nullptr) { return int_attr(f, "f_lasti"); }
#endif
  return PyFrame_GetLasti(reinterpret_cast<PyFrameObject*>(f));
}

/// The frames of this thread's Python call stack, innermost first. GIL held.
std::vector<walked> read_frames(std::size_t depth)
{
  std::vector<walked> out;
  out.reserve(depth);
  PyObject* f = reinterpret_cast<PyObject*>(PyEval_GetFrame());  // borrowed
  Py_XINCREF(f);
  while (f != nullptr && out.size() < depth) {
    auto* code = reinterpret_cast<PyObject*>(PyFrame_GetCode(reinterpret_cast<PyFrameObject*>(f)));
    out.push_back({{code, frame_lasti(f)}, f});  // (takes our reference to f)
    f = frame_back(f);
  }
  Py_XDECREF(f);
  return out;
}

void drop_frames(std::vector<walked>& frames) noexcept
{
  for (auto& f : frames) {
    Py_DECREF(f.key.code);
    Py_DECREF(f.frame);
  }
  frames.clear();
}

/// The names of the frames the recorder does not know yet (GIL held, lock not held: reading
/// them runs Python code).
struct named_frame {
  code_at key;
  int line;
  std::string filename;
  std::string name;
};

std::vector<named_frame> name_frames(std::vector<walked> const& unknown)
{
  std::vector<named_frame> out;
  out.reserve(unknown.size());
  for (auto const& f : unknown) {
    std::string name = str_attr(f.key.code, "co_qualname");
    if (name.empty()) { name = str_attr(f.key.code, "co_name"); }
    out.push_back({f.key, PyFrame_GetLineNumber(reinterpret_cast<PyFrameObject*>(f.frame)),
                   str_attr(f.key.code, "co_filename"), std::move(name)});
  }
  return out;
}

/// Interns the stack of `frames` (lock held), adding the frames of `named` it lacks.
std::uint32_t intern_stack(recorder& r, std::vector<walked> const& frames,
                           std::vector<named_frame> const& named)
{
  for (auto const& n : named) {
    if (r.frame_ids.find(n.key) != r.frame_ids.end()) { continue; }
    auto const id = static_cast<std::uint32_t>(r.frames.size());
    r.frames.push_back({r.intern(n.filename), n.line, r.intern(n.name)});
    r.frame_ids.emplace(n.key, id);
    Py_INCREF(n.key.code);  // (GIL held: frames were read)
    r.codes.push_back(n.key.code);
  }
  std::vector<std::uint32_t> ids;
  ids.reserve(frames.size());
  for (auto const& f : frames) {
    auto it = r.frame_ids.find(f.key);
    if (it != r.frame_ids.end()) { ids.push_back(it->second); }
  }
  std::string const key{reinterpret_cast<char const*>(ids.data()),
                        ids.size() * sizeof(std::uint32_t)};
  auto it = r.stack_ids.find(key);
  if (it != r.stack_ids.end()) { return it->second; }
  auto const id = static_cast<std::uint32_t>(r.stacks_.size());
  r.stacks_.push_back(std::move(ids));
  r.stack_ids.emplace(key, id);
  return id;
}

/// Records an allocation or a failed one.
void record_alloc(unsigned char what, void const* ptr, std::size_t bytes, int device,
                  void const* stream, source src) noexcept
{
  recorder& r = state();
  bool stacks = false;
  {
    std::lock_guard const guard{r.lock};
    if (!detail::recording.load(std::memory_order_relaxed) || !r.records(device)) { return; }
    stacks = r.stacks;
  }
  // The Python frames: this thread's, if Python knows it (taking the GIL for it when this
  // thread does not hold it, as a C++ caller or a librmm call releases it).
  std::vector<walked> frames;
  std::optional<gil_acquire> gil;
  bool read = holds_gil();
  if (!read && PyGILState_GetThisThreadState() != nullptr && !exit_guard::exiting()) {
    gil.emplace();
    read = gil->ok();
  }
  try {
    std::vector<named_frame> named;
    if (read) {
      frames = read_frames(stacks ? max_stack_depth : hook_search_depth);
      if (stacks) {
        std::vector<walked> unknown;
        {
          std::lock_guard const guard{r.lock};
          for (auto const& f : frames) {
            if (r.frame_ids.find(f.key) == r.frame_ids.end()) { unknown.push_back(f); }
          }
        }
        named = name_frames(unknown);
      }
    }
    std::lock_guard const guard{r.lock};
    std::uint32_t library = library_id(r, src);
    if (src == source::nbrmm) {
      for (auto const& f : frames) {
        if (auto it = r.hooks.find(f.key.code); it != r.hooks.end()) {
          library = it->second;
          break;
        }
      }
    }
    std::uint32_t const stack = stacks && !frames.empty() ? intern_stack(r, frames, named) : 0;
    std::uint32_t tag = library;
    if (!tag_stack.empty()) {
      entered_tag& t = tag_stack.back();
      if (t.id == 0) { t.id = r.intern(t.name); }
      tag = t.id;
    }
    event const e{now_ns(),
                  what,
                  false,
                  reinterpret_cast<std::uintptr_t>(ptr),
                  bytes,
                  device,
                  reinterpret_cast<std::uintptr_t>(stream),
                  tag,
                  library,
                  stack};
    r.push(e);
    if (what == alloc) { r.live.insert_or_assign(e.address, e); }
  } catch (...) {  // no memory for the record: it is lost, the allocation is not
    if (PyErr_Occurred() != nullptr && read) { PyErr_Clear(); }
    std::lock_guard const guard{r.lock};
    ++r.dropped;
  }
  if (read) { drop_frames(frames); }  // (with the GIL, which `gil` still holds)
}

}  // namespace

void detail::allocated(void const* ptr, std::size_t bytes, int device, void const* stream,
                       source src) noexcept
{
  record_alloc(alloc, ptr, bytes, device, stream, src);
}

void detail::failed(std::size_t bytes, int device, void const* stream, source src) noexcept
{
  record_alloc(failed_alloc, nullptr, bytes, device, stream, src);
}

void detail::freed(void const* ptr, std::size_t bytes, int device, void const* stream) noexcept
{
  recorder& r = state();
  try {
    std::lock_guard const guard{r.lock};
    if (!detail::recording.load(std::memory_order_relaxed) || !r.records(device)) { return; }
    auto const address = reinterpret_cast<std::uintptr_t>(ptr);
    event e{now_ns(), free_, true, address, bytes, device, reinterpret_cast<std::uintptr_t>(stream),
            r.unknown_id, r.unknown_id, 0};
    if (auto it = r.live.find(address); it != r.live.end()) {
      e.before_recording = false;
      e.size             = it->second.size;
      e.tag              = it->second.tag;
      e.library          = it->second.library;
      r.live.erase(it);
    }
    r.push(e);
  } catch (...) {
  }
}

namespace {
/// Drops the history (and, `hooks_too`, the registered hooks); GIL held.
void drop_history(bool hooks_too) noexcept
{
  recorder& r = state();
  std::vector<PyObject*> codes;
  {
    std::lock_guard const guard{r.lock};
    r.events.clear();
    r.live.clear();
    r.frames.clear();
    r.frame_ids.clear();
    r.stacks_.assign(1, {});
    r.stack_ids.clear();
    r.stack_ids.emplace(std::string{}, 0);
    codes.swap(r.codes);
    if (hooks_too) {
      for (auto& [code, lib] : r.hooks) { codes.push_back(code); }
      r.hooks.clear();
    }
    r.dropped = 0;
  }
  if (holds_gil()) {
    for (PyObject* c : codes) { Py_DECREF(c); }
  }
}
}  // namespace

void clear() noexcept
{
  detail::recording.store(false);
  drop_history(true);
}

namespace {

/// _history_configure: starts (clearing a stopped history), reconfigures or stops.
void configure(bool enabled, nb::handle devices, bool stacks, std::size_t max_events)
{
  if (!enabled) {
    detail::recording.store(false);
    return;
  }
  recorder& r = state();
  std::vector<int> wanted;
  if (!devices.is_none()) {
    for (nb::handle d : devices) { wanted.push_back(nb::cast<int>(d)); }
  }
  bool const fresh = !detail::recording.load();
  if (fresh) { drop_history(false); }
  std::lock_guard const guard{r.lock};
  if (devices.is_none()) {
    r.all_devices = true;
    r.devices.clear();
  } else if (fresh || !r.all_devices) {
    r.all_devices = false;
    for (int d : wanted) {
      if (!r.records(d)) { r.devices.push_back(d); }
    }
  }
  r.stacks     = stacks;
  r.max_events = max_events;
  while (r.events.size() > max_events) {
    r.events.pop_front();
    ++r.dropped;
  }
  detail::recording.store(true);
}

void add_hook(nb::handle code, std::string const& library)
{
  recorder& r = state();
  std::lock_guard const guard{r.lock};
  if (r.hooks.find(code.ptr()) != r.hooks.end()) { return; }
  auto const id = r.intern(library);
  r.hooks.emplace(code.inc_ref().ptr(), id);
}

nb::tuple data()
{
  recorder& r = state();
  std::vector<std::string> strings;
  std::vector<frame> frames;
  std::vector<std::vector<std::uint32_t>> stacks;
  std::vector<event> events;
  std::vector<event> live;
  std::uint64_t dropped = 0;
  {
    std::lock_guard const guard{r.lock};
    strings = r.strings;
    frames  = r.frames;
    stacks  = r.stacks_;
    events.assign(r.events.begin(), r.events.end());
    live.reserve(r.live.size());
    for (auto const& [address, e] : r.live) { live.push_back(e); }
    dropped = r.dropped;
  }
  nb::list py_strings, py_frames, py_stacks, py_events, py_live;
  for (auto const& s : strings) {
    py_strings.append(nb::steal(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace")));
  }
  for (auto const& f : frames) { py_frames.append(nb::make_tuple(f.filename, f.line, f.name)); }
  for (auto const& s : stacks) {
    nb::list ids;
    for (auto id : s) { ids.append(id); }
    py_stacks.append(nb::tuple(ids));
  }
  auto const row = [](event const& e) {
    return nb::make_tuple(e.time_ns, static_cast<int>(e.action), e.address, e.size, e.device,
                          e.stream, e.tag, e.library, e.stack, e.before_recording);
  };
  for (auto const& e : events) { py_events.append(row(e)); }
  for (auto const& e : live) { py_live.append(row(e)); }
  return nb::make_tuple(py_strings, py_frames, py_stacks, py_events, py_live, dropped);
}

std::size_t push_tag(nb::handle name)
{
  if (!PyUnicode_Check(name.ptr())) {
    throw nb::type_error(("name: expected a str, got " + type_of(name)).c_str());
  }
  tag_stack.push_back({++last_token, utf8(name), 0});
  return last_token;
}

bool pop_tag(std::size_t token)
{
  // The tag entered with `token`, wherever it is: tags left out of order (a generator
  // closed inside another tag) take only themselves away.
  for (auto it = tag_stack.rbegin(); it != tag_stack.rend(); ++it) {
    if (it->token == token) {
      tag_stack.erase(std::next(it).base());
      return true;
    }
  }
  return false;
}

nb::object current_tag()
{
  if (tag_stack.empty()) { return nb::none(); }
  std::string const& name = tag_stack.back().name;
  return nb::steal(PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "replace"));
}

/// Forks: the recorder's lock is held across fork() (taken by the forking thread, which
/// holds no other lock then), so that a child never inherits it locked by a thread it does
/// not have, nor the recorder half changed.
void before_fork() noexcept { state().lock.lock(); }
void after_fork() noexcept { state().lock.unlock(); }

}  // namespace

}  // namespace nbrmm::history

namespace nbrmm {

void bind_history(nb::module_& m)
{
  pthread_atfork(&history::before_fork, &history::after_fork, &history::after_fork);
  m.def("_history_configure", &history::configure, nb::arg("enabled"), nb::arg("devices").none(),
        nb::arg("stacks"), nb::arg("max_events"),
        nb::sig("def _history_configure(enabled: bool, devices: collections.abc.Sequence[int] | "
                "None, stacks: bool, max_events: int) -> None"),
        "Start, reconfigure or stop recording (nbrmm.memory.record_history).");
  m.def("_history_add_hook", &history::add_hook, nb::arg("code"), nb::arg("library"),
        nb::sig("def _history_add_hook(code: types.CodeType, library: str) -> None"),
        "Attribute allocations made under the function of `code` to `library`.");
  m.def("_history_recording", &history::recording, "Whether any device is being recorded.");
  m.def("_history_data", &history::data,
        nb::sig("def _history_data() -> tuple[list[str], list[tuple[int, int, int]], "
                "list[tuple[int, ...]], list[tuple[int, int, int, int, int, int, int, int, int, "
                "bool]], list[tuple[int, int, int, int, int, int, int, int, int, bool]], int]"),
        "The recorded history: (strings, frames, stacks, events, live allocations, dropped).");
  m.def("_history_push_tag", &history::push_tag, nb::arg("name").none(),
        nb::sig("def _history_push_tag(name: str) -> int"),
        "Push a tag on this thread's stack; returns the token that pops it.");
  m.def("_history_pop_tag", &history::pop_tag, nb::arg("token"),
        "Take the tag pushed with `token` off this thread's stack; False when this thread "
        "has none such.");
  m.def("_history_current_tag", &history::current_tag,
        nb::sig("def _history_current_tag() -> str | None"),
        "The innermost tag of this thread, or None.");
}

}  // namespace nbrmm
