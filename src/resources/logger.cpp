// librmm's debug logger (rmm/logger.hpp, a rapids_logger::logger): its level, its flush
// level and flushing. This is the logger of librmm's own diagnostics (RMM_LOG_* macros),
// written to stderr or to the file named by the environment variable RMM_DEBUG_LOG_FILE;
// the per-allocation CSV log is LoggingResourceAdaptor's.
#include "bindings.hpp"
#include "core/args.hpp"
#include "core/gil.hpp"
#include "resources/per_device_map.hpp"

#include <rmm/logger.hpp>

#include <vector>

namespace nbrmm {

void bind_logger(nb::module_& m)
{
  using rapids_logger::level_enum;

  nb::enum_<level_enum>(m, "level_enum", nb::is_arithmetic(), R"doc(
Severity levels of librmm's debug logger, from the most verbose to ``off``.

An ``IntEnum``: levels compare by severity (``level_enum.debug < level_enum.warn``).)doc")
    .value("trace", level_enum::trace, "Most verbose: every traced event.")
    .value("debug", level_enum::debug, "Debugging messages.")
    .value("info", level_enum::info, "Informational messages.")
    .value("warn", level_enum::warn, "Warnings.")
    .value("error", level_enum::error, "Errors.")
    .value("critical", level_enum::critical, "Critical errors.")
    .value("off", level_enum::off, "Nothing is logged.")
    .value("n_levels", level_enum::n_levels,
           "Not a level: the number of levels (rmm exposes it too; as a logging level it "
           "silences the logger like ``off``).");

  // rmm accepts only level_enum members (an int raises TypeError); so does nbrmm.
  auto level_arg = [](nb::handle level) {
    // (the object's own type: a __class__ that claims the enum is no member)
    if (PyObject_TypeCheck(level.ptr(),
                           reinterpret_cast<PyTypeObject*>(nb::type<level_enum>().ptr())) == 0) {
      throw nb::type_error(("level: must be an instance of level_enum, got " +
                            type_of(level, nb::type<level_enum>()))
                             .c_str());
    }
    return nb::cast<level_enum>(level);
  };

  m.def(
    "should_log",
    [level_arg](nb::handle level) { return rmm::default_logger().should_log(level_arg(level)); },
    nb::arg("level").none(),
    nb::sig("def should_log(level: level_enum) -> bool"), R"doc(Whether librmm's debug logger writes messages of ``level``.

Parameters
----------
level : level_enum
    The severity of a message.

Returns
-------
bool
    True when ``level`` is at or above the logging level (see :func:`set_logging_level`).

Raises
------
TypeError
    If ``level`` is not a ``level_enum`` member (an int is refused, as in rmm).)doc");

  m.def(
    "set_logging_level",
    [level_arg](nb::handle level) { rmm::default_logger().set_level(level_arg(level)); },
    nb::arg("level").none(),
    nb::sig("def set_logging_level(level: level_enum) -> None"), R"doc(Set the least severe level that librmm's debug logger writes.

Messages below ``level`` are dropped; ``level_enum.off`` silences the logger. Note that
librmm is compiled with a minimum level: messages below it are never produced at all.

Parameters
----------
level : level_enum
    The new logging level.

Raises
------
TypeError
    If ``level`` is not a ``level_enum`` member (an int is refused, as in rmm).)doc");

  m.def(
    "get_logging_level", []() { return rmm::default_logger().level(); },
    R"doc(The least severe level that librmm's debug logger writes.

Returns
-------
level_enum
    The logging level.)doc");

  m.def(
    "flush_logger",
    []() {
      gil_release release;
      rmm::default_logger().flush();
    },
    "Write out every message that librmm's debug logger has buffered.");

  // For enable_logging()/disable_logging(), which act on every device that has a resource.
  m.def(
    "_devices_with_resource",
    []() { return device_map::devices(); },
    "The devices that have an entry in librmm's per-device resource map, in order.");

  m.def(
    "set_flush_level",
    [level_arg](nb::handle level) { rmm::default_logger().flush_on(level_arg(level)); },
    nb::arg("level").none(),
    nb::sig("def set_flush_level(level: level_enum) -> None"), R"doc(Flush librmm's debug logger after every message of ``level`` or above.

Parameters
----------
level : level_enum
    The flush level.

Raises
------
TypeError
    If ``level`` is not a ``level_enum`` member (an int is refused, as in rmm).)doc");

  m.def(
    "get_flush_level", []() { return rmm::default_logger().flush_level(); },
    R"doc(The level at or above which librmm's debug logger flushes after each message.

Returns
-------
level_enum
    The flush level.)doc");
}

}  // namespace nbrmm
