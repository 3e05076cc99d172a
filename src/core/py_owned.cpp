// Python objects owned by C++ (see py_owned.hpp).
#include "core/py_owned.hpp"

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
