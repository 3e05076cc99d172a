"""Experimental memory resources (rmm's ``rmm.pylibrmm.memory_resource.experimental``)."""

from nbrmm.mr.experimental import CudaAsyncManagedMemoryResource

__all__ = ["CudaAsyncManagedMemoryResource"]
