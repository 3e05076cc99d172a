"""Experimental memory resources (rmm.mr.experimental-compatible namespace)."""

from nbrmm._nbrmm import CudaAsyncManagedMemoryResource
from nbrmm._public import publish as _publish

__all__ = ["CudaAsyncManagedMemoryResource"]

_publish(__name__, globals(), __all__)
