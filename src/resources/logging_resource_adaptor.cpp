// nbrmm.mr.LoggingResourceAdaptor (rmm/mr/logging_resource_adaptor.hpp): writes every
// allocation and free to a CSV file.
#include "resources/adaptor.hpp"
#include "core/rmm_compat.hpp"

#include <rmm/mr/logging_resource_adaptor.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace nbrmm {
namespace {

using logging_adaptor = rmm::mr::logging_resource_adaptor;

struct LoggingResourceAdaptor : UpstreamResourceAdaptor {
  std::optional<std::string> file_name;  ///< absolute path of the log (unknown: made by C++)
};

/// The log file of a new adaptor, as rmm names it: `log_file_name` (or $RMM_LOG_FILE) with
/// ".dev<device>" inserted before the extension, made absolute.
std::string log_path(nb::handle log_file_name, int device)
{
  nb::object name;
  char const* source = "log_file_name";
  if (log_file_name.is_none()) {
    char const* env = std::getenv("RMM_LOG_FILE");
    if (env == nullptr || *env == '\0') {
      throw nb::value_error(
        "log_file_name: give a file name, or set the RMM_LOG_FILE environment variable");
    }
    source = "log_file_name (from RMM_LOG_FILE)";
    name   = nb::steal(PyUnicode_DecodeFSDefault(env));  // as os.environ reads it
    if (!name.is_valid()) { throw nb::python_error(); }
  } else {
    nb::object fspath = nb::module_::import_("os").attr("fspath");
    if (!nb::isinstance<nb::str>(log_file_name) &&
        (PyType_Check(log_file_name.ptr()) || !nb::hasattr(log_file_name, "__fspath__"))) {
      throw nb::type_error(("log_file_name: expected a str or os.PathLike, got " +
                            type_of(log_file_name))
                             .c_str());
    }
    name = fspath(log_file_name);
    if (!nb::isinstance<nb::str>(name)) {
      throw nb::type_error("log_file_name: expected a str path, got a bytes path");
    }
    if (nb::len(name) == 0) { throw nb::value_error("log_file_name: must not be empty"); }
  }
  nb::module_ path = nb::module_::import_("os.path");
  nb::tuple parts  = nb::borrow<nb::tuple>(path.attr("splitext")(name));
  nb::str with_id  = nb::str("{}.dev{}{}").format(parts[0], device, parts[1]);
  nb::object const absolute = path.attr("abspath")(with_id);
  Py_ssize_t size           = 0;
  char const* text          = PyUnicode_AsUTF8AndSize(absolute.ptr(), &size);
  if (text == nullptr) {  // lone surrogates: bytes of the name that are not UTF-8
    PyErr_Clear();
    throw nb::value_error((std::string{source} + ": " + utf8(nb::repr(absolute)) +
                           " is not UTF-8 text, which the log file's name must be")
                            .c_str());
  }
  std::string out{text, static_cast<std::size_t>(size)};
  if (out.find('\0') != std::string::npos) {
    throw nb::value_error((std::string{source} + ": a file name cannot hold a NUL").c_str());
  }
  return out;
}

}  // namespace

void bind_logging_resource_adaptor(nb::module_& m)
{
  resource_class<LoggingResourceAdaptor, UpstreamResourceAdaptor>(
    m, "LoggingResourceAdaptor", R"doc(
Adaptor that logs every allocation and free to a CSV file.

The columns are ``Thread,Time,Action,Pointer,Size,Stream``; ``Action`` is ``allocate``,
``allocate failure`` or ``free``. The file is truncated when the adaptor is created and
written through a buffer: call :meth:`flush` to see the latest lines.

Parameters
----------
upstream_mr : DeviceMemoryResource
    The resource that serves the allocations; created on the current device.
log_file_name : str or os.PathLike, optional
    The log file; ``$RMM_LOG_FILE`` when omitted. As in rmm, ``.dev<device id>`` is
    inserted before the extension (``log.csv`` becomes ``log.dev0.csv``) and the path is
    made absolute: :meth:`get_file_name` returns the result.

Raises
------
ValueError
    If no file name is given and ``RMM_LOG_FILE`` is not set.
nbrmm.FileOpenError
    If the file cannot be opened (an ``OSError``, and a ``RuntimeError`` as in rmm).)doc")
    .def(
      "__init__",
      [](LoggingResourceAdaptor* self, nb::handle upstream_mr, nb::handle log_file_name) {
        init_guard const guard{self};
        resource_on_device(upstream_mr, "upstream_mr", current_device());  // the first parameter first
        std::string path = log_path(log_file_name, current_device());
        init_adaptor(self, upstream_mr, [&](device_resource up) {
          try {
            return logging_adaptor{std::move(up), path};
          } catch (std::exception const& e) {
            throw_file_open_error("log_file_name: cannot open '" + path +
                                  "' for logging: " + e.what());
          }
        });
        self->file_name = std::move(path);
      },
      nb::arg("upstream_mr"), nb::arg("log_file_name") = nb::none(),
      nb::sig("def __init__(self, upstream_mr: DeviceMemoryResource, "
              "log_file_name: str | os.PathLike[str] | None = None) -> None"))
    .def(
      "flush",
      method<LoggingResourceAdaptor>("flush", [](LoggingResourceAdaptor& self) {
        auto& log = resource_as<logging_adaptor>(self);
        gil_release release;
        log.flush();
      }),
      "Write buffered log lines to the file.")
    .def(
      "get_file_name",
      method<LoggingResourceAdaptor>("get_file_name",
                                     [](LoggingResourceAdaptor const& self) { return self.file_name; }),
      R"doc(The absolute path of the log file (None for an adaptor made by C++ code).)doc");

  register_adaptor_wrapper<LoggingResourceAdaptor, logging_adaptor>();
}

}  // namespace nbrmm
