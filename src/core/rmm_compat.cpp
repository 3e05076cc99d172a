// Exceptions that are instances of both nbrmm's precise class and the class rmm raises
// for the same input, the argument checks that raise them, and the helpers behind
// nbrmm.pylibrmm.helper.parse_bytes (nbrmm.pylibrmm.utils.as_stream's is in cuda_stream.cpp).
#include "core/rmm_compat.hpp"

#include "core/args.hpp"
#include "bindings.hpp"

#include <limits>
#include <string>

namespace nbrmm {
namespace {

PyObject* range_error   = nullptr;  // nbrmm.ArgumentRangeError (owned by the module)
PyObject* invalid_error = nullptr;  // nbrmm.InvalidArgumentError (owned by the module)
PyObject* file_error    = nullptr;  // nbrmm.FileOpenError (owned by the module)

/// A new exception class `nbrmm._nbrmm.<name>` deriving from `first` and `second`, set as
/// `m.<name>`; returns it (borrowed from the module).
PyObject* add_exception(nb::module_& m,
                        char const* name,
                        char const* doc,
                        PyObject* first,
                        PyObject* second)
{
  nb::object bases = nb::make_tuple(nb::handle{first}, nb::handle{second});
  std::string const qualified = std::string{"nbrmm._nbrmm."} + name;
  nb::object cls = nb::steal(
    PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr));
  if (!cls.is_valid()) { throw nb::python_error(); }
  m.attr(name) = cls;
  return cls.ptr();
}

[[noreturn]] void raise(PyObject* cls, std::string const& message)
{
  PyErr_SetString(cls, message.c_str());
  throw nb::python_error();
}

}  // namespace

void throw_range_error(std::string const& message) { raise(range_error, message); }

void throw_invalid_argument(std::string const& message) { raise(invalid_error, message); }

PyObject* invalid_argument_type() noexcept { return invalid_error; }

void throw_file_open_error(std::string const& message) { raise(file_error, message); }

namespace {

/// `obj` as a Python int: any int-like object except bool (TypeError naming `param`).
nb::object int_object(nb::handle obj, char const* param)
{
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) {
    throw nb::type_error(
      (std::string{param} + ": expected an int, got " + type_of(obj))
        .c_str());
  }
  nb::object index = nb::steal(PyNumber_Index(obj.ptr()));
  if (!index.is_valid()) { throw nb::python_error(); }
  return index;
}

}  // namespace

std::uint64_t uint_arg(nb::handle obj, char const* param)
{
  if (PyLong_CheckExact(obj.ptr())) {
    int overflow      = 0;
    long long const v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
    if (overflow == 0 && v >= 0) { return static_cast<std::uint64_t>(v); }
  }
  nb::object const index = int_object(obj, param);
  if (PyObject_RichCompareBool(index.ptr(), nb::int_(0).ptr(), Py_LT) == 1) {
    throw_range_error(std::string{param} + ": must be non-negative, got " +
                      utf8(index));
  }
  auto const v = PyLong_AsUnsignedLongLong(index.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw_range_error(std::string{param} + ": " + utf8(index) +
                      " does not fit in 64 bits");
  }
  return static_cast<std::uint64_t>(v);
}

int int_arg(nb::handle obj, char const* param, char const* what)
{
  nb::object const index = int_object(obj, param);
  int overflow           = 0;
  long long const v      = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0 || v < std::numeric_limits<int>::min() ||
      v > std::numeric_limits<int>::max()) {
    throw_range_error(std::string{param} + ": " + utf8(index) +
                      " is out of range for " + what);
  }
  return static_cast<int>(v);
}

rmm::cuda_stream::flags stream_flags_arg(nb::handle obj, char const* param)
{
  using flags = rmm::cuda_stream::flags;
  if (obj.is_none()) { return flags::sync_default; }
  nb::handle const enum_type = nb::type<flags>();
  // (the object's own type: a __class__ that claims the enum is no member)
  if (PyObject_TypeCheck(obj.ptr(), reinterpret_cast<PyTypeObject*>(enum_type.ptr())) != 0) {
    return nb::cast<flags>(obj);
  }
  if (PyLong_Check(obj.ptr()) && !PyBool_Check(obj.ptr())) {
    int overflow = 0;
    long long const v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
    if (overflow == 0 && (v == static_cast<long long>(flags::sync_default) ||
                          v == static_cast<long long>(flags::non_blocking))) {
      return static_cast<flags>(v);
    }
    throw_invalid_argument(std::string{param} + ": " + utf8(obj) +
                           " is not a CudaStreamFlags value");
  }
  throw nb::type_error((std::string{param} + ": expected a CudaStreamFlags, got " +
                        type_of(obj, enum_type))
                         .c_str());
}

void bind_rmm_compat(nb::module_& m)
{
  range_error = add_exception(
    m, "ArgumentRangeError",
    "An integer argument is out of range: a negative size, a size or pointer of 2**64 or "
    "more, an exponent outside the accepted interval.\n\nA ``ValueError``, and an "
    "``OverflowError`` as rmm raises for such values.",
    PyExc_ValueError, PyExc_OverflowError);
  invalid_error = add_exception(
    m, "InvalidArgumentError",
    "An argument that librmm or CUDA would reject, checked before the call (pool sizes "
    "that are not multiples of 256 or exceed the maximum, an empty stream pool, unknown "
    "stream flags or devices, pointers CUDA does not know).\n\nA ``ValueError``, and a "
    "``RuntimeError`` as rmm raises for such arguments.",
    PyExc_ValueError, PyExc_RuntimeError);
  file_error = add_exception(
    m, "FileOpenError",
    "A file could not be opened (a log file of ``LoggingResourceAdaptor``).\n\nAn "
    "``OSError``, and a ``RuntimeError`` as rmm raises.",
    PyExc_OSError, PyExc_RuntimeError);

  m.def(
    "_parse_size", [](nb::handle s, char const* param) { return parse_size(s, param); },
    nb::arg("s").none(), nb::arg("param") = "s",
    nb::sig("def _parse_size(s: int | str, param: str = 's') -> int"),
    "A size argument as nbrmm reads it (int, or a string such as '1.5 GiB').");
}

}  // namespace nbrmm
