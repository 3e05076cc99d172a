// Calls that do not match a binding: a TypeError in Python's words, naming the argument at
// fault, instead of nanobind's list of "incompatible function arguments".
//
// nanobind raises its own message when no overload of a function accepts a call, and
// offers no hook for it. So every public function of the module, and every public method,
// static method and special method (but the comparisons) of its public classes, `__init__`
// included, gets one more overload, added here
// once every binding is made: a catch-all that takes any arguments and raises the
// TypeError that `nbrmm._call_errors` writes from the first overload's signature (a
// missing or unexpected argument, None where it is not allowed, a wrong type or a class
// where an instance is expected).
//
// nanobind dispatches a function with several overloads in two passes: the first without
// implicit conversions, the second with them. The catch-all must not answer a call in the
// first pass, which the real overload may still accept with conversions (a NumPy integer
// for an `int`), so it has a keyword-only parameter, never passed, whose caster accepts its
// default only in the second pass.
//
// Its signature, which nanobind shows in `__doc__` under the real one, reads
// `name(...): other arguments raise TypeError naming the one at fault` (`catch_all_note`
// after the name, published as `_nbrmm._CATCH_ALL_NOTE`): a line that is no Python
// signature, which `scripts/stubgen.py` and the documentation's `conf.py` leave out. It
// carries the real overload's docstring, so that `__doc__` keeps that one alone.
//
// `nbrmm._call_errors` is imported only when a call is refused: importing nbrmm does not
// pay for it.
#include "bindings.hpp"
#include "core/args.hpp"

#include <string>
#include <utility>
#include <vector>

namespace nbrmm {
namespace {

/// The type of the catch-all's marker parameter (see the comment at the top).
struct second_pass {};

/// What the catch-all's signature line says after the callable's name.
constexpr char catch_all_note[] = "(...): other arguments raise TypeError naming the one at fault";

}  // namespace
}  // namespace nbrmm

namespace nanobind::detail {

template <>
struct type_caster<nbrmm::second_pass> {
  NB_TYPE_CASTER(nbrmm::second_pass, const_name("object"))
  bool from_python(handle, uint32_t flags, cleanup_list*) noexcept
  {
    return (flags & static_cast<uint32_t>(cast_flags::convert)) != 0;
  }
};

}  // namespace nanobind::detail

