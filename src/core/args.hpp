// Arguments: sizes, alignments and flags given from Python, checked before librmm sees them.
#pragma once

#include "common.hpp"

#include <cstdint>
#include <optional>

namespace nbrmm {

/// The largest request nbrmm passes to a resource: the largest object size C++ allows.
/// Larger requests cannot be served by any resource, and would wrap around when librmm
/// rounds them up to its alignment.
inline constexpr std::size_t max_request = static_cast<std::size_t>(PTRDIFF_MAX);

/// The largest alignment nbrmm honours (an allocation with a larger one would waste
/// more than a terabyte).
inline constexpr std::size_t max_alignment = std::size_t{1} << 40;

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
  std::size_t bytes = 0;
  if (PyLong_CheckExact(obj.ptr())) {  // the common case: a non-negative int in range
    int overflow      = 0;
    long long const v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
    bytes = overflow == 0 && v >= 0 ? static_cast<std::size_t>(v) : parse_size(obj, param);
  } else {
    bytes = parse_size(obj, param);
  }
  check_request(bytes, alignment, param);
  return bytes;
}

/// Parses an alignment: a power of two from 1 to max_alignment, given as an int. Raises
/// TypeError/ValueError naming `param`.
std::size_t alignment_arg(nb::handle obj, char const* param = "alignment");

/// Raises TypeError naming `param` unless `obj` is a real bool (no silent truthiness).
bool bool_arg(nb::handle obj, char const* param);

/// The parameters of a function called through vectorcall: their names (interned), of
/// which the first `positional` may be given by position and the rest only by keyword.
struct parameters {
  char const* function;  ///< the name errors give, e.g. "Buffer"
  PyObject* const* names;
  int count;
  int positional;
};

/// The common call, sorted inline: the first `params.positional` parameters given by
/// position and every other by keyword, in order, each keyword the interned name itself.
/// Fills every slot and returns true then; false (nothing set) for any other call.
inline bool sort_common_call(parameters const& params, PyObject* const* args,
                             std::size_t nargsf, PyObject* kwnames, PyObject** slots) noexcept
{
  if (PyVectorcall_NARGS(nargsf) != params.positional || kwnames == nullptr ||
      PyTuple_GET_SIZE(kwnames) != params.count - params.positional) {
    return false;
  }
  for (int i = params.positional; i < params.count; ++i) {
    if (PyTuple_GET_ITEM(kwnames, i - params.positional) != params.names[i]) { return false; }
  }
  for (int i = 0; i < params.count; ++i) { slots[i] = args[i]; }
  return true;
}

/// Sorts a vectorcall's arguments into `slots` (one per parameter, in order; those not
/// given stay null). Returns false with a TypeError set, as Python words it, for too many
/// positional arguments or an unknown or repeated keyword (a MemoryError where a name in
/// `params` is null: interning it failed).
bool sort_arguments(parameters const& params, PyObject* const* args, std::size_t nargsf,
                    PyObject* kwnames, PyObject** slots) noexcept;

}  // namespace nbrmm
