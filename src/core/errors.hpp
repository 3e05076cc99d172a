// Errors: CUDA failures, Python exceptions that travel through librmm, and the translation
// of every C++ exception into the Python exception a user sees.
//
// A Python callback that librmm calls (a Python upstream, a failure callback) can raise.
// Its exception crosses librmm as a C++ exception and becomes, at the nbrmm entry point the
// Python caller called, the very Python exception again (type, message, traceback, cause):
//  * a MemoryError travels as python_out_of_memory, an rmm::out_of_memory, so that every
//    librmm adaptor treats it as out-of-memory (a pool tries a smaller block, a failure
//    callback adaptor calls its callback and retries). When librmm answers it with an
//    out-of-memory error of its own, that error reaches Python with the MemoryError as its
//    `__cause__`;
//  * any other exception (KeyboardInterrupt and SystemExit included) travels as
//    python_exception, which derives from no std::exception, so that librmm's
//    `catch (std::exception const&)` handlers let it through unchanged.
// Messages of librmm's exceptions reach Python without librmm's source locations.
#pragma once

#include "core/py_owned.hpp"

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace nbrmm {

/// Throws nbrmm.CudaError (rmm::cuda_error) for a failed CUDA call `what`, clearing the
/// runtime's last-error state.
[[noreturn]] void throw_cuda_error(cudaError_t status, char const* what);

/// Throws nbrmm.CudaError unless `status` is cudaSuccess.
inline void check_cuda(cudaError_t status, char const* what)
{
  if (status != cudaSuccess) { throw_cuda_error(status, what); }
}

/// There is no usable CUDA driver or GPU for what was asked: nbrmm.CudaUnavailableError
/// (a CudaError and a MemoryError).
class no_gpu_error : public rmm::cuda_error {
 public:
  using rmm::cuda_error::cuda_error;
};

/// A Python exception on its way through librmm (see the comment at the top).
class python_exception {
 public:
  explicit python_exception(std::shared_ptr<py_owned> exc) noexcept : exc_{std::move(exc)} {}
  /// Sets the exception as the current Python error (call with the GIL).
  void restore() const noexcept;

 private:
  std::shared_ptr<py_owned> exc_;
};

/// A Python MemoryError on its way through librmm: out-of-memory to librmm.
class python_out_of_memory : public rmm::out_of_memory {
 public:
  python_out_of_memory(std::string const& what, std::shared_ptr<py_owned> exc)
    : rmm::out_of_memory{what}, exc_{std::move(exc)}
  {
  }
  /// Sets the MemoryError as the current Python error (call with the GIL).
  void restore() const noexcept;

 private:
  std::shared_ptr<py_owned> exc_;
};

/// Throws the current Python error (set, GIL held) as python_out_of_memory or
/// python_exception. Call from code that librmm calls into, instead of nb::python_error.
[[noreturn]] void throw_python_error();

/// Raises the out-of-memory error being handled (call inside `catch (rmm::out_of_memory)`)
/// with nbrmm's report added: what was asked (`bytes` on `device` and `stream`, from the
/// resource object `mr`) and what the resource chain and the memory history hold
/// (nbrmm.memory._oom). A MemoryError a Python callback raised goes on unchanged.
[[noreturn]] void raise_out_of_memory(nb::handle mr, std::size_t bytes, int device,
                                      void const* stream);

/// Sets the Python exception for the C++ exception being handled (call inside `catch`),
/// exactly as an exception leaving a bound function is translated. Other extensions reach
/// it through the capsule `_exception_translator` (nbrmm::raise_current_exception).
void translate_current_exception() noexcept;

namespace detail {
/// Threads holding a MemoryError for translation: while it is 0, no thread does, and
/// forget_python_memory_error() need not look at this thread's record.
extern std::atomic<int> memory_errors_held;
void forget_python_memory_error_slow() noexcept;
}  // namespace detail

/// Forgets the MemoryError that a callback of this call left for the translation of
/// librmm's out-of-memory error (call with the GIL once the call succeeded).
inline void forget_python_memory_error() noexcept
{
  if (detail::memory_errors_held.load(std::memory_order_relaxed) != 0) {
    detail::forget_python_memory_error_slow();
  }
}

/// An nbrmm call into librmm that may run Python callbacks (an allocation, a resource
/// that preallocates): releases the GIL for its lifetime and, when the call returns
/// normally, forgets the MemoryError a callback may have left for translation (librmm
/// recovered from it: a pool tried a smaller block, a failure callback freed memory).
class librmm_call {
 public:
  librmm_call() noexcept = default;
  librmm_call(librmm_call const&)            = delete;
  librmm_call& operator=(librmm_call const&) = delete;
  ~librmm_call()
  {
    release_.reset();
    if (std::uncaught_exceptions() == exceptions_) { forget_python_memory_error(); }
  }

 private:
  int exceptions_{std::uncaught_exceptions()};
  std::optional<gil_release> release_{std::in_place};
};

/// `message` without librmm's source locations ("RMM failure at: FILE:LINE: "), exception
/// class prefixes ("std::bad_alloc: ") and trailing whitespace.
std::string clean_message(std::string_view message);

}  // namespace nbrmm
