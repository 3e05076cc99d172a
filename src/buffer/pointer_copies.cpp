// Copies between raw addresses, as rmm.pylibrmm.device_buffer has them: copy_ptr_to_host,
// copy_host_to_ptr and copy_device_to_ptr. Each copy is ordered on `stream`; as in rmm,
// the two host copies wait for it on the default stream. Before copying, each address is checked to be
// memory that CUDA knows (device, managed or page-locked host memory) and, where the
// driver reports the allocation's extent, to hold the whole range: a wrong int raises an
// exception instead of faulting the process or the CUDA context.
#include "bindings.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "buffer/host_copy.hpp"
#include "core/rmm_compat.hpp"
#include "streams/stream.hpp"

#include <cuda.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

namespace nbrmm {
namespace {

using get_attribute_fn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

/// cuPointerGetAttribute through the runtime's entry point table (nbrmm does not link the
/// driver library); null when the driver does not provide it.
get_attribute_fn driver_get_attribute() noexcept
{
  static get_attribute_fn const fn = []() -> get_attribute_fn {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<get_attribute_fn>(f);
  }();
  return fn;
}

std::string hex(std::uint64_t value)
{
  char text[24];
  std::snprintf(text, sizeof text, "0x%" PRIx64, value);
  return text;
}

/// Checks that `count` bytes at `ptr` are memory CUDA knows, inside one allocation.
void* cuda_range(std::uint64_t ptr, std::size_t count, char const* param)
{
  auto* const p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
  if (count == 0) { return p; }
  cudaPointerAttributes attrs{};
  cudaError_t status{};
  CUdeviceptr start = 0;
  std::size_t size  = 0;
  bool have_range   = false;
  {
    gil_release release;
    status = cudaPointerGetAttributes(&attrs, p);
    if (status == cudaSuccess && attrs.type != cudaMemoryTypeUnregistered) {
      if (auto const get = driver_get_attribute()) {
        auto const dptr = static_cast<CUdeviceptr>(ptr);
        have_range = get(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dptr) == CUDA_SUCCESS &&
                     get(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, dptr) == CUDA_SUCCESS;
      }
    }
  }
  if (status != cudaSuccess) { throw_cuda_error(status, "cudaPointerGetAttributes"); }
  if (attrs.type == cudaMemoryTypeUnregistered) {
    throw_invalid_argument(std::string{param} + ": " + hex(ptr) +
                           " is not memory that CUDA knows (device, managed or page-locked "
                           "host memory)");
  }
  if (have_range && (ptr < start || count > start + size - ptr)) {
    throw_invalid_argument(std::string{param} + ": the " + std::to_string(count) +
                           " bytes at " + hex(ptr) +
                           " run past the end of the CUDA allocation that holds them (" +
                           std::to_string(size) + " bytes at " + hex(start) + ")");
  }
  return p;
}

}  // namespace

void bind_pointer_copies(nb::module_& m)
{
  m.def(
    "copy_ptr_to_host",
    [](nb::handle db, nb::handle hb, nb::handle stream) {
      auto const src       = uint_arg(db, "db");
      cuda::stream_ref s   = stream_arg(stream, "stream");
      host_view const view{hb, true, "hb"};
      copy_bytes(view.data(), cuda_range(src, view.size(), "db"), view.size(), s);
    },
    nb::arg("db").none(), nb::arg("hb").none(), nb::arg("stream").none() = default_stream_arg(),
    nb::sig("def copy_ptr_to_host(db: int, hb: typing_extensions.Buffer | numpy.typing.NDArray[typing.Any], "
            "stream: nbrmm._typing.CudaStreamLike = ...) -> None"),
    R"doc(Copy ``len(hb)`` bytes from the device address ``db`` into the host buffer ``hb``.

Parameters
----------
db : int
    Address of the source: device, managed or page-locked host memory.
hb : writable C-contiguous buffer
    The destination (``bytearray``, NumPy array, ...); its size is the byte count.
stream : Stream or object with ``__cuda_stream__``, optional
    The stream the copy is ordered on. On the default stream the call waits for the
    copy; on any other it returns at once (synchronize before reading ``hb``).

Raises
------
TypeError
    If ``stream`` is None, ``db`` is not an int or ``hb`` has no buffer interface.
BufferError
    If ``hb`` is read-only or not contiguous.
nbrmm.ArgumentRangeError
    If ``db`` is negative or does not fit in 64 bits.
nbrmm.InvalidArgumentError
    If ``db`` is not memory CUDA knows, or the range runs past its allocation.
nbrmm.CudaError
    If CUDA fails (e.g. no GPU).)doc");

  m.def(
    "copy_host_to_ptr",
    [](nb::handle hb, nb::handle db, nb::handle stream) {
      host_view const view{hb, false, "hb"};
      auto const dst     = uint_arg(db, "db");
      cuda::stream_ref s = stream_arg(stream, "stream");
      copy_bytes(cuda_range(dst, view.size(), "db"), view.data(), view.size(), s);
    },
    nb::arg("hb").none(), nb::arg("db").none(), nb::arg("stream").none() = default_stream_arg(),
    nb::sig("def copy_host_to_ptr(hb: typing_extensions.Buffer | numpy.typing.NDArray[typing.Any], db: int, "
            "stream: nbrmm._typing.CudaStreamLike = ...) -> None"),
    R"doc(Copy the host buffer ``hb`` to the device address ``db``.

Parameters
----------
hb : C-contiguous buffer
    The source (``bytes``, ``bytearray``, NumPy array, ...); its size is the byte count.
db : int
    Address of the destination: device, managed or page-locked host memory.
stream : Stream or object with ``__cuda_stream__``, optional
    The stream the copy is ordered on. On the default stream the call waits for the
    copy; on any other it returns at once (keep ``hb`` alive and unchanged until the
    stream is synchronized).

Raises
------
TypeError
    If ``stream`` is None, ``db`` is not an int or ``hb`` has no buffer interface.
BufferError
    If ``hb`` is not contiguous.
nbrmm.ArgumentRangeError
    If ``db`` is negative or does not fit in 64 bits.
nbrmm.InvalidArgumentError
    If ``db`` is not memory CUDA knows, or the range runs past its allocation.
nbrmm.CudaError
    If CUDA fails (e.g. no GPU).)doc");

  m.def(
    "copy_device_to_ptr",
    [](nb::handle d_src, nb::handle d_dst, nb::handle count, nb::handle stream) {
      auto const src     = uint_arg(d_src, "d_src");
      auto const dst     = uint_arg(d_dst, "d_dst");
      auto const n       = static_cast<std::size_t>(uint_arg(count, "count"));
      cuda::stream_ref s = stream_arg(stream, "stream");
      void const* from   = cuda_range(src, n, "d_src");
      copy_bytes(cuda_range(dst, n, "d_dst"), from, n, s, /*wait_on_default=*/false);
    },
    nb::arg("d_src").none(), nb::arg("d_dst").none(), nb::arg("count").none(),
    nb::arg("stream").none() = default_stream_arg(),
    nb::sig("def copy_device_to_ptr(d_src: int, d_dst: int, count: int, "
            "stream: nbrmm._typing.CudaStreamLike = ...) -> None"),
    R"doc(Copy ``count`` bytes from the device address ``d_src`` to ``d_dst``.

Parameters
----------
d_src : int
    Address of the source.
d_dst : int
    Address of the destination.
count : int
    Number of bytes.
stream : Stream or object with ``__cuda_stream__``, optional
    The stream the copy is ordered on. The call returns once the copy is queued (as in
    rmm, also on the default stream).

Raises
------
TypeError
    If ``stream`` is None or an address or ``count`` is not an int.
nbrmm.ArgumentRangeError
    If an address or ``count`` is negative or does not fit in 64 bits.
nbrmm.InvalidArgumentError
    If an address is not memory CUDA knows, or a range runs past its allocation.
nbrmm.CudaError
    If CUDA fails (e.g. no GPU).)doc");
}

}  // namespace nbrmm
