// Arguments given from Python (see args.hpp).
#include "core/args.hpp"

#include "core/rmm_compat.hpp"

#include <rmm/aligned.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nbrmm {
namespace {

/// The size a string such as "1.5 GiB" gives, with rmm's grammar (rmm.pylibrmm.helper):
/// digits with an optional fraction, optional spaces or tabs, and an optional
/// case-insensitive unit: B, kB ... PB (powers of 1000) or KiB ... PiB (powers of 1024).
std::size_t parse_size_string(std::string const& text, char const* param)
{
  auto fail = [&]() {
    throw nb::value_error((std::string{param} + ": Could not parse '" + text +
                           "' as a byte specification (a number and an optional unit such "
                           "as B, kB, MB, KiB, MiB or GiB)")
                            .c_str());
  };
  auto digit      = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i   = 0;
  std::size_t end = text.size();
  if (end != 0 && text[end - 1] == '\n') { --end; }  // as Python's re `$` allows
  while (i < end && digit(text[i])) { ++i; }
  if (i == 0) { fail(); }
  if (i < end && text[i] == '.') {
    ++i;
    while (i < end && digit(text[i])) { ++i; }
  }
  double number = 0;
  auto const [last, ec] = std::from_chars(text.data(), text.data() + i, number);
  if (last != text.data() + i) { fail(); }
  if (ec == std::errc::result_out_of_range) {
    // Too many digits for a double: too large when a digit before the point is not 0
    // (rmm's float() gives inf there, and int() raises OverflowError), else too small to
    // be a byte (0).
    std::size_t const point = std::min(text.find('.'), i);
    number = text.find_first_not_of('0') < point ? HUGE_VAL : 0.0;
  } else if (ec != std::errc{}) {
    fail();
  }
  while (i < end && (text[i] == ' ' || text[i] == '\t')) { ++i; }
  std::string unit;
  for (; i < end; ++i) { unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))); }

  static std::pair<char const*, double> const units[] = {
    {"", 1.0},      {"b", 1.0},           {"kb", 1e3},           {"mb", 1e6},
    {"gb", 1e9},    {"tb", 1e12},         {"pb", 1e15},          {"kib", 1024.0},
    {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
    {"pib", 1125899906842624.0},
  };
  for (auto const& [name, factor] : units) {
    if (unit == name) {
      double const value = std::floor(number * factor);
      if (!(value < 18446744073709551616.0)) {
        throw_range_error(std::string{param} + ": '" + text + "' is 2**64 bytes or more");
      }
      return static_cast<std::size_t>(value);
    }
  }
  fail();
  return 0;  // not reached
}

}  // namespace

std::string utf8(nb::handle obj)
{
  nb::object text = PyUnicode_Check(obj.ptr()) ? nb::borrow(obj) : nb::steal(PyObject_Str(obj.ptr()));
  PyObject* bytes =
    text.is_valid() ? PyUnicode_AsEncodedString(text.ptr(), "utf-8", "backslashreplace") : nullptr;
  if (bytes == nullptr) {
    PyErr_Clear();
    return "<unprintable>";
  }
  std::string out{PyBytes_AsString(bytes), static_cast<std::size_t>(PyBytes_Size(bytes))};
  Py_DECREF(bytes);
  return out;
}

namespace {
/// The storage of the objects whose `__init__` runs. Never destroyed (used at exit); the
/// GIL guards it where it is enabled, a mutex in free-threaded builds.
std::vector<void const*>& initializing()
{
  static auto* storages = new std::vector<void const*>{};
  return *storages;
}

class initializing_lock {
#if defined(Py_GIL_DISABLED)
  static std::mutex& mutex()
  {
    static auto* m = new std::mutex;
    return *m;
  }
  std::lock_guard<std::mutex> lock_{mutex()};
#endif
};
}  // namespace

init_guard::init_guard(void const* storage) : storage_{storage}
{
  initializing_lock const lock;
  auto& running = initializing();
  if (std::find(running.begin(), running.end(), storage) != running.end()) {
    throw nb::type_error(
      "__init__: it is already running for this object (called again from a callback it "
      "runs, or from another thread); an object is initialized once");
  }
  running.push_back(storage);
}