namespace nbrmm {
namespace {

/// How the catch-all is called: as a function of the module, a method or a static method.
enum class callable_kind { function, method, static_method };

char const* kind_name(callable_kind kind)
{
  switch (kind) {
    case callable_kind::method: return "method";
    case callable_kind::static_method: return "staticmethod";
    default: return "function";
  }
}

/// `nbrmm._call_errors`: as imported before, when it was (interpreter exit takes the import
/// system away before the modules), else imported now; null when neither can be had.
nb::object call_errors_module()
{
  PyObject* module = PyImport_GetModule(nb::str("nbrmm._call_errors").ptr());
  if (module == nullptr) {
    PyErr_Clear();
    module = PyImport_ImportModule("nbrmm._call_errors");
    if (module == nullptr) { PyErr_Clear(); }
  }
  return nb::steal(module);
}

/// Adds the catch-all overload to `scope.name`, a nanobind function (see the top).
void add_catch_all(nb::handle scope, std::string const& name, callable_kind kind,
                   std::string const& note)
{
  nb::object const existing = nb::getattr(scope, name.c_str());
  // The real overload's docstring, so that the chain's docstring stays that one.
  nb::object const first = nb::borrow<nb::tuple>(existing.attr("__nb_signature__"))[0];
  nb::handle const doc   = nb::borrow<nb::tuple>(first)[1];
  std::string const doc_text = doc.is_none() ? std::string{} : nb::cast<std::string>(doc);
  std::string const signature = "def " + name + note;
  char const* const kind_text = kind_name(kind);

  auto report = [scope, name, kind_text](nb::args args, second_pass, nb::kwargs kwargs) -> nb::object {
    // Whether a method's `self` is an initialized instance (Python cannot tell): nanobind
    // refuses an uninitialized one, and an initialized one for `__init__`.
    nb::object ready = nb::none();
    if (nb::len(args) > 0 && nb::inst_check(args[0])) { ready = nb::bool_(nb::inst_ready(args[0])); }
    // The arguments that are uninitialized instances (nanobind refuses them too).
    nb::list unready;
    auto note_unready = [&unready](nb::handle value) {
      if (nb::inst_check(value) && !nb::inst_ready(value)) { unready.append(value); }
    };
    for (nb::handle value : args) { note_unready(value); }
    for (auto [key, value] : kwargs) { note_unready(value); }
    nb::object const module = call_errors_module();
    if (!module.is_valid()) {  // late at interpreter exit: no import system, no module
      throw nb::type_error((name + ": the arguments do not match its parameters").c_str());
    }
    nb::object const message =
      module.attr("call_error")(scope, name, kind_text, args, kwargs, ready, unready);
    throw nb::type_error(utf8(message).c_str());
  };
  // A method's `self` is the first of `args` (nanobind gives it no annotation).
  auto const marker = nb::arg("_nbrmm_second_pass").none() = nb::none();
  if (kind == callable_kind::method) {
    nb::cpp_function_def(std::move(report), nb::scope(scope), nb::name(name.c_str()),
                         nb::is_method(), marker, nb::arg("kwargs"),
                         nb::sig(signature.c_str()), doc_text.c_str());
  } else {
    nb::cpp_function_def(std::move(report), nb::scope(scope), nb::name(name.c_str()),
                         nb::arg("args"), marker, nb::arg("kwargs"),
                         nb::sig(signature.c_str()), doc_text.c_str());
  }
}

bool is_function(nb::handle obj)
{
  return !PyType_Check(obj.ptr()) && nb::hasattr(obj, "__nb_signature__");
}

/// Whether a class attribute is a method (rather than a static method): nanobind's methods
/// are descriptors, its functions are not.
bool is_method(nb::handle obj) { return nb::hasattr(obj.type(), "__get__"); }

bool is_public(std::string const& name) { return name.empty() || name[0] != '_'; }

/// Whether a class's method gets the catch-all: a public one, `__init__`, and the other
/// special methods (an uninitialized `self` is refused by them too) except the
/// comparisons, whose refusal is NotImplemented (Python then tries the other operand).
bool gets_catch_all(std::string const& name)
{
  if (is_public(name)) { return true; }
  bool const special = name.size() > 4 && name.rfind("__", 0) == 0 &&
                       name.compare(name.size() - 2, 2, "__") == 0;
  for (char const* comparison : {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}) {
    if (name == comparison) { return false; }
  }
  return special;
}

}  // namespace

void add_call_errors(nb::module_& m)
{
  nb::object const enum_type = nb::module_::import_("enum").attr("Enum");
  std::string const note{catch_all_note};
  m.attr("_CATCH_ALL_NOTE")       = note;
  m.attr("_NOT_INITIALIZED_NOTE") = not_initialized_note;
  std::vector<std::pair<nb::object, std::string>> functions;
  std::vector<std::pair<nb::object, std::string>> methods;
  std::vector<std::pair<nb::object, std::string>> static_methods;
  for (auto [key, value] : nb::borrow<nb::dict>(m.attr("__dict__"))) {
    std::string const name = nb::cast<std::string>(key);
    if (!is_public(name)) { continue; }
    if (is_function(value)) {
      functions.emplace_back(m, name);
      continue;
    }
    if (!nb::type_check(value) || PyObject_IsSubclass(value.ptr(), enum_type.ptr()) == 1) {
      continue;
    }
    // A class's __dict__ is a read-only proxy: iterate over a copy.
    nb::dict members;
    if (PyDict_Update(members.ptr(), value.attr("__dict__").ptr()) != 0) { throw nb::python_error(); }
    for (auto [attr, member] : members) {
      std::string const member_name = nb::cast<std::string>(attr);
      if (!gets_catch_all(member_name) || !is_function(member)) {
        continue;
      }
      (is_method(member) ? methods : static_methods).emplace_back(nb::borrow(value), member_name);
    }
  }
  for (auto& [scope, name] : functions) { add_catch_all(scope, name, callable_kind::function, note); }
  for (auto& [scope, name] : methods) { add_catch_all(scope, name, callable_kind::method, note); }
  for (auto& [scope, name] : static_methods) {
    add_catch_all(scope, name, callable_kind::static_method, note);
  }
}

}  // namespace nbrmm
