// A C++ library as the Cython test extension (cython_ext.pyx) wraps it, the way cuDF wraps
// libcudf: it knows librmm only (no Python, no nbrmm), takes a stream and a resource
// reference, and returns its results as rmm::device_buffer.
#pragma once

#include <rmm/device_buffer.hpp>
#include <rmm/error.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/resource_ref.hpp>

#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace cython_lib {

/// Whether `ptr` is memory the GPU owns (device or managed); false for host memory, and on
/// machines without a GPU (where the tests allocate from host-memory resources).
inline bool on_device(void const* ptr)
{
  cudaPointerAttributes attrs{};
  if (cudaPointerGetAttributes(&attrs, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // no GPU, or memory CUDA does not know
    return false;
  }
  return attrs.type == cudaMemoryTypeDevice || attrs.type == cudaMemoryTypeManaged;
}

/// Sets `nbytes` bytes at `ptr` to `value`, in order on `stream`.
inline void fill(void* ptr, std::size_t nbytes, std::uint8_t value, cuda::stream_ref stream)
{
  if (nbytes == 0) { return; }
  if (on_device(ptr)) {
    RMM_CUDA_TRY(cudaMemsetAsync(ptr, value, nbytes, stream.get()));
  } else {
    std::memset(ptr, value, nbytes);
  }
}

/// A new buffer of `nbytes` bytes, each `value`, allocated from `mr` on `stream`.
inline std::unique_ptr<rmm::device_buffer> filled(std::size_t nbytes, std::uint8_t value,
                                                  cuda::stream_ref stream,
                                                  rmm::device_async_resource_ref mr)
{
  auto buf = std::make_unique<rmm::device_buffer>(nbytes, stream, mr);
  fill(buf->data(), nbytes, value, stream);
  return buf;
}

/// The same, allocated from the current device resource and returned by value.
inline rmm::device_buffer filled_from_current(std::size_t nbytes, std::uint8_t value,
                                              cuda::stream_ref stream)
{
  rmm::device_buffer buf{nbytes, stream, rmm::mr::get_current_device_resource_ref()};
  fill(buf.data(), nbytes, value, stream);
  return buf;
}

/// The sum of the `nbytes` bytes at `ptr`, read after the work on `stream`.
inline std::uint64_t byte_sum(void const* ptr, std::size_t nbytes, cuda::stream_ref stream)
{
  std::vector<std::uint8_t> host(nbytes);
  if (nbytes != 0 && on_device(ptr)) {
    RMM_CUDA_TRY(cudaMemcpyAsync(host.data(), ptr, nbytes, cudaMemcpyDefault, stream.get()));
    stream.sync();
  } else if (nbytes != 0) {
    std::memcpy(host.data(), ptr, nbytes);
  }
  std::uint64_t sum = 0;
  for (auto b : host) { sum += b; }
  return sum;
}

}  // namespace cython_lib
