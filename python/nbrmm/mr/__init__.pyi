"""Memory resources and the current device resource (rmm.mr-compatible namespace)."""

from collections.abc import Callable
import os
from typing import SupportsIndex, SupportsInt

from typing_extensions import CapsuleType

import nbrmm._typing
import nbrmm.statistics

from nbrmm import Stream

import contextlib as _contextlib
from collections.abc import Iterator as _Iterator
from typing import TypeVar as _TypeVar
from nbrmm._nbrmm import (
    available_device_memory as available_device_memory,
    get_current_device_resource as get_current_device_resource,
    get_per_device_resource as get_per_device_resource,
    is_initialized as is_initialized,
    reset_per_device_resource as reset_per_device_resource,
    set_current_device_resource as set_current_device_resource,
    set_per_device_resource as set_per_device_resource,
)
from nbrmm.logger import (
    disable_logging as disable_logging,
    enable_logging as enable_logging,
    get_log_filenames as get_log_filenames,
)
from nbrmm.mr import experimental as experimental


class DeviceMemoryResource:
    """
    Base class of every nbrmm memory resource.

    An nbrmm resource owns a librmm resource (``cuda::mr::any_resource``). C++ copies of it
    (inside buffers, adaptors, the per-device map or another extension) share its state and
    keep it alive on their own.

    Subclass it in Python and implement ``allocate(nbytes, stream)`` and
    ``deallocate(ptr, nbytes, stream)`` to write a resource in Python; such a resource can
    be the upstream of any adaptor, a buffer's ``mr`` and the current device resource.
    ``allocate`` must return a pointer aligned to 256 bytes (as every librmm resource does),
    and raise ``MemoryError`` when it cannot allocate.
    """

    def __init__(self) -> None:
        """
        Initialise a Python subclass (which must implement allocate and deallocate).
        """

    def allocate(self, nbytes: int, stream: Stream = ...) -> int:
        """
        Allocate ``nbytes`` bytes, ordered on ``stream``.

        Parameters
        ----------
        nbytes : int or str
            Size in bytes (``"1MiB"`` style strings accepted).
        stream : Stream or object with ``__cuda_stream__``, optional
            The stream the allocation is ordered on.
        alignment : int, optional
            Required alignment (a power of two up to ``2**40``), 256 by default. Any alignment is
            honoured, whatever the resource (larger ones by allocating a larger block).

        Returns
        -------
        int
            The device pointer (0 for 0 bytes). Free it with :meth:`deallocate` with the same
            size and alignment. nbrmm records the allocation (and keeps this resource alive)
            until then.

        Raises
        ------
        MemoryError
            If the resource cannot satisfy the request (``nbrmm.OutOfMemory`` when out of memory).
        RuntimeError
            If called from a Python callback of a resource this one depends on.
        """

    def deallocate(self, ptr: int, nbytes: int, stream: Stream = ...) -> None:
        """
        Free memory returned by :meth:`allocate`.

        Parameters
        ----------
        ptr : int
            The pointer returned by :meth:`allocate`.
        nbytes : int or str
            The size passed to :meth:`allocate`.
        stream : Stream or object with ``__cuda_stream__``, optional
            The stream the deallocation is ordered on.
        alignment : int, optional
            The alignment passed to :meth:`allocate`.

        Raises
        ------
        ValueError
            If ``ptr`` is not an outstanding allocation of this resource (never allocated,
            already freed, or allocated by another resource), or ``nbytes`` or ``alignment``
            differ from the allocation's.
        """

    @property
    def device(self) -> int:
        """
        The CUDA device that was current when the resource was created (-1 without a GPU).
        """

    @property
    def is_device_accessible(self) -> bool:
        """Whether the memory can be used by the device (always True)."""

    @property
    def is_host_accessible(self) -> bool:
        """Whether the memory can be read and written by the host."""

    def __eq__(self, other: object, /) -> bool:
        """Whether both objects use the same underlying resource."""

    def __hash__(self) -> int: ...

    def __nbrmm_resource__(self) -> CapsuleType:
        """
        An owning C++ copy of the resource, for C++ extensions (capsule protocol).

        Returns
        -------
        PyCapsule
            Named ``"nbrmm.device_resource:<librmm major>.<minor>"``, holding a heap-allocated
            ``cuda::mr::any_resource<cuda::mr::device_accessible>`` that the capsule owns. Use
            ``nbrmm::resource_from_python`` from ``<nbrmm/nbrmm.hpp>`` rather than calling this.
        """

    @staticmethod
    def _from_capsule(capsule: CapsuleType, host_accessible: bool = False) -> DeviceMemoryResource:
        """
        The resource object for a C++ resource (capsule protocol).

        Use ``nbrmm::resource_to_python`` from ``<nbrmm/nbrmm.hpp>`` rather than calling this.

        Parameters
        ----------
        capsule : PyCapsule
            Named ``"nbrmm.device_resource:<librmm major>.<minor>"`` (a copy is taken).
        host_accessible : bool, optional
            Whether memory from a resource of a type nbrmm does not know is host-accessible.

        Returns
        -------
        DeviceMemoryResource
            The Python object the resource came from, an instance of the concrete class when
            nbrmm knows the librmm type, or a generic ``DeviceMemoryResource``.
        """

    def __repr__(self) -> str: ...

