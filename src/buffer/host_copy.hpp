// Copies between host buffers (the Python buffer protocol) and device memory, shared by
// the Buffer methods and the raw-pointer copies of nbrmm.pylibrmm.device_buffer.
#pragma once

#include "core/args.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "streams/stream.hpp"

#include <cstddef>
#include <string>

namespace nbrmm {

/// cudaMemcpyAsync on `s`, synchronizing when `s` is the default stream and
/// `wait_on_default` (as rmm's copies do, except its device-to-device copy).
inline void copy_bytes(void* dst,
                       void const* src,
                       std::size_t n,
                       cuda::stream_ref s,
                       bool wait_on_default = true)
{
  if (n == 0) { return; }
  gil_release release;
  auto status = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s.get());
  if (status != cudaSuccess) { throw_cuda_error(status, "cudaMemcpyAsync"); }
  if (wait_on_default && is_legacy_default(s.get())) {
    status = cudaStreamSynchronize(s.get());
    if (status != cudaSuccess) { throw_cuda_error(status, "cudaStreamSynchronize"); }
  }
}

/// A C-contiguous Python buffer (host memory), released on scope exit. An object without
/// the buffer protocol raises TypeError; a buffer that is read-only (when `writable`) or
/// not contiguous raises BufferError, as in rmm; messages name `param`.
class host_view {
 public:
  host_view(nb::handle obj, bool writable, char const* param)
  {
    int const flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      nb::object msg = nb::steal(PyObject_Str(value != nullptr ? value : Py_None));
      bool const wrong_type   = PyErr_GivenExceptionMatches(type, PyExc_TypeError) != 0;
      bool const buffer_error = PyErr_GivenExceptionMatches(type, PyExc_BufferError) != 0;
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(tb);
      if (!msg.is_valid()) {
        PyErr_Clear();
        msg = nb::str("?");
      }
      std::string text = std::string{param} + ": expected a C-contiguous" +
                         (writable ? " writable" : "") + " buffer (bytes-like or NumPy array): " +
                         utf8(msg);
      if (wrong_type) { throw nb::type_error(text.c_str()); }
      if (buffer_error) { throw nb::buffer_error(text.c_str()); }
      throw nb::value_error(text.c_str());
    }
  }
  host_view(host_view const&)            = delete;
  host_view& operator=(host_view const&) = delete;
  ~host_view() { PyBuffer_Release(&view_); }
  [[nodiscard]] void* data() const noexcept { return view_.buf; }
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

}  // namespace nbrmm
