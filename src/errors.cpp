// Exceptions of rmm/error.hpp, translated to Python classes.
//
//   nbrmm.CudaError(RuntimeError)   a CUDA runtime call failed (rmm::cuda_error)
//   nbrmm.BadAlloc(MemoryError)     an allocation failed (rmm::bad_alloc)
//   nbrmm.OutOfMemory(BadAlloc)     the resource ran out of memory (rmm::out_of_memory)
//   nbrmm.LogicError(RuntimeError)  a librmm precondition failed (rmm::logic_error)
//   ValueError / IndexError         rmm::invalid_argument / rmm::out_of_range
#include "nb_rmm.hpp"

#include <exception>
#include <string>
#include <utility>

namespace nbrmm {

void throw_cuda_error(cudaError_t status, char const* what)
{
  cudaGetLastError();  // clear the runtime's last-error state
  throw rmm::cuda_error{std::string{what} + " failed: " + cudaGetErrorName(status) + ": " +
                        cudaGetErrorString(status)};
}

namespace {

thread_local std::exception_ptr pending_exception;
PyObject* raise_pending = nullptr;  // nbrmm._nbrmm._raise_pending (owned by the module)

}  // namespace

void raise_current_exception() noexcept
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

  // nanobind tries the most recently registered translator first: bases go first.
  static nb::exception<rmm::cuda_error> cuda_error(m, "CudaError", PyExc_RuntimeError);
  static nb::exception<rmm::logic_error> logic_error(m, "LogicError", PyExc_RuntimeError);
  static nb::exception<rmm::bad_alloc> bad_alloc(m, "BadAlloc", PyExc_MemoryError);
  static nb::exception<rmm::out_of_memory> out_of_memory(m, "OutOfMemory", bad_alloc);

  cuda_error.attr("__doc__") = "A CUDA runtime call made by librmm failed (e.g. no GPU or driver).";
  logic_error.attr("__doc__") = "A librmm precondition failed.";
  bad_alloc.attr("__doc__") = "A memory resource could not allocate the requested memory.";
  out_of_memory.attr("__doc__") = "A memory resource ran out of memory.";

  nb::register_exception_translator([](std::exception_ptr const& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (rmm::invalid_argument const& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (rmm::out_of_range const& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    }
  });
}

}  // namespace nbrmm
