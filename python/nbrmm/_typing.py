"""Types in nbrmm's signatures: the protocols of the objects nbrmm accepts and the shapes of
the dicts it returns.

The extension's stub (``_nbrmm.pyi``) and nbrmm's Python modules refer to them; code that
uses nbrmm rarely needs to name them (``nbrmm.Stream`` is a ``CudaStreamLike``, an
``nbrmm.Buffer`` a ``CudaArrayLike``). Importing this module imports nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar

__all__ = [
    "CudaArrayInterface",
    "CudaArrayLike",
    "CudaStreamLike",
    "DeviceInfo",
    "HasPoolHandle",
    "HostBufferT",
    "StatisticsRow",
    "Versions",
]


class CudaStreamLike(Protocol):
    """A stream of the CUDA stream protocol: ``__cuda_stream__()`` returns
    ``(version, handle)`` (nbrmm, CuPy, PyTorch, cuda.core and numba-cuda streams)."""

    def __cuda_stream__(self) -> tuple[int, int]: ...


class CudaArrayLike(Protocol):
    """A device array of the CUDA array interface (``__cuda_array_interface__``)."""

    @property
    def __cuda_array_interface__(self) -> Mapping[str, Any]: ...


class HasPoolHandle(Protocol):
    """An object that owns a CUDA memory pool, such as ``CudaAsyncMemoryResource``."""

    def pool_handle(self) -> int: ...


class CudaArrayInterface(TypedDict):
    """``Buffer.__cuda_array_interface__``: a one-dimensional ``uint8`` array (version 3)."""

    data: tuple[int, bool]
    shape: tuple[int]
    strides: None
    typestr: str
    version: int
    stream: int


class DeviceInfo(TypedDict):
    """What ``nbrmm.get_device_info`` returns."""

    name: str
    total_memory: int
    compute_capability: tuple[int, int]
    multiprocessors: int
    pci_bus_id: int


class TagRow(TypedDict):
    """A row of ``nbrmm.dask.gather_memory_by_tag`` (and ``worker_memory_by_tag``): a Dask
    worker, a device, a tag of its memory history, and the live bytes and allocations
    recorded under that tag."""

    worker: str | None
    name: Any
    device: int
    tag: str
    live_bytes: int
    live_count: int


class StatisticsRow(TypedDict):
    """A row of ``nbrmm.dask.gather_statistics`` (and ``worker_statistics``): a Dask
    worker, one of its devices, the class of the device's current resource, and the
    counters of the first statistics adaptor in that resource's chain (None without one)."""

    worker: str | None
    name: Any  # the worker's name, of whatever type Dask was given (an int, a str, ...)
    device: int
    resource: str
    current_bytes: int | None
    current_count: int | None
    peak_bytes: int | None
    peak_count: int | None
    total_bytes: int | None
    total_count: int | None


class Versions(TypedDict):
    """What ``nbrmm._nbrmm.get_versions`` returns (``nanobind`` as major*10000 + minor*100 +
    patch)."""

    cuda_driver: int
    cuda_runtime: int
    nanobind: int


if TYPE_CHECKING:
    import numpy
    import numpy.typing
    from typing_extensions import Buffer
    from typing_extensions import TypeVar as _TypeVarWithDefault

    # A host buffer that receives a copy (``Buffer.copy_to_host(ary)``): the type of ``ary``,
    # or the numpy.uint8 array made when ``ary`` is omitted. (numpy declares the buffer
    # protocol of its arrays only from Python 3.12 on, hence the explicit ndarray.)
    HostBufferT = _TypeVarWithDefault(
        "HostBufferT",
        bound=Buffer | numpy.typing.NDArray[Any],
        default=numpy.typing.NDArray[numpy.uint8],
    )
else:
    HostBufferT = TypeVar("HostBufferT")
