// Arguments given from Python (see args.hpp).
#include "args.hpp"

#include <rmm/aligned.hpp>

#include <cctype>
#include <cmath>
#include <string>
#include <utility>

namespace nbrmm {
namespace {

[[noreturn]] void size_error(char const* param, std::string const& why)
{
  throw nb::value_error((std::string{param} + ": " + why).c_str());
}

std::size_t parse_size_string(std::string const& text, char const* param)
{
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) { ++i; }
  std::size_t const start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == start) { size_error(param, "cannot parse a size from '" + text + "'"); }
  double number = 0;
  try {
    number = std::stod(text.substr(start, i - start));
  } catch (std::exception const&) {
    size_error(param, "cannot parse a size from '" + text + "'");
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) { ++i; }
  std::string unit;
  for (; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) { break; }
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) { ++i; }
  if (i != text.size()) { size_error(param, "cannot parse a size from '" + text + "'"); }

  static std::pair<char const*, double> const units[] = {
    {"", 1.0},         {"b", 1.0},          {"k", 1e3},          {"kb", 1e3},
    {"m", 1e6},        {"mb", 1e6},         {"g", 1e9},          {"gb", 1e9},
    {"t", 1e12},       {"tb", 1e12},        {"p", 1e15},         {"pb", 1e15},
    {"ki", 1024.0},    {"kib", 1024.0},     {"mi", 1048576.0},   {"mib", 1048576.0},
    {"gi", 1073741824.0}, {"gib", 1073741824.0}, {"ti", 1099511627776.0},
    {"tib", 1099511627776.0}, {"pi", 1125899906842624.0}, {"pib", 1125899906842624.0},
  };
  for (auto const& [name, factor] : units) {
    if (unit == name) {
      double const value = std::floor(number * factor);
      if (!(value < 18446744073709551616.0)) {
        size_error(param, "'" + text + "' is too large");
      }
      return static_cast<std::size_t>(value);
    }
  }
  size_error(param, "unknown unit '" + unit + "' in '" + text + "'");
}

std::string type_of(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

}  // namespace

std::size_t parse_size(nb::handle obj, char const* param)
{
  if (PyLong_CheckExact(obj.ptr())) {
    int overflow      = 0;
    long long const v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
    if (overflow == 0 && v >= 0) { return static_cast<std::size_t>(v); }
  }
  if (PyBool_Check(obj.ptr())) {
    throw nb::type_error((std::string{param} + ": expected a size in bytes, got bool").c_str());
  }
  if (PyUnicode_Check(obj.ptr())) { return parse_size_string(nb::cast<std::string>(obj), param); }
  if (!PyIndex_Check(obj.ptr())) {
    throw nb::type_error((std::string{param} +
                          ": expected a size in bytes (int or str such as '1GiB'), got " +
                          type_of(obj))
                           .c_str());
  }
  nb::object index = nb::steal(PyNumber_Index(obj.ptr()));
  if (!index.is_valid()) { throw nb::python_error(); }
  if (PyObject_RichCompareBool(index.ptr(), nb::int_(0).ptr(), Py_LT) == 1) {
    size_error(param, "must be non-negative, got " + std::string{nb::str(index).c_str()});
  }
  auto const v = PyLong_AsUnsignedLongLong(index.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    size_error(param, std::string{nb::str(index).c_str()} + " bytes is too large");
  }
  return static_cast<std::size_t>(v);
}

std::optional<std::size_t> parse_optional_size(nb::handle obj, char const* param)
{
  if (obj.is_none()) { return std::nullopt; }
  return parse_size(obj, param);
}

void check_request(std::size_t bytes, std::size_t alignment, char const* param)
{
  // An alignment above librmm's 256 bytes is honoured by asking for alignment - 256 more.
  std::size_t const extra = alignment > default_alignment ? alignment - default_alignment : 0;
  if (bytes > max_request - extra) {
    throw rmm::bad_alloc{std::string{param} + ": cannot allocate " + std::to_string(bytes) +
                         " bytes: no resource can serve more than " +
                         std::to_string(max_request - extra) + " bytes" +
                         (extra != 0 ? " at this alignment" : "")};
  }
}

std::size_t request_size(nb::handle obj, char const* param, std::size_t alignment)
{
  std::size_t const bytes = parse_size(obj, param);
  check_request(bytes, alignment, param);
  return bytes;
}

std::size_t alignment_arg(nb::handle obj, char const* param)
{
  if (!PyLong_Check(obj.ptr()) || PyBool_Check(obj.ptr())) {
    throw nb::type_error((std::string{param} + ": expected an int (a power of two), got " +
                          type_of(obj))
                           .c_str());
  }
  int overflow      = 0;
  long long const v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
  if (overflow != 0 || v < 1 || v > static_cast<long long>(max_alignment) ||
      !rmm::is_pow2(static_cast<std::size_t>(v))) {
    if (overflow == 0 && v == -1 && PyErr_Occurred()) { throw nb::python_error(); }
    throw nb::value_error((std::string{param} + ": must be a power of two from 1 to 2**40, got " +
                           nb::str(obj).c_str())
                            .c_str());
  }
  return static_cast<std::size_t>(v);
}

bool bool_arg(nb::handle obj, char const* param)
{
  if (!PyBool_Check(obj.ptr())) {
    throw nb::type_error((std::string{param} + ": expected a bool, got " + type_of(obj)).c_str());
  }
  return obj.ptr() == Py_True;
}

}  // namespace nbrmm