class UpstreamResourceAdaptor(DeviceMemoryResource):
    """
    Base class of resources that adapt an upstream resource.

    The adaptor owns a C++ copy of its upstream (so C++ keeps the upstream alive) and also
    keeps the Python upstream object, returned as ``upstream_mr``.
    """

    def __init__(self, upstream_mr: DeviceMemoryResource) -> None:
        """
        Not to be called: the class is the base of the concrete adaptors (raises TypeError).
        """

    @property
    def upstream_mr(self, /) -> DeviceMemoryResource | None:
        """The upstream resource object this adaptor was created with."""

    def get_upstream(self) -> DeviceMemoryResource | None:
        """The upstream resource object this adaptor was created with."""

class CudaMemoryResource(DeviceMemoryResource):
    """
    Memory resource that allocates with ``cudaMalloc`` and frees with ``cudaFree``.

    Every allocation synchronizes the device; prefer a pool or arena for speed.
    """

    def __init__(self) -> None:
        """Create a resource on the current device."""

class CallbackMemoryResource(DeviceMemoryResource):
    """
    A memory resource that allocates and frees through Python callables.

    Parameters
    ----------
    allocate_func : callable
        ``allocate_func(nbytes: int, stream: Stream) -> int`` returns a pointer; it may raise
        (``MemoryError`` for a failed allocation), and the exception reaches the Python code
        whose call triggered the allocation.
    deallocate_func : callable
        ``deallocate_func(ptr: int, nbytes: int, stream: Stream) -> None``. Exceptions are
        reported as unraisable (a deallocation cannot fail).

    Notes
    -----
    Both callables are owned by the C++ resource and every C++ copy of it; they run with the
    GIL held. The memory is treated as device-accessible.
    """

    def __init__(self, allocate_func: Callable[[int, Stream], int], deallocate_func: Callable[[int, int, Stream], None]) -> None: ...

    @property
    def allocate_func(self, /) -> Callable[[int, Stream], int]:
        """The allocation callable."""

    @property
    def deallocate_func(self, /) -> Callable[[int, int, Stream], None]:
        """The deallocation callable."""

class ManagedMemoryResource(DeviceMemoryResource):
    """
    Memory resource that allocates with ``cudaMallocManaged`` and frees with ``cudaFree``.

    Managed (unified) memory migrates between host and device on demand, so it is both
    device- and host-accessible and can exceed the device's memory.
    """

    def __init__(self) -> None:
        """Create a resource on the current device."""

class SystemMemoryResource(DeviceMemoryResource):
    """
    Memory resource that allocates ordinary host memory (``operator new``) for use by the GPU.

    It needs a system where the device can access pageable host memory (system-allocated
    memory: Grace Hopper, or HMM on Linux); the constructor raises ``nbrmm.LogicError``
    elsewhere. A free first synchronizes its stream, since host memory is released at once.
    """

    def __init__(self) -> None:
        """Create a resource on the current device."""

class SamHeadroomMemoryResource(DeviceMemoryResource):
    """
    System-allocated memory (SAM) that prefers the GPU while it keeps ``headroom`` bytes free.

    Each allocation is ordinary host memory; the part that fits in the GPU's free memory less
    ``headroom`` is advised to live on the GPU, the rest on the host. Needs a system where
    the device can access pageable host memory (the constructor raises ``nbrmm.LogicError``
    elsewhere).

    Parameters
    ----------
    headroom : int or str
        GPU memory, in bytes, to leave free for other allocations (``"1GiB"`` accepted).
    """

    def __init__(self, headroom: int | str) -> None: ...

