"""The checks of nbrmm.interop's arguments: sizes, pointers (nbrmm._args) and stream
handles, each error naming its parameter."""

from __future__ import annotations

from nbrmm._args import check_ptr, check_size, type_name

__all__ = ["check_ptr", "check_size", "stream_handle", "type_name"]


def stream_handle(stream: object, param: str = "stream") -> int:
    """The ``cudaStream_t`` of a stream-like object (``__cuda_stream__``), as an int."""
    proto = getattr(stream, "__cuda_stream__", None)
    if stream is None or proto is None:
        raise TypeError(
            f"{param}: expected a cuda.core Stream or an object implementing "
            f"__cuda_stream__, got {type_name(stream)}"
        )
    value = proto()
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or isinstance(value[1], bool)
        or not isinstance(value[1], int)
    ):
        raise TypeError(f"{param}: __cuda_stream__() must return a (version, handle) tuple")
    handle: int = value[1]
    if not 0 <= handle < 1 << 64:
        raise ValueError(f"{param}: __cuda_stream__() returned {handle}, not a stream handle")
    return handle