init_guard::~init_guard()
{
  initializing_lock const lock;
  auto& running = initializing();
  running.erase(std::find(running.begin(), running.end(), storage_));
}

void throw_not_initialized(nb::handle self, char const* member, bool property)
{
  std::string const type = utf8(nb::type_name(self.type()));
  // (the article as nbrmm._call_errors writes it)
  bool const an = type.rfind("nbrmm", 0) == 0 ||
                  std::string_view{"aeioAEIO"}.find(type[0]) != std::string_view::npos;
  std::string const title = utf8(self.type().attr("__qualname__")) + "." + member +
                            (property ? ": read from " : "(): called on ") + (an ? "an " : "a ");
  throw nb::type_error((title + type + not_initialized_note).c_str());
}

nb::object optional_attr(nb::handle obj, char const* name)
{
  PyObject* value = PyObject_GetAttrString(obj.ptr(), name);
  if (value != nullptr) { return nb::steal(value); }
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) { throw nb::python_error(); }
  PyErr_Clear();
  return {};
}

std::string type_of(nb::handle obj, nb::handle expected)
{
  if (obj.is_none()) { return "None"; }
  if (!PyType_Check(obj.ptr())) {
    std::string name = utf8(nb::type_name(obj.type()));
    if (nb::inst_check(obj) && !nb::inst_ready(obj)) { name += not_initialized_note; }
    return name;
  }
  // The class is the caller's: what it says of itself may be anything, or raise.
  nb::object const qualname = nb::getattr(obj, "__qualname__", nb::none());
  std::string const name    = PyUnicode_Check(qualname.ptr()) != 0 ? utf8(qualname)
                                                                      : utf8(nb::type_name(obj));
  std::string text = "the class " + name;
  if (expected.is_valid()) {
    int const derived = PyObject_IsSubclass(obj.ptr(), expected.ptr());
    if (derived < 0) { PyErr_Clear(); }
    if (derived == 1) {
      // An enum names its first member; any other class (or a __members__ that yields
      // nothing, or not a str) gets an instance.
      std::string member;
      nb::object const members = nb::getattr(obj, "__members__", nb::none());
      if (!members.is_none()) {
        nb::object const names = nb::steal(PyObject_GetIter(members.ptr()));
        nb::object const first = names.is_valid() ? nb::steal(PyIter_Next(names.ptr())) : nb::object{};
        if (first.is_valid() && PyUnicode_Check(first.ptr()) != 0) { member = utf8(first); }
        PyErr_Clear();
      }
      text += member.empty() ? "; pass an instance, e.g. " + name + "(...)"
                             : "; pass a member, e.g. " + name + "." + member;
    }
  }
  return text;
}

std::size_t parse_size(nb::handle obj, char const* param)
{
  if (PyLong_CheckExact(obj.ptr())) {
    int overflow      = 0;
    long long const v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
    if (overflow == 0 && v >= 0) { return static_cast<std::size_t>(v); }
  }
  if (PyUnicode_Check(obj.ptr())) { return parse_size_string(utf8(obj), param); }
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) {
    throw nb::type_error((std::string{param} +
                          ": expected a size in bytes (int or str such as '1GiB'), got " +
                          type_of(obj))
                           .c_str());
  }
  return uint_arg(obj, param);  // negative or too large: ArgumentRangeError
}

std::optional<std::size_t> parse_optional_size(nb::handle obj, char const* param)
{
  if (obj.is_none()) { return std::nullopt; }
  return parse_size(obj, param);
}

void detail::refuse_request(std::size_t bytes, std::size_t alignment, char const* param)
{
  std::size_t const extra = alignment > default_alignment ? alignment - default_alignment : 0;
  throw rmm::bad_alloc{std::string{param} + ": cannot allocate " + std::to_string(bytes) +
                       " bytes: no resource can serve more than " +
                       std::to_string(max_request - extra) + " bytes" +
                       (extra != 0 ? " at this alignment" : "")};
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
                           utf8(obj))
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