class PinnedHostMemoryResource(DeviceMemoryResource):
    """
    Memory resource that allocates pinned (page-locked) host memory with ``cudaHostAlloc``.

    The memory is host-accessible (``is_host_accessible`` is True) and mapped into the
    device's address space, so kernels can read it and copies to and from it are fast.
    """

    def __init__(self) -> None:
        """Create a resource on the current device."""

class CudaAsyncMemoryResource(DeviceMemoryResource):
    """
    Memory resource that allocates from a new CUDA memory pool (``cudaMallocFromPoolAsync``).

    The resource owns the pool (it is destroyed with the last copy of the resource);
    :meth:`pool_handle` returns it, for ``CudaAsyncViewMemoryResource`` or other libraries.

    Parameters
    ----------
    initial_pool_size : int or str, optional
        Bytes to allocate and free at once, so that the pool starts with that much memory.
        By default the pool starts empty.
    release_threshold : int or str, optional
        Memory the pool keeps across synchronizations; the rest is released to the system.
        By default the pool keeps everything it has.
    enable_ipc : bool, optional
        Allow exporting allocations to other processes through POSIX file descriptors.
    enable_fabric : bool, optional
        Allow exporting allocations through fabric handles (multi-node NVLink).

    Raises
    ------
    nbrmm.LogicError
        If the driver does not support memory pools or the requested export handles.
    """

    def __init__(self, initial_pool_size: int | str | None = None, release_threshold: int | str | None = None, enable_ipc: bool = False, enable_fabric: bool = False) -> None: ...

    def pool_handle(self) -> int:
        """The ``cudaMemPool_t`` of the pool, as an int."""

class CudaAsyncViewMemoryResource(DeviceMemoryResource):
    """
    Memory resource that allocates from an existing CUDA memory pool, which it does not own.

    Use it to share a pool with another library, or to use a pool created with custom
    flags (``cudaDeviceGetDefaultMemPool`` gives the device's default pool).

    Parameters
    ----------
    pool_handle : cudaMemPool_t, CUmemoryPool, int or resource
        The pool: a cuda-bindings handle, its value as an int, or an object with a
        ``pool_handle()`` method such as ``CudaAsyncMemoryResource``. The Python object
        passed is owned by the resource and by every C++ copy of it (in librmm's per-device
        map, in buffers, in adaptors), so a pool that the object owns outlives every use of
        the resource. A pool given as a plain int must outlive them by other means.
    """

    def __init__(self, pool_handle: SupportsInt | SupportsIndex | nbrmm._typing.HasPoolHandle) -> None: ...

    def pool_handle(self) -> int:
        """The ``cudaMemPool_t`` this resource allocates from, as an int."""

class PoolMemoryResource(UpstreamResourceAdaptor):
    """
    Coalescing best-fit suballocator over a pool of memory taken from ``upstream_mr``.

    The pool starts with ``initial_pool_size`` bytes and grows, when it must, by taking
    further chunks from the upstream (at least as large as the pool already is, within
    ``maximum_pool_size``). Memory returns to the upstream when the resource is destroyed.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource the pool takes its memory from; created on the current device.
    initial_pool_size : int or str, optional
        Bytes to take at once (a multiple of 256). By default half of the device's free
        memory, as in rmm (no more than ``maximum_pool_size`` when that is given).
    maximum_pool_size : int or str, optional
        Most bytes the pool may hold (a multiple of 256); unlimited by default.

    Raises
    ------
    nbrmm.InvalidArgumentError
        If a size is not a multiple of 256, or ``initial_pool_size`` exceeds
        ``maximum_pool_size`` (a ``ValueError``, and a ``RuntimeError`` as in rmm).
    ValueError
        If a size string does not parse.
    MemoryError
        If the upstream cannot provide the initial pool.
    """

    def __init__(self, upstream_mr: DeviceMemoryResource, initial_pool_size: int | str | None = None, maximum_pool_size: int | str | None = None) -> None: ...

    def pool_size(self) -> int:
        """Bytes the pool currently holds from its upstream (in use or free)."""

