// Streams: nbrmm.Stream and the conversion of stream-like Python objects.
#pragma once

#include "core/common.hpp"

#include <memory>

namespace nbrmm {

/// Backing struct of `nbrmm.Stream`.
struct Stream {
  cudaStream_t handle{nullptr};
  std::shared_ptr<rmm::cuda_stream> owned;  ///< set when nbrmm created (and owns) the stream
  nb::object owner;                         ///< wrapped foreign stream object, kept alive

  [[nodiscard]] cuda::stream_ref ref() const noexcept { return cuda::stream_ref{handle}; }
};

/// Whether `s` is the legacy default stream (spelled 0 or cudaStreamLegacy).
inline bool is_legacy_default(cudaStream_t s) noexcept
{
  return s == nullptr || s == cudaStreamLegacy;
}

/// Whether `s` is a default stream (legacy or per-thread), which is never destroyed: work
/// may be ordered on it without keeping a Python object alive.
inline bool never_destroyed(cudaStream_t s) noexcept
{
  return is_legacy_default(s) || s == cudaStreamPerThread;
}

/// Converts any stream-like Python object (nbrmm.Stream or an object implementing
/// `__cuda_stream__`) to a stream handle; raises TypeError naming `param` otherwise.
cuda::stream_ref stream_arg(nb::handle obj, char const* param);

/// Returns `obj` when it is an nbrmm.Stream, otherwise a new nbrmm.Stream wrapping it.
nb::object stream_object(nb::handle obj, char const* param);

/// A (non-owning) nbrmm.Stream for a raw handle, e.g. to pass to Python callbacks.
nb::object stream_for_handle(cudaStream_t handle);

/// nbrmm.DEFAULT_STREAM; once it is gone (its last reference let go at interpreter exit),
/// a new non-owning Stream of the same (legacy default) stream.
nb::object default_stream();

/// The default of bound functions' `stream` parameters: an object (not a Stream) that
/// stream_arg and stream_object read as DEFAULT_STREAM.
nb::handle default_stream_arg();

}  // namespace nbrmm
