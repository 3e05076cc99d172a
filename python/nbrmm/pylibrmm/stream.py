"""CUDA streams (rmm's ``rmm.pylibrmm.stream``): nbrmm's :class:`~nbrmm.Stream` and the
predefined default streams."""

from nbrmm._nbrmm import (
    DEFAULT_STREAM,
    LEGACY_DEFAULT_STREAM,
    PER_THREAD_DEFAULT_STREAM,
    CudaStreamFlags,
    Stream,
)

#: This module. Its namespace refers to it, so that the interpreter clears the namespace at
#: exit (letting go of the Streams in it) also where something of it outlives the module,
#: such as a function that another library keeps.
_this_module = __import__("sys").modules[__name__]

__all__ = [
    "CudaStreamFlags",
    "DEFAULT_STREAM",
    "LEGACY_DEFAULT_STREAM",
    "PER_THREAD_DEFAULT_STREAM",
    "Stream",
]
