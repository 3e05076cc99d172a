// Arguments: sizes, alignments and flags given from Python, checked before librmm sees them.
#pragma once

#include "core/common.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace nbrmm {

/// The largest request nbrmm passes to a resource: the largest object size C++ allows.
/// Larger requests cannot be served by any resource, and would wrap around when librmm
/// rounds them up to its alignment.
inline constexpr std::size_t max_request = static_cast<std::size_t>(PTRDIFF_MAX);

/// The largest alignment nbrmm honours (an allocation with a larger one would waste
/// more than a terabyte).
inline constexpr std::size_t max_alignment = std::size_t{1} << 40;

/// `obj` as UTF-8 text for a message or a name: a str as it is, with lone surrogates
/// escaped (\\udcxx), anything else as its str(); never fails ("<unprintable>").
std::string utf8(nb::handle obj);

/// What follows the type's name for an instance of an nbrmm class whose `__init__` never
/// ran (typically a subclass whose `__init__` does not call the base class's).
inline constexpr char not_initialized_note[] =
  " that is not initialized (its __init__ did not run; a subclass's __init__ must call "
  "super().__init__())";

/// Raises the TypeError for the method (or, with `property`, the property) `member` of
/// `self`, an instance whose `__init__` never ran: "CudaStreamPool.get_stream(): called on
/// an nbrmm.CudaStreamPool that is not initialized (...)".
[[noreturn]] void throw_not_initialized(nb::handle self, char const* member, bool property = false);

/// Held by every `__init__` while it runs: a second `__init__` of the same object, called
/// from a callback the first one runs or from another thread while the first waits without
/// the GIL, would construct into the same storage; it raises TypeError instead.
class init_guard {
 public:
  explicit init_guard(void const* storage);
  init_guard(init_guard const&)            = delete;
  init_guard& operator=(init_guard const&) = delete;
  ~init_guard();

 private:
  void const* storage_;
};

/// The C++ object of `self`, an instance of `T` taken as a handle by the method (or
/// property) `member`; the TypeError of `throw_not_initialized` if its `__init__` never ran.
template <class T>
T& initialized(nb::handle self, char const* member, bool property = false)
{
  if (!nb::inst_ready(self)) { throw_not_initialized(self, member, property); }
  return *nb::inst_ptr<T>(self);
}

/// The getter of the property `name` of class `T`: `get` on the `initialized` object
/// (nanobind would refuse an uninitialized one with a warning and a message of its own).
template <class T, class Get>
auto getter(char const* name, Get get)
{
  return [name, get](nb::handle_t<T> self) { return get(initialized<T>(self, name, true)); };
}

/// The method `name` of class `T`: `f(self, args...)` on the `initialized` object. nanobind
/// takes `self` as a handle, so an uninitialized one gets nbrmm's message rather than a
/// warning of the binding layer followed by its own.
template <class T, class F, class R, class Self, class... Args>
auto method_of(char const* name, F f, R (F::*)(Self, Args...) const)
{
  return [name, f](nb::handle_t<T> self, Args... args) -> R {
    return f(initialized<T>(self, name), std::forward<Args>(args)...);
  };
}

template <class T, class F>
auto method(char const* name, F f)
{
  return method_of<T>(name, std::move(f), &F::operator());
}

/// The same for a function: wrapped in a lambda, so that one wrapper serves both.
template <class T, class R, class Self, class... Args>
auto method(char const* name, R (*f)(Self, Args...))
{
  return method<T>(name, [f](Self self, Args... args) -> R {
    return f(self, std::forward<Args>(args)...);
  });
}

/// What `obj` is, for messages "expected ..., got <this>": None, the name of its type (with
/// `not_initialized_note` for an uninitialized nbrmm instance), or, for a class, "the class
/// X", followed by "; pass an instance, e.g. X(...)" when X is `expected` or derives from it
/// (or "pass a member" for an enum).
std::string type_of(nb::handle obj, nb::handle expected = nb::handle{});

/// The attribute `name` of another library's object, or an empty object when it has none
/// (AttributeError), as Python's hasattr decides: any other exception its getter raises
/// propagates (a failing property is not a missing one).
nb::object optional_attr(nb::handle obj, char const* name);

/// Parses a size argument: a non-negative int or a string such as "1GiB". Raises
/// TypeError/ValueError naming `param`.
std::size_t parse_size(nb::handle obj, char const* param);

/// Parses an optional size argument (None stays empty).
std::optional<std::size_t> parse_optional_size(nb::handle obj, char const* param);

namespace detail {
[[noreturn]] void refuse_request(std::size_t bytes, std::size_t alignment, char const* param);
}  // namespace detail

/// Raises nbrmm.BadAlloc (a MemoryError) naming `param` when no resource can serve a
/// request of `bytes` bytes with `alignment`.
inline void check_request(std::size_t bytes, std::size_t alignment, char const* param)
{
  // An alignment above librmm's 256 bytes is honoured by asking for alignment - 256 more.
  std::size_t const extra = alignment > default_alignment ? alignment - default_alignment : 0;
  if (bytes > max_request - extra) [[unlikely]] { detail::refuse_request(bytes, alignment, param); }
}

/// Parses the size of an allocation (parse_size, then check_request with `alignment`).
inline std::size_t request_size(nb::handle obj, char const* param,
                                std::size_t alignment = default_alignment)
{
  std::size_t const bytes = parse_size(obj, param);
  check_request(bytes, alignment, param);
  return bytes;
}

/// Parses an alignment: a power of two from 1 to max_alignment, given as an int. Raises
/// TypeError/ValueError naming `param`.
std::size_t alignment_arg(nb::handle obj, char const* param = "alignment");

/// Raises TypeError naming `param` unless `obj` is a real bool (no silent truthiness).
bool bool_arg(nb::handle obj, char const* param);

}  // namespace nbrmm