class ArenaMemoryResource(UpstreamResourceAdaptor):
    """
    Suballocator with a global arena and per-thread / per-stream arenas.

    The global arena takes ``arena_size`` bytes from ``upstream_mr`` at once and hands out
    superblocks (1 MiB or more) to the arenas of threads (default streams) and of other
    streams; larger requests are served by the global arena directly. It limits
    fragmentation and scales with many threads. Memory returns to the upstream when the
    resource is destroyed.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource the arena takes its memory from; created on the current device.
    arena_size : int or str, optional
        Size of the global arena (1 MiB to 1 TiB; rounded down to a multiple of 256). By
        default half of the device's free memory.
    dump_log_on_failure : bool, optional
        Write the arenas' state to the rmm log when an allocation fails.

    Notes
    -----
    The resource cannot report its upstream when it was created by C++ code: librmm's
    arena does not expose it (``upstream_mr`` is then None).
    """

    def __init__(self, upstream_mr: DeviceMemoryResource, arena_size: int | str | None = None, dump_log_on_failure: bool = False) -> None: ...

class FixedSizeMemoryResource(UpstreamResourceAdaptor):
    """
    Memory resource that hands out blocks of a single size.

    It takes chunks of ``block_size * blocks_to_preallocate`` bytes from ``upstream_mr`` (one
    at construction, another whenever all blocks are in use) and serves every request of at
    most ``block_size`` bytes with one block. Larger requests raise ``MemoryError``. Memory
    returns to the upstream when the resource is destroyed.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource the chunks come from; created on the current device.
    block_size : int or str, optional
        The block size, rounded up to a multiple of 256 (1 MiB by default).
    blocks_to_preallocate : int, optional
        Blocks per chunk taken from the upstream (128 by default, at least 1).
    """

    def __init__(self, upstream_mr: DeviceMemoryResource, block_size: int | str = 1048576, blocks_to_preallocate: int = 128) -> None: ...

    def get_block_size(self) -> int:
        """
        The block size in bytes (the requested size rounded up to a multiple of 256).
        """

class BinningMemoryResource(UpstreamResourceAdaptor):
    """
    Memory resource that serves each request from the bin of the smallest size that fits it.

    A bin has a maximum allocation size and a resource; requests larger than every bin go
    to ``upstream_mr``. With ``min_size_exponent`` and ``max_size_exponent`` the resource
    starts with one ``FixedSizeMemoryResource`` bin (over ``upstream_mr``) for each power of
    two from ``2**min_size_exponent`` to ``2**max_size_exponent`` bytes; :meth:`add_bin`
    adds more.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource for requests larger than every bin (and of the fixed-size bins);
        created on the current device.
    min_size_exponent, max_size_exponent : int, optional
        Both -1 (no initial bins, the default) or both in ``[0, 30]`` with
        ``min_size_exponent <= max_size_exponent``.

    Notes
    -----
    Each fixed-size bin takes 128 blocks of its size from ``upstream_mr`` at once. Add bins
    before the resource serves allocations: :meth:`add_bin` must not run concurrently with
    allocations.
    """

    def __init__(self, upstream_mr: DeviceMemoryResource, min_size_exponent: int = -1, max_size_exponent: int = -1) -> None: ...

    def add_bin(self, allocation_size: int | str, bin_resource: DeviceMemoryResource | None = None) -> None:
        """
        Add a bin for requests of at most ``allocation_size`` bytes.

        Requests larger than the next smaller bin and no larger than ``allocation_size``
        (rounded up to a multiple of 256) go to this bin.

        Parameters
        ----------
        allocation_size : int or str
            The largest request the bin serves.
        bin_resource : DeviceMemoryResource, optional
            The bin's resource; by default a new ``FixedSizeMemoryResource`` of blocks of
            ``allocation_size`` bytes over ``upstream_mr``. The binning resource (and every C++
            copy of it) keeps the bin resource alive. A second bin of the same size with a
            resource replaces nothing: the first one stays.
        """

    @property
    def bin_mrs(self, /) -> list[DeviceMemoryResource]:
        """The resources given to :meth:`add_bin`, in order (a new list)."""

class LimitingResourceAdaptor(UpstreamResourceAdaptor):
    """
    Adaptor that refuses allocations that would take its total beyond ``allocation_limit``.

    Each allocation counts its size rounded up to a multiple of 256 bytes. A request over
    the limit raises ``nbrmm.OutOfMemory`` (a ``MemoryError``) and changes nothing; so does
    a request that the upstream fails.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource that serves the allocations; created on the current device.
    allocation_limit : int or str
        The most bytes that may be allocated at once through this adaptor.
    """

    def __init__(self, upstream_mr: DeviceMemoryResource, allocation_limit: int | str) -> None: ...

    def get_allocated_bytes(self) -> int:
        """
        Bytes currently allocated through this adaptor (each allocation rounded up to 256).
        """

    def get_allocation_limit(self) -> int:
        """The allocation limit in bytes."""

