// Python objects owned by C++.
#pragma once

#include "core/gil.hpp"

namespace nbrmm {

/// A strong reference to a Python object that C++ owns. It may be released on any thread
/// (taking the GIL if needed); once Python can no longer be entered from that thread
/// (interpreter exit) the reference is leaked instead.
///
/// Every live py_owned is listed, so that at interpreter exit C++ can let go of every
/// Python object it still holds (release_all): whatever C++ keeps past that point (librmm's
/// per-device map, other libraries' statics) holds no Python object, and a resource whose
/// Python callables were let go raises MemoryError instead of calling them. A reference
/// that keeps memory valid (the owner of a memory pool that a C++ resource allocates from)
/// is let go only when what it owns in C++ can be kept without it.
class py_owned {
 public:
  py_owned() = default;
  /// `guards_memory`: the object keeps memory valid that C++ uses through this reference.
  explicit py_owned(nb::handle h, bool guards_memory = false) noexcept;
  py_owned(py_owned const&)            = delete;
  py_owned& operator=(py_owned const&) = delete;
  ~py_owned() { reset(); }

  void reset() noexcept;
  [[nodiscard]] nb::handle get() const noexcept { return ptr_; }

  /// Releases every listed reference (call with the GIL held, at interpreter exit). One
  /// that guards memory is released only when `keep(object)` kept that memory (in C++,
  /// past the object) and returned true; otherwise it stays.
  static void release_all(bool (*keep)(PyObject*) noexcept) noexcept;

 private:
  PyObject* ptr_{nullptr};
  bool guards_memory_{false};
  py_owned* prev_{nullptr};
  py_owned* next_{nullptr};
};

}  // namespace nbrmm
