"""Experimental memory resources (rmm.mr.experimental-compatible namespace)."""

from nbrmm.mr import DeviceMemoryResource


class CudaAsyncManagedMemoryResource(DeviceMemoryResource):
    """
    Memory resource for stream-ordered managed memory (``cudaMallocFromPoolAsync`` on the
    current device's default managed memory pool).

    Experimental, as in rmm: it needs CUDA 13 and a device with concurrent managed access;
    the constructor raises ``nbrmm.LogicError`` otherwise. The memory is host-accessible.
    """

    def __init__(self) -> None:
        """Create a resource on the current device."""

    def pool_handle(self) -> int:
        """The ``cudaMemPool_t`` of the managed pool, as an int."""

__all__ = ["CudaAsyncManagedMemoryResource"]
