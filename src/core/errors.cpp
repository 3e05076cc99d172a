// Errors (see errors.hpp): exception classes, Python exceptions travelling through librmm,
// and the translation of C++ exceptions.
//
//   nbrmm.CudaError(RuntimeError)   a CUDA runtime call failed (rmm::cuda_error), or there
//                                   is no usable CUDA driver or GPU for what was asked
//   nbrmm.BadAlloc(MemoryError)     an allocation failed (rmm::bad_alloc)
//   nbrmm.OutOfMemory(BadAlloc)     the resource ran out of memory (rmm::out_of_memory)
//   nbrmm.LogicError(RuntimeError)  a librmm precondition failed (rmm::logic_error)
//   ValueError / IndexError         rmm::invalid_argument / rmm::out_of_range
#include "core/errors.hpp"

#include "bindings.hpp"
#include "core/args.hpp"

#include <atomic>
#include <exception>
#include <cctype>
#include <string>
#include <utility>

namespace nbrmm {

namespace {

/// The CUDA errors that say there is no usable driver or GPU.
constexpr cudaError_t no_gpu_errors[] = {
  cudaErrorInsufficientDriver,   cudaErrorNoDevice,
  cudaErrorStubLibrary,          cudaErrorSystemDriverMismatch,
  cudaErrorCompatNotSupportedOnDevice, cudaErrorCallRequiresNewerDriver,
};

/// "<CUDA's description> (<error name>)".
std::string cuda_reason(cudaError_t status)
{
  return std::string{cudaGetErrorString(status)} + " (" + cudaGetErrorName(status) + ")";
}

std::string no_gpu_text(std::string const& what, cudaError_t status)
{
  return what + " needs a GPU, and there is no usable CUDA driver or GPU: " + cuda_reason(status);
}

}  // namespace

void throw_cuda_error(cudaError_t status, char const* what)
{
  cudaGetLastError();  // clear the runtime's last-error state
  for (cudaError_t const e : no_gpu_errors) {
    if (status == e) { throw no_gpu_error{no_gpu_text(what, status)}; }
  }
  throw rmm::cuda_error{std::string{what} + " failed: " + cudaGetErrorName(status) + ": " +
                        cudaGetErrorString(status)};
}

namespace {

thread_local std::exception_ptr pending_exception;
PyObject* raise_pending = nullptr;  // nbrmm._nbrmm._raise_pending (owned by the module)

PyObject* cuda_error_type     = nullptr;
PyObject* unavailable_type    = nullptr;  // nbrmm.CudaUnavailableError
PyObject* logic_error_type    = nullptr;
PyObject* bad_alloc_type      = nullptr;
PyObject* out_of_memory_type  = nullptr;

/// The last Python MemoryError that a callback raised on this thread during the current
/// nbrmm call (strong reference; touched only with the GIL held): the cause of the
/// out-of-memory error librmm may answer it with.
thread_local PyObject* last_memory_error = nullptr;

/// Takes this thread's last_memory_error (a strong reference, or null).
PyObject* take_memory_error() noexcept
{
  PyObject* const p = std::exchange(last_memory_error, nullptr);
  if (p != nullptr) { detail::memory_errors_held.fetch_sub(1, std::memory_order_relaxed); }
  return p;
}

void restore_exception(py_owned const& exc) noexcept
{
  PyObject* value = exc.get().ptr();
  if (value == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "nbrmm: a Python exception was lost in a callback");
    return;
  }
  PyErr_Restore(Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(value))), Py_NewRef(value),
                PyException_GetTraceback(value));
}

/// The CUDA error of a librmm message that reports a missing or unusable CUDA driver or
/// GPU (cudaSuccess when it reports none).
cudaError_t no_usable_driver(std::string const& message)
{
  for (cudaError_t const e : no_gpu_errors) {
    if (message.find(cudaGetErrorName(e)) != std::string::npos) { return e; }
  }
  if (message.find(cudaGetErrorString(cudaErrorInsufficientDriver)) != std::string::npos) {
    return cudaErrorInsufficientDriver;
  }
  return cudaSuccess;
}

/// nbrmm's words for a librmm message that reports no usable driver or GPU: what librmm
/// tried (an allocation, when it says so) and CUDA's reason. librmm's own framing
/// ("Maximum pool size exceeded", sizes of its internal requests) is left out.
std::string no_gpu_message(std::string const& message, cudaError_t status)
{
  if (message.find("failed to allocate") != std::string::npos) {
    return no_gpu_text("allocating device memory", status);
  }
  return "there is no usable CUDA driver or GPU: " + cuda_reason(status);
}