class LoggingResourceAdaptor(UpstreamResourceAdaptor):
    """
    Adaptor that logs every allocation and free to a CSV file.

    The columns are ``Thread,Time,Action,Pointer,Size,Stream``; ``Action`` is ``allocate``,
    ``allocate failure`` or ``free``. The file is truncated when the adaptor is created and
    written through a buffer: call :meth:`flush` to see the latest lines.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource that serves the allocations; created on the current device.
    log_file_name : str or os.PathLike, optional
        The log file; ``$RMM_LOG_FILE`` when omitted. As in rmm, ``.dev<device id>`` is
        inserted before the extension (``log.csv`` becomes ``log.dev0.csv``) and the path is
        made absolute: :meth:`get_file_name` returns the result.

    Raises
    ------
    ValueError
        If no file name is given and ``RMM_LOG_FILE`` is not set.
    nbrmm.FileOpenError
        If the file cannot be opened (an ``OSError``, and a ``RuntimeError`` as in rmm).
    """

    def __init__(self, upstream_mr: DeviceMemoryResource, log_file_name: str | os.PathLike[str] | None = None) -> None: ...

    def flush(self) -> None:
        """Write buffered log lines to the file."""

    def get_file_name(self) -> str | None:
        """
        The absolute path of the log file (None for an adaptor made by C++ code).
        """

class StatisticsResourceAdaptor(UpstreamResourceAdaptor):
    """
    Adaptor that counts the bytes and allocations that pass through it.

    It keeps current, peak and total counts of bytes and of allocations, in a stack of
    frames: :meth:`push_counters` starts a fresh frame and :meth:`pop_counters` ends it,
    adding its counts to the frame below.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource that serves the allocations; created on the current device.
    """

    def __init__(self, upstream_mr: DeviceMemoryResource) -> None: ...

    @property
    def allocation_counts(self, /) -> nbrmm.statistics.Statistics:
        """
        The counters of the current frame, as an ``nbrmm.statistics.Statistics``.
        """

    def push_counters(self) -> nbrmm.statistics.Statistics:
        """
        Start a new frame of counters, all zero.

        Returns
        -------
        Statistics
            The counters of the frame that was current before the push.
        """

    def pop_counters(self) -> nbrmm.statistics.Statistics:
        """
        End the current frame; its counts are added to the frame below.

        Returns
        -------
        Statistics
            The counters of the frame that was popped.

        Raises
        ------
        IndexError
            If no frame was pushed.
        """

class TrackingResourceAdaptor(UpstreamResourceAdaptor):
    """
    Adaptor that records every outstanding allocation (pointer and size), to find leaks.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource that serves the allocations; created on the current device.
    capture_stacks : bool, optional
        Also record the C++ call stack of each allocation (slow).
    """

    def __init__(self, upstream_mr: DeviceMemoryResource, capture_stacks: bool = False) -> None: ...

    def get_allocated_bytes(self) -> int:
        """Bytes in the allocations that are outstanding."""

    def get_outstanding_allocations_str(self) -> str:
        """
        A text report of the outstanding allocations: pointer, size and, with
        ``capture_stacks``, the stack of each.
        """

    def log_outstanding_allocations(self) -> None:
        """
        Write :meth:`get_outstanding_allocations_str` to librmm's debug log (at debug
        level, so only when that level is enabled).
        """

class FailureCallbackResourceAdaptor(UpstreamResourceAdaptor):
    """
    Adaptor that calls ``callback(nbytes)`` when the upstream runs out of memory.

    When the upstream runs out of memory for a request of ``nbytes`` bytes (it raises
    ``nbrmm.OutOfMemory``, or a Python upstream raises ``MemoryError``), the adaptor calls
    ``callback(nbytes)`` (with the GIL). If it returns True, the allocation is tried again
    (and the callback called again if it fails again); if it returns False, the
    out-of-memory error reaches the caller. An exception raised by the callback reaches the
    caller instead. Other errors of the upstream are not retried.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource that serves the allocations; created on the current device.
    callback : callable
        ``callback(nbytes: int) -> bool``: free memory (e.g. spill, collect garbage) and
        return whether to retry.

    Notes
    -----
    The callable is owned by the C++ resource and every C++ copy of it, so it stays alive
    (and callable) as long as any of them, whatever Python does.
    """

    def __init__(self, upstream_mr: DeviceMemoryResource, callback: Callable[[int], bool]) -> None: ...

    @property
    def callback(self, /) -> Callable[[int], bool] | None:
        """The callback (None for an adaptor made by C++ code)."""

