"""CUDA streams (rmm's ``rmm.pylibrmm.stream``): nbrmm's :class:`~nbrmm.Stream` and the
predefined default streams."""

from nbrmm._nbrmm import (
    DEFAULT_STREAM,
    LEGACY_DEFAULT_STREAM,
    PER_THREAD_DEFAULT_STREAM,
    CudaStreamFlags,
    Stream,
)

__all__ = [
    "CudaStreamFlags",
    "DEFAULT_STREAM",
    "LEGACY_DEFAULT_STREAM",
    "PER_THREAD_DEFAULT_STREAM",
    "Stream",
]