/// Sets `type` with the cleaned message, or nbrmm.CudaUnavailableError when the message
/// says there is no usable driver or GPU.
void set_rmm_error(PyObject* type, char const* what)
{
  std::string const message = clean_message(what);
  if (cudaError_t const status = no_usable_driver(message); status != cudaSuccess) {
    PyErr_SetString(unavailable_type, no_gpu_message(message, status).c_str());
    return;
  }
  PyErr_SetString(type, message.c_str());
}

void forget_memory_error() noexcept { Py_XDECREF(take_memory_error()); }

/// Sets the error for an exception (rethrows what nbrmm does not translate).
void translate(std::exception_ptr const& p, void*)
{
  try {
    std::rethrow_exception(p);
  } catch (python_exception const& e) {
    forget_memory_error();
    e.restore();
  } catch (python_out_of_memory const& e) {
    forget_memory_error();
    e.restore();
  } catch (rmm::out_of_memory const& e) {
    set_rmm_error(out_of_memory_type, e.what());
    if (last_memory_error != nullptr) {
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      PyErr_NormalizeException(&type, &value, &tb);
      PyException_SetCause(value, take_memory_error());  // steals
      PyErr_Restore(type, value, tb);
    }
  } catch (rmm::bad_alloc const& e) {
    forget_memory_error();
    set_rmm_error(bad_alloc_type, e.what());
  } catch (no_gpu_error const& e) {
    forget_memory_error();
    PyErr_SetString(unavailable_type, clean_message(e.what()).c_str());
  } catch (rmm::cuda_error const& e) {
    forget_memory_error();
    set_rmm_error(cuda_error_type, e.what());
  } catch (rmm::logic_error const& e) {
    forget_memory_error();
    set_rmm_error(logic_error_type, e.what());
  } catch (rmm::invalid_argument const& e) {
    PyErr_SetString(PyExc_ValueError, clean_message(e.what()).c_str());
  } catch (rmm::out_of_range const& e) {
    PyErr_SetString(PyExc_IndexError, clean_message(e.what()).c_str());
  } catch (nb::python_error const&) {
    throw;
  } catch (nb::builtin_exception const&) {
    throw;
  } catch (std::bad_alloc const&) {
    PyErr_SetString(PyExc_MemoryError, "out of host memory");
  } catch (std::out_of_range const& e) {
    PyErr_SetString(PyExc_IndexError, clean_message(e.what()).c_str());
  } catch (std::overflow_error const& e) {
    PyErr_SetString(PyExc_OverflowError, clean_message(e.what()).c_str());
  } catch (std::logic_error const& e) {  // invalid_argument, domain_error, length_error
    PyErr_SetString(PyExc_ValueError, clean_message(e.what()).c_str());
  } catch (std::exception const& e) {
    PyErr_SetString(PyExc_RuntimeError, clean_message(e.what()).c_str());
  }
}

}  // namespace

void python_exception::restore() const noexcept { restore_exception(*exc_); }

void raise_out_of_memory(nb::handle mr, std::size_t bytes, int device, void const* stream)
{
  translate_current_exception();
  nb::python_error error;
  try {
    nb::module_::import_("nbrmm.memory._oom")
      .attr("annotate")(error.value(), mr, bytes, device, reinterpret_cast<std::uintptr_t>(stream));
  } catch (nb::python_error const&) {
    // The report is an addition: without it, the error stands as librmm worded it.
  }
  throw error;
}

void python_out_of_memory::restore() const noexcept { restore_exception(*exc_); }

void throw_python_error()
{
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (type == nullptr) {
    PyErr_SetString(PyExc_SystemError, "nbrmm: a callback failed without setting an exception");
    PyErr_Fetch(&type, &value, &tb);
  }
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr) { PyException_SetTraceback(value, tb); }
  auto exc = std::make_shared<py_owned>(value);
  bool const oom = PyErr_GivenExceptionMatches(value, PyExc_MemoryError) != 0;
  std::string what;
  if (oom) {
    what = utf8(nb::type_name(nb::handle{type}));
    if (nb::object text = nb::steal(PyObject_Str(value)); text.is_valid()) {
      char const* c = PyUnicode_AsUTF8AndSize(text.ptr(), nullptr);
      if (c != nullptr && *c != '\0') {
        what += std::string{": "} + c;
      }
    }
    PyErr_Clear();
    PyObject* const previous = take_memory_error();
    last_memory_error        = Py_NewRef(value);
    detail::memory_errors_held.fetch_add(1, std::memory_order_relaxed);
    Py_XDECREF(previous);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  if (oom) { throw python_out_of_memory{what, std::move(exc)}; }
  throw python_exception{std::move(exc)};
}

std::atomic<int> detail::memory_errors_held{0};

void detail::forget_python_memory_error_slow() noexcept
{
  if (last_memory_error != nullptr) { forget_memory_error(); }
}

