"""The checks of nbrmm.interop's arguments: sizes, pointers and stream handles, each error
naming its parameter."""

from __future__ import annotations

import operator
from typing import SupportsIndex


def type_name(obj: object) -> str:
    return type(obj).__name__


def check_size(size: SupportsIndex, param: str = "size") -> int:
    """``size`` as an int (a non-negative integer below 2**64), or the error for it."""
    if isinstance(size, bool):
        raise TypeError(f"{param}: expected an int, got bool")
    try:
        size = operator.index(size)  # an int exactly, also for int subclasses and NumPy's
    except TypeError:
        raise TypeError(f"{param}: expected an int, got {type_name(size)}") from None
    if size < 0:
        raise ValueError(f"{param}: must be non-negative, got {size}")
    if size >= 1 << 64:
        raise ValueError(f"{param}: {size} bytes is too large")
    return size


def check_ptr(ptr: SupportsIndex) -> int:
    """``ptr`` as an int (a pointer value in ``[0, 2**64)``), or the error for it."""
    if isinstance(ptr, bool):
        raise TypeError("ptr: expected the pointer as an int, got bool")
    try:
        ptr = operator.index(ptr)  # an int exactly, also for int subclasses and NumPy's
    except TypeError:
        raise TypeError(f"ptr: expected the pointer as an int, got {type_name(ptr)}") from None
    if not 0 <= ptr < 1 << 64:
        raise ValueError(f"ptr: not a pointer value: {ptr}")
    return ptr


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