class PrefetchResourceAdaptor(UpstreamResourceAdaptor):
    """
    Adaptor that prefetches every new allocation to the current device, on the allocation's
    stream (``cudaMemPrefetchAsync``).

    Useful over managed memory; for other memory the prefetch does nothing.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource that serves the allocations; created on the current device.
    """

    def __init__(self, upstream_mr: DeviceMemoryResource) -> None: ...

class AlignedResourceAdaptor(UpstreamResourceAdaptor):
    """
    Adaptor that aligns allocations of at least ``alignment_threshold`` bytes to
    ``alignment``. (Not in rmm's Python API.)

    It over-allocates from the upstream by ``alignment - 256`` bytes and returns an aligned
    pointer inside the block. Smaller allocations, and all of them when ``alignment`` is
    256, pass through unchanged.

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource that serves the allocations; created on the current device.
    alignment : int, optional
        A power of two; values below 256 mean 256 (the default).
    alignment_threshold : int or str, optional
        Allocations smaller than this are not aligned (0 by default: all are).
    """

    def __init__(self, upstream_mr: DeviceMemoryResource, alignment: int = 256, alignment_threshold: int | str = 0) -> None: ...

    @property
    def alignment(self) -> int:
        """The alignment in bytes (at least 256)."""

    @property
    def alignment_threshold(self) -> int:
        """The size from which allocations are aligned."""

class ThreadSafeResourceAdaptor(UpstreamResourceAdaptor):
    """
    Adaptor that serializes every allocation and free with a mutex, making a resource that
    is not thread-safe usable from many threads. (Not in rmm's Python API.)

    Parameters
    ----------
    upstream_mr : DeviceMemoryResource
        The resource to protect; created on the current device.
    """

    def __init__(self, upstream_mr: DeviceMemoryResource) -> None: ...

_MR = _TypeVar("_MR", bound=DeviceMemoryResource)

@_contextlib.contextmanager
def using_device_resource(mr: _MR, device: int | None = None) -> _Iterator[_MR]:
    """Make ``mr`` the resource of ``device`` for the duration of a ``with`` block.

    The previous resource is restored on exit, also when the block raises. Both Python
    and C++ see ``mr`` inside the block (it is written to librmm's per-device map).

    Parameters
    ----------
    mr : DeviceMemoryResource
        The resource to use.
    device : int, optional
        The device; the current device when omitted.

    Yields
    ------
    DeviceMemoryResource
        ``mr``.
    """

def get_current_device_resource_type() -> type[DeviceMemoryResource]:
    """The class of the current device resource (read from librmm's per-device map)."""

__all__ = [
    "AlignedResourceAdaptor",
    "ArenaMemoryResource",
    "BinningMemoryResource",
    "CallbackMemoryResource",
    "CudaAsyncMemoryResource",
    "CudaAsyncViewMemoryResource",
    "CudaMemoryResource",
    "DeviceMemoryResource",
    "FailureCallbackResourceAdaptor",
    "FixedSizeMemoryResource",
    "LimitingResourceAdaptor",
    "LoggingResourceAdaptor",
    "ManagedMemoryResource",
    "PinnedHostMemoryResource",
    "PoolMemoryResource",
    "PrefetchResourceAdaptor",
    "SamHeadroomMemoryResource",
    "StatisticsResourceAdaptor",
    "SystemMemoryResource",
    "ThreadSafeResourceAdaptor",
    "TrackingResourceAdaptor",
    "UpstreamResourceAdaptor",
    "available_device_memory",
    "disable_logging",
    "enable_logging",
    "experimental",
    "get_current_device_resource",
    "get_current_device_resource_type",
    "get_log_filenames",
    "get_per_device_resource",
    "is_initialized",
    "reset_per_device_resource",
    "set_current_device_resource",
    "set_per_device_resource",
    "using_device_resource",
]
