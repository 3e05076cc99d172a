// Argument checks whose exceptions are instances of what rmm raises for the same input
// (see docs/differences.md): nbrmm checks before calling librmm and names the parameter,
// and the exception is also of the class that rmm's Cython conversion or librmm's own
// check raises.
#pragma once

#include "core/common.hpp"

#include <cstdint>
#include <string>

namespace nbrmm {

/// Raises nbrmm.ArgumentRangeError (a ValueError and an OverflowError): an integer
/// argument is outside the range it may take (rmm's conversion to a C integer raises
/// OverflowError for such values).
[[noreturn]] void throw_range_error(std::string const& message);

/// Raises nbrmm.InvalidArgumentError (a ValueError and a RuntimeError): an argument that
/// librmm or CUDA would reject at run time (rmm raises RuntimeError for those).
[[noreturn]] void throw_invalid_argument(std::string const& message);

/// nbrmm.InvalidArgumentError (borrowed), to raise from code that sets Python errors.
PyObject* invalid_argument_type() noexcept;

/// Raises nbrmm.FileOpenError (an OSError and a RuntimeError): a file librmm was asked to
/// open could not be opened (rmm raises RuntimeError for that).
[[noreturn]] void throw_file_open_error(std::string const& message);

/// An unsigned 64-bit integer argument (a pointer, a count, an index): any int-like
/// object except bool. Raises TypeError for other types and ArgumentRangeError for
/// negative values or values of 2**64 and more; messages name `param`.
std::uint64_t uint_arg(nb::handle obj, char const* param);

/// A C `int` argument (a device id, by default): any int-like object except bool. Raises
/// TypeError for other types and ArgumentRangeError outside the range of `int` ("out of
/// range for `what`").
int int_arg(nb::handle obj, char const* param, char const* what = "a device id");

/// Stream creation flags: None (sync_default), a CudaStreamFlags member or its int
/// value. Raises TypeError for other types and InvalidArgumentError for other ints.
rmm::cuda_stream::flags stream_flags_arg(nb::handle obj, char const* param);

}  // namespace nbrmm