namespace {

/// Whether `text` at `i` starts a source location "FILE:LINE:" (FILE with a '/').
std::size_t location_end(std::string const& text, std::size_t i)
{
  std::size_t const stop = text.find_first_of(" \t\n", i);
  std::string_view const token{text.data() + i, (stop == std::string::npos ? text.size() : stop) - i};
  // FILE:LINE: with digits between the last two colons
  if (token.size() < 3 || token.back() != ':' || token.find('/') == std::string_view::npos) {
    return std::string::npos;
  }
  std::size_t const colon = token.rfind(':', token.size() - 2);
  if (colon == std::string_view::npos || colon + 1 >= token.size() - 1) { return std::string::npos; }
  for (std::size_t k = colon + 1; k + 1 < token.size(); ++k) {
    if (!std::isdigit(static_cast<unsigned char>(token[k]))) { return std::string::npos; }
  }
  return i + token.size();
}

void erase_all(std::string& text, std::string_view what)
{
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at)) {
    text.erase(at, what.size());
  }
}

}  // namespace

std::string clean_message(std::string_view message)
{
  std::string text{message};
  erase_all(text, "std::bad_alloc: ");
  erase_all(text, "out_of_memory: ");
  // "RMM failure at: FILE:LINE: " goes; " at: FILE:LINE: " becomes ": ".
  for (std::size_t at = text.find("at:"); at != std::string::npos; at = text.find("at:", at + 1)) {
    std::size_t start = at + 3;
    while (start < text.size() && text[start] == ' ') { ++start; }
    std::size_t end = location_end(text, start);
    if (end == std::string::npos) { continue; }
    while (end < text.size() && text[end] == ' ') { ++end; }
    std::size_t begin = at;
    bool const failure = at >= 12 && text.compare(at - 12, 12, "RMM failure ") == 0;
    if (failure) { begin = at - 12; }
    while (!failure && begin > 0 && text[begin - 1] == ' ') { --begin; }
    text.replace(begin, end - begin, failure ? "" : ": ");
    at = begin;
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) { text.pop_back(); }
  return text;
}

void translate_current_exception() noexcept
{
  pending_exception = std::current_exception();
  // Rethrown inside a bound function, the exception goes through nanobind's translators
  // (nbrmm's own included) and leaves the Python error set.
  PyObject* result = PyObject_CallNoArgs(raise_pending);
  Py_XDECREF(result);
  pending_exception = nullptr;
}

void bind_errors(nb::module_& m)
{
  m.def("_raise_pending", []() {
    if (std::exception_ptr p = std::exchange(pending_exception, nullptr)) { std::rethrow_exception(p); }
  });
  raise_pending = m.attr("_raise_pending").ptr();
  m.attr("_exception_translator") =
    nb::capsule(reinterpret_cast<void*>(&translate_current_exception), NBRMM_TRANSLATOR_CAPSULE);

  static nb::exception<rmm::cuda_error> cuda_error(m, "CudaError", PyExc_RuntimeError);
  static nb::exception<rmm::logic_error> logic_error(m, "LogicError", PyExc_RuntimeError);
  static nb::exception<rmm::bad_alloc> bad_alloc(m, "BadAlloc", PyExc_MemoryError);
  static nb::exception<rmm::out_of_memory> out_of_memory(m, "OutOfMemory", bad_alloc);
  cuda_error_type    = cuda_error.ptr();
  logic_error_type   = logic_error.ptr();
  bad_alloc_type     = bad_alloc.ptr();
  out_of_memory_type = out_of_memory.ptr();

  // Without a usable driver or GPU: a CUDA error, and (as an allocation failure is in rmm)
  // a MemoryError.
  unavailable_type = PyErr_NewExceptionWithDoc(
    "nbrmm._nbrmm.CudaUnavailableError",
    "There is no usable CUDA driver or GPU for what was asked (a CudaError and a BadAlloc).",
    nb::make_tuple(cuda_error, bad_alloc).ptr(), nullptr);
  if (unavailable_type == nullptr) { throw nb::python_error(); }
  m.attr("CudaUnavailableError") = nb::steal(unavailable_type);

  cuda_error.attr("__doc__") =
    "A CUDA runtime call failed, or there is no usable CUDA driver or GPU for what was asked.";
  logic_error.attr("__doc__")   = "A librmm precondition failed.";
  bad_alloc.attr("__doc__")     = "A memory resource could not allocate the requested memory.";
  out_of_memory.attr("__doc__") = "A memory resource ran out of memory.";

  // Registered last, so tried first: it handles every exception librmm and nbrmm throw.
  nb::register_exception_translator(&translate);
}

}  // namespace nbrmm
