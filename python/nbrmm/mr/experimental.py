"""Experimental memory resources (rmm.mr.experimental-compatible namespace)."""

from nbrmm._nbrmm import CudaAsyncManagedMemoryResource

__all__ = ["CudaAsyncManagedMemoryResource"]
