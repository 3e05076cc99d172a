"""nanobind bindings for librmm (RAPIDS Memory Manager)"""

from collections.abc import Callable, Sequence
import enum
import os
import types
from typing import Any, Self, SupportsIndex, SupportsInt

import numpy.typing
from typing_extensions import Buffer as _Buffer, CapsuleType

import nbrmm._typing
import nbrmm.statistics


def _raise_pending() -> None: ...

_exception_translator: CapsuleType = ...

class CudaError(RuntimeError):
    """
    A CUDA runtime call failed, or there is no usable CUDA driver or GPU for what was asked.
    """

class LogicError(RuntimeError):
    """A librmm precondition failed."""

class BadAlloc(MemoryError):
    """A memory resource could not allocate the requested memory."""

class OutOfMemory(BadAlloc):
    """A memory resource ran out of memory."""

class CudaUnavailableError(CudaError, BadAlloc):
    """
    There is no usable CUDA driver or GPU for what was asked (a CudaError and a BadAlloc).
    """

class ArgumentRangeError(ValueError, OverflowError):
    """
    An integer argument is out of range: a negative size, a size or pointer of 2**64 or more, an exponent outside the accepted interval.

    A ``ValueError``, and an ``OverflowError`` as rmm raises for such values.
    """

class InvalidArgumentError(ValueError, RuntimeError):
    """
    An argument that librmm or CUDA would reject, checked before the call (pool sizes that are not multiples of 256 or exceed the maximum, an empty stream pool, unknown stream flags or devices, pointers CUDA does not know).

    A ``ValueError``, and a ``RuntimeError`` as rmm raises for such arguments.
    """

class FileOpenError(OSError, RuntimeError):
    """
    A file could not be opened (a log file of ``LoggingResourceAdaptor``).

    An ``OSError``, and a ``RuntimeError`` as rmm raises.
    """

def _parse_size(s: int | str, param: str = 's') -> int:
    """
    A size argument as nbrmm reads it (int, or a string such as '1.5 GiB').
    """

def get_device_count() -> int:
    """
    Number of CUDA devices visible to this process.

    Returns
    -------
    int
        0 when there is no GPU or no usable driver (never raises).
    """

def get_current_device() -> int:
    """
    The current CUDA device of the calling thread, as librmm reports it.

    Returns
    -------
    int
        The device id, or -1 when there is no usable GPU.
    """

def set_current_device(device: int) -> None:
    """
    Make ``device`` the current CUDA device of the calling thread.

    Raises
    ------
    ValueError
        If the device does not exist.
    nbrmm.CudaUnavailableError
        Without a usable CUDA driver or GPU.
    """

def available_device_memory(device: int | None = None) -> tuple[int, int]:
    """
    Free and total memory of a device.

    Parameters
    ----------
    device : int, optional
        The device to query; the current device when omitted.

    Returns
    -------
    tuple[int, int]
        ``(free, total)`` in bytes.

    Raises
    ------
    nbrmm.CudaError
        Without a usable GPU.
    """

def get_device_info(device: int) -> nbrmm._typing.DeviceInfo:
    """
    Name, memory and compute capability of a device.

    Returns
    -------
    dict
        Keys ``name``, ``total_memory``, ``compute_capability``, ``multiprocessors``,
        ``pci_bus_id``.
    """

def _require_gpu(what: str) -> None:
    """
    Raise nbrmm.CudaUnavailableError ("<what> needs a GPU, and ...") without a usable GPU.
    """

def get_versions() -> nbrmm._typing.Versions:
    """
    Versions of the CUDA driver and runtime nbrmm runs with.

    Returns
    -------
    dict
        ``cuda_driver`` and ``cuda_runtime`` as CUDA encodes them (e.g. 13000), 0 when
        unavailable, and ``nanobind``.
    """

def _as_stream(stream: nbrmm._typing.CudaStreamLike) -> Stream:
    """A stream argument as nbrmm reads it (refusing None; rmm's as_stream)."""

class CudaStreamFlags(enum.IntEnum):
    """Flags for creating a new CUDA stream."""

    SYNC_DEFAULT = 0
    """The stream synchronizes with the legacy default stream."""

    NON_BLOCKING = 1
    """The stream does not synchronize with the legacy default stream."""

class Stream:
    """
    A CUDA stream.

    ``Stream()`` creates and owns a new stream (destroyed when the last object using it
    goes away). ``Stream(obj)`` wraps, without owning, any object that implements the
    ``__cuda_stream__`` protocol (CuPy, PyTorch, cuda.core, numba-cuda streams) or another
    ``Stream``, and keeps ``obj`` alive.

    Parameters
    ----------
    obj : object, optional
        The stream to wrap. When omitted, a new stream is created.
    flags : CudaStreamFlags, optional
        Creation flags of a new stream (only when ``obj`` is omitted).

    Raises
    ------
    TypeError
        If ``obj`` is not stream-like.
    ValueError
        If ``flags`` is given together with ``obj``.
    NotImplementedError
        If ``obj.__cuda_stream__()`` reports a protocol version other than 0.
    nbrmm.ArgumentRangeError
        If the handle ``obj`` gives is negative or 2**64 or more (a ``ValueError``, and the
        ``OverflowError`` rmm raises).
    nbrmm.InvalidArgumentError
        If ``flags`` is an int that is not a ``CudaStreamFlags`` value.
    nbrmm.CudaError
        If a new stream cannot be created (e.g. no GPU).
    """

    def __init__(self, obj: nbrmm._typing.CudaStreamLike | None = None, flags: CudaStreamFlags | None = None) -> None: ...

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: ``(version, handle)``."""

    def synchronize(self) -> None:
        """
        Block until all work queued on the stream has completed (releases the GIL).
        """

    def is_default(self) -> bool:
        """Whether this is the (legacy) default stream."""

    def is_per_thread_default(self) -> bool:
        """Whether this is the per-thread default stream."""

    @property
    def handle(self) -> int:
        """The raw ``cudaStream_t`` as an int."""

    @property
    def owner(self, /) -> nbrmm._typing.CudaStreamLike | None:
        """
        The wrapped Python object, or None when this Stream was not made from one.
        """

    def __eq__(self, other: object, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

DEFAULT_STREAM: Stream = ...

LEGACY_DEFAULT_STREAM: Stream = ...

PER_THREAD_DEFAULT_STREAM: Stream = ...

class CudaStreamPool:
    """
    A pool of CUDA streams handed out round-robin.

    Parameters
    ----------
    pool_size : int, optional
        Number of streams (16 by default; must be positive).
    flags : CudaStreamFlags, optional
        Creation flags of the streams (None: ``SYNC_DEFAULT``).
    """

    def __init__(self, pool_size: int = 16, flags: CudaStreamFlags | None = ...) -> None: ...

    def get_stream(self, stream_id: int | None = None) -> Stream:
        """
        The next stream of the pool, or the stream ``stream_id`` modulo the pool size. The returned Stream keeps the pool alive.
        """

    def get_pool_size(self) -> int:
        """Number of streams in the pool."""

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

    @property
    def upstream_mr(self, /) -> DeviceMemoryResource | None:
        """The upstream resource object this adaptor was created with."""

    def get_upstream(self) -> DeviceMemoryResource | None:
        """The upstream resource object this adaptor was created with."""

def _perform_waiting_frees() -> None:
    """
    Perform the frees that waited for a Python callback to return (run at interpreter exit).
    """

def _forget_waiting_frees() -> None:
    """
    Drop the waiting frees without performing them (run in a forked child).
    """

def _begin_exit() -> None:
    """
    Stop other threads from taking the GIL inside nbrmm (run at interpreter exit).
    """

def _abandon_thread_objects() -> None:
    """
    Turn off nanobind's leak report: threads still running at exit keep their objects.
    """

def _raw_outstanding(mr: object) -> int:
    """
    The number of allocations made with ``mr.allocate`` and not yet deallocated.
    """

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

def get_per_device_resource(device: int) -> DeviceMemoryResource:
    """
    The resource of ``device`` in librmm's per-device map.

    Returns the object that was set (from Python), or an nbrmm object for the resource that
    C++ code set: an instance of the concrete nbrmm class when nbrmm knows the type,
    otherwise a generic ``DeviceMemoryResource``.

    Parameters
    ----------
    device : int
        The device id.

    Raises
    ------
    ValueError
        If the device does not exist.
    nbrmm.CudaUnavailableError
        If ``device`` is not the current device and there is no usable CUDA driver or GPU.
    """

def set_per_device_resource(device: int, mr: DeviceMemoryResource) -> None:
    """
    Set the resource of ``device`` in librmm's per-device map.

    C++ code that reads the map (``rmm::mr::get_per_device_resource_ref``) sees it at once.
    The map owns the resource (and the Python object) until it is replaced.

    Parameters
    ----------
    device : int
        The device id.
    mr : DeviceMemoryResource
        The resource; it must have been created on ``device``.

    Raises
    ------
    TypeError
        If ``mr`` is not a resource.
    ValueError
        If the device does not exist or ``mr`` was created on another device.
    nbrmm.CudaUnavailableError
        If ``device`` is not the current device and there is no usable CUDA driver or GPU.
    """

def get_current_device_resource() -> DeviceMemoryResource:
    """
    The resource of the current device in librmm's per-device map.

    The same as ``get_per_device_resource(current device)``: whatever Python or C++ set last.
    """

def set_current_device_resource(mr: DeviceMemoryResource) -> None:
    """
    Set the resource of the current device in librmm's per-device map.

    Parameters
    ----------
    mr : DeviceMemoryResource
        The resource; it must have been created on the current device.
    """

def reset_per_device_resource(device: int) -> None:
    """
    Restore librmm's initial resource (a ``CudaMemoryResource``) for ``device``.
    """

def is_initialized() -> bool:
    """Whether librmm's per-device map has an entry for the current device."""

def _release_python_objects() -> None:
    """
    Remove Python objects from librmm's per-device map (run at interpreter exit).
    """

_release_after_atexit: CapsuleType = ...

class Buffer:
    """
    A block of device memory owned by Python, allocated from an nbrmm resource.

    Parameters
    ----------
    nbytes : int or str, optional
        Size in bytes (``"1MiB"`` style strings accepted). 0 by default.
    mr : DeviceMemoryResource, optional
        The resource to allocate from (and free to). Default: the current device resource,
        read from librmm's per-device map at call time.
    stream : Stream or object with ``__cuda_stream__``, optional
        The stream the allocation (and later the deallocation) is ordered on.
    alignment : int, optional
        Required alignment: a power of two up to ``2**40``, 256 by default. Honoured whatever
        the resource (larger alignments by allocating a larger block).

    Raises
    ------
    MemoryError
        If the resource cannot allocate (``nbrmm.OutOfMemory`` when it is out of memory, or
        ``nbrmm.BadAlloc`` for a size no resource can serve).
    TypeError, ValueError
        For an argument of the wrong type or value (the message names it).

    Notes
    -----
    The buffer keeps ``mr`` and ``stream`` alive; its C++ part also owns a copy of the
    resource. Copies on the default stream synchronize; on any other stream they are
    asynchronous (synchronize the stream before reading the destination).

    While a memoryview, NumPy array or DLPack tensor of the buffer is alive, :meth:`close`
    and a resize that would move the memory raise ``BufferError`` (as for ``bytearray``).
    """

    def __init__(self, nbytes: int | str = 0, *, mr: DeviceMemoryResource | None = None, stream: nbrmm._typing.CudaStreamLike = ..., alignment: int = 256) -> None: ...

    @property
    def ptr(self) -> int:
        """The device pointer as an int."""

    @property
    def size(self) -> int:
        """Size in bytes."""

    @property
    def nbytes(self) -> int:
        """Size in bytes."""

    def __len__(self) -> int:
        """Size in bytes (as ``size``)."""

    def __sizeof__(self) -> int: ...

    def capacity(self) -> int:
        """Allocated capacity in bytes (at least ``size``)."""

    @property
    def mr(self, /) -> DeviceMemoryResource:
        """The resource object that allocated the memory and will free it."""

    @property
    def stream(self, /) -> Stream:
        """The stream the buffer's memory is ordered on."""

    @property
    def device(self) -> int:
        """The device the memory lives on."""

    @property
    def alignment(self) -> int:
        """
        The alignment the memory was allocated with (the pointer is a multiple of it).
        """

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has freed the memory."""

    def reserve(self, new_capacity: int | str, stream: nbrmm._typing.CudaStreamLike = ...) -> None:
        """
        Grow the capacity to at least ``new_capacity`` bytes, keeping the contents.

        Raises
        ------
        BufferError
            If the memory would move while it is exported or in use by another thread.
        """

    def resize(self, new_size: int | str, stream: nbrmm._typing.CudaStreamLike = ...) -> None:
        """
        Resize to ``new_size`` bytes on the buffer's own resource, keeping the prefix.

        Raises
        ------
        BufferError
            If the memory would move while it is exported or in use by another thread.
        """

    def shrink_to_fit(self, stream: nbrmm._typing.CudaStreamLike = ...) -> None:
        """
        Release unused capacity.

        Raises
        ------
        BufferError
            If the memory would move while it is exported or in use by another thread.
        """

    def copy(self, mr: DeviceMemoryResource | None = None, stream: nbrmm._typing.CudaStreamLike | None = None) -> Self:
        """
        A new buffer with the same contents.

        Parameters
        ----------
        mr : DeviceMemoryResource, optional
            Where to allocate the copy; the buffer's own resource by default (as rmm does).
        stream : Stream, optional
            The stream of the copy; the buffer's own stream by default.
        """

    def __copy__(self) -> Self:
        """A copy on the buffer's own resource and stream (as :meth:`copy`)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        """A copy on the buffer's own resource and stream (as :meth:`copy`)."""

    def copy_to_host(self, ary: nbrmm._typing.HostBufferT | None = None, stream: nbrmm._typing.CudaStreamLike = ...) -> nbrmm._typing.HostBufferT:
        """
        Copy the contents to host memory.

        Parameters
        ----------
        ary : writable C-contiguous buffer, optional
            Destination of at least ``size`` bytes; a new ``numpy.uint8`` array when omitted.
        stream : Stream, optional
            Asynchronous unless it is the default stream.

        Returns
        -------
        numpy.ndarray or the type of ``ary``
            ``ary`` when given, otherwise a new one-dimensional ``numpy.uint8`` array of ``size``
            elements.
        """

    def copy_from_host(self, ary: _Buffer | numpy.typing.NDArray[Any], stream: nbrmm._typing.CudaStreamLike = ...) -> None:
        """
        Copy a C-contiguous host buffer of at most ``size`` bytes into the buffer.
        """

    def copy_from_device(self, cuda_ary: nbrmm._typing.CudaArrayLike, stream: nbrmm._typing.CudaStreamLike = ...) -> None:
        """
        Copy a C-contiguous device array (``__cuda_array_interface__``) of at most ``size`` bytes into the buffer.
        """

    def tobytes(self, stream: nbrmm._typing.CudaStreamLike = ...) -> bytes:
        """The contents as ``bytes`` (always synchronizes)."""

    def __bytes__(self) -> bytes:
        """The contents as ``bytes`` (as :meth:`tobytes`)."""

    @staticmethod
    def to_device(b: _Buffer | numpy.typing.NDArray[Any], stream: nbrmm._typing.CudaStreamLike = ..., mr: DeviceMemoryResource | None = None) -> Buffer:
        """
        A new buffer holding a copy of the host buffer ``b`` (allocated from ``mr``, default: the current device resource).
        """

    def prefetch(self, device: int | None = None, stream: nbrmm._typing.CudaStreamLike | None = None) -> None:
        """
        Prefetch managed memory to ``device`` (``cudaCpuDeviceId`` = -1 for the host); a no-op for memory that is not managed.
        """

    def close(self) -> None:
        """
        Free the memory now; any later use of the buffer raises ValueError.

        Closing a closed buffer does nothing.

        Raises
        ------
        BufferError
            While the buffer is exported (a memoryview, NumPy array or DLPack tensor of it is
            alive) or in use by another thread.
        """

    def __enter__(self) -> Self:
        """The buffer itself; leaving the ``with`` block closes it."""

    def __exit__(self, exc_type: type[BaseException] | None, exc_value: BaseException | None, traceback: types.TracebackType | None) -> None:
        """Close the buffer (see :meth:`close`)."""

    @property
    def __cuda_array_interface__(self, /) -> nbrmm._typing.CudaArrayInterface:
        """
        CUDA array interface (version 3): a 1-D ``uint8`` array with its stream.
        """

    def __dlpack__(self, *, stream: int | None = None, **kwargs: Any) -> CapsuleType:
        """
        DLPack export (1-D ``uint8``); the consumer's ``stream`` is ordered after the buffer's stream. The tensor keeps the buffer alive and counts as an export.
        """

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(device_type, device_id)`` of the memory for DLPack."""

    def __repr__(self) -> str: ...

    @staticmethod
    def _from_capsule(capsule: CapsuleType, stream: nbrmm._typing.CudaStreamLike | None = None) -> Buffer:
        """
        Adopt an ``rmm::device_buffer`` handed over by C++ (see ``<nbrmm/nbrmm.hpp>``); ``stream``, when given, is the object the buffer keeps as its stream (its handle must be the buffer's).
        """

class DeviceBuffer(Buffer):
    """
    rmm-compatible device buffer: ``DeviceBuffer(*, ptr=0, size=0, stream=DEFAULT_STREAM,
    mr=None)``.

    Parameters
    ----------
    ptr : int, optional
        Host or device pointer to copy ``size`` bytes from (0: leave uninitialised).
    size : int, optional
        Size in bytes.
    stream : Stream, optional
        The stream of the allocation and copy.
    mr : DeviceMemoryResource, optional
        The resource to allocate from; the current device resource by default.
    """

    def __init__(self, *, ptr: int = 0, size: int | str = 0, stream: nbrmm._typing.CudaStreamLike = ..., mr: DeviceMemoryResource | None = None) -> None: ...

    @staticmethod
    def to_device(b: _Buffer | numpy.typing.NDArray[Any], stream: nbrmm._typing.CudaStreamLike = ..., mr: DeviceMemoryResource | None = None) -> DeviceBuffer:
        """A new DeviceBuffer holding a copy of the host buffer ``b``."""

def to_device(b: _Buffer | numpy.typing.NDArray[Any], stream: nbrmm._typing.CudaStreamLike = ..., mr: DeviceMemoryResource | None = None) -> DeviceBuffer:
    """
    A new DeviceBuffer holding a copy of the host buffer ``b`` (allocated from ``mr``, default: the current device resource).
    """

def copy_ptr_to_host(db: int, hb: _Buffer | numpy.typing.NDArray[Any], stream: nbrmm._typing.CudaStreamLike = ...) -> None:
    """
    Copy ``len(hb)`` bytes from the device address ``db`` into the host buffer ``hb``.

    Parameters
    ----------
    db : int
        Address of the source: device, managed or page-locked host memory.
    hb : writable C-contiguous buffer
        The destination (``bytearray``, NumPy array, ...); its size is the byte count.
    stream : Stream or object with ``__cuda_stream__``, optional
        The stream the copy is ordered on. On the default stream the call waits for the
        copy; on any other it returns at once (synchronize before reading ``hb``).

    Raises
    ------
    TypeError
        If ``stream`` is None, ``db`` is not an int or ``hb`` has no buffer interface.
    BufferError
        If ``hb`` is read-only or not contiguous.
    nbrmm.ArgumentRangeError
        If ``db`` is negative or does not fit in 64 bits.
    nbrmm.InvalidArgumentError
        If ``db`` is not memory CUDA knows, or the range runs past its allocation.
    nbrmm.CudaError
        If CUDA fails (e.g. no GPU).
    """

def copy_host_to_ptr(hb: _Buffer | numpy.typing.NDArray[Any], db: int, stream: nbrmm._typing.CudaStreamLike = ...) -> None:
    """
    Copy the host buffer ``hb`` to the device address ``db``.

    Parameters
    ----------
    hb : C-contiguous buffer
        The source (``bytes``, ``bytearray``, NumPy array, ...); its size is the byte count.
    db : int
        Address of the destination: device, managed or page-locked host memory.
    stream : Stream or object with ``__cuda_stream__``, optional
        The stream the copy is ordered on. On the default stream the call waits for the
        copy; on any other it returns at once (keep ``hb`` alive and unchanged until the
        stream is synchronized).

    Raises
    ------
    TypeError
        If ``stream`` is None, ``db`` is not an int or ``hb`` has no buffer interface.
    BufferError
        If ``hb`` is not contiguous.
    nbrmm.ArgumentRangeError
        If ``db`` is negative or does not fit in 64 bits.
    nbrmm.InvalidArgumentError
        If ``db`` is not memory CUDA knows, or the range runs past its allocation.
    nbrmm.CudaError
        If CUDA fails (e.g. no GPU).
    """

def copy_device_to_ptr(d_src: int, d_dst: int, count: int, stream: nbrmm._typing.CudaStreamLike = ...) -> None:
    """
    Copy ``count`` bytes from the device address ``d_src`` to ``d_dst``.

    Parameters
    ----------
    d_src : int
        Address of the source.
    d_dst : int
        Address of the destination.
    count : int
        Number of bytes.
    stream : Stream or object with ``__cuda_stream__``, optional
        The stream the copy is ordered on. The call returns once the copy is queued (as in
        rmm, also on the default stream).

    Raises
    ------
    TypeError
        If ``stream`` is None or an address or ``count`` is not an int.
    nbrmm.ArgumentRangeError
        If an address or ``count`` is negative or does not fit in 64 bits.
    nbrmm.InvalidArgumentError
        If an address is not memory CUDA knows, or a range runs past its allocation.
    nbrmm.CudaError
        If CUDA fails (e.g. no GPU).
    """

class _CupyHook:
    """The call of nbrmm.allocators.cupy.CupyAllocator (its base class)."""

    def __init__(self, mr: DeviceMemoryResource | None, stream: Stream | None, device: int, cupy: tuple[Callable[[], int], Callable[[int], Any], type, type, Any, Stream, Any, Stream, Callable[[int, MemoryError], BaseException]]) -> None:
        """
        Bind ``mr`` (None: the current device resource at each call), ``stream`` (None: CuPy's current stream at each call), the device ``mr`` serves (-1: any) and the parts of CuPy the call uses (checked by nbrmm.allocators.cupy).
        """

    def __call__(self, nbytes: int, /) -> Any:
        """
        Allocate ``nbytes`` bytes for CuPy.

        Parameters
        ----------
        nbytes : int
            The size in bytes.

        Returns
        -------
        cupy.cuda.MemoryPointer
            A pointer to the start of a ``cupy.cuda.UnownedMemory`` whose owner holds the
            allocation; 0 bytes allocate nothing and give a null pointer.

        Raises
        ------
        cupy.cuda.memory.OutOfMemoryError
            If the resource cannot allocate (``__cause__`` is its ``MemoryError``).
        TypeError, ValueError
            If ``nbytes`` is not a non-negative int below 2**64, or the bound resource serves
            another device than CuPy's current one.
        """

    @property
    def mr(self) -> DeviceMemoryResource | None:
        """
        The bound resource, or None: the current device resource at each allocation.
        """

    @property
    def stream(self) -> Stream | None:
        """
        The fixed stream (an nbrmm.Stream), or None: CuPy's current stream at each allocation.
        """

def _torch_bind(mr: DeviceMemoryResource | dict[int, DeviceMemoryResource] | None) -> int:
    """
    The slot whose ``nbrmm_torch_alloc_<slot>`` function allocates from ``mr`` (and
    whose ``nbrmm_torch_free_<slot>`` frees what it allocated).

    Parameters
    ----------
    mr : DeviceMemoryResource, dict[int, DeviceMemoryResource] or None
        None: the current resource of the device torch asks for (slot 0). A resource: that
        resource, for the device it was created on. A dict: one resource per device.

    Returns
    -------
    int
        The slot. Equal bindings share a slot; a slot stays bound (and keeps its resources
        alive) until the process exits.

    Raises
    ------
    TypeError
        If ``mr`` is not a resource or a dict of them.
    ValueError
        If a resource was created on another device than its key, or every slot is taken.
    """

def _torch_outstanding() -> int:
    """
    The number of allocations made through slot 0 of the torch hook (the current
    resource) and not yet freed.
    """

_torch_slot_count: int = 16

class level_enum(enum.IntEnum):
    """
    Severity levels of librmm's debug logger, from the most verbose to ``off``.

    An ``IntEnum``: levels compare by severity (``level_enum.debug < level_enum.warn``).
    """

    trace = 0
    """Most verbose: every traced event."""

    debug = 1
    """Debugging messages."""

    info = 2
    """Informational messages."""

    warn = 3
    """Warnings."""

    error = 4
    """Errors."""

    critical = 5
    """Critical errors."""

    off = 6
    """Nothing is logged."""

    n_levels = 7
    """
    Not a level: the number of levels (rmm exposes it too; as a logging level it silences the logger like ``off``).
    """

def should_log(level: level_enum) -> bool:
    """
    Whether librmm's debug logger writes messages of ``level``.

    Parameters
    ----------
    level : level_enum
        The severity of a message.

    Returns
    -------
    bool
        True when ``level`` is at or above the logging level (see :func:`set_logging_level`).

    Raises
    ------
    TypeError
        If ``level`` is not a ``level_enum`` member (an int is refused, as in rmm).
    """

def set_logging_level(level: level_enum) -> None:
    """
    Set the least severe level that librmm's debug logger writes.

    Messages below ``level`` are dropped; ``level_enum.off`` silences the logger. Note that
    librmm is compiled with a minimum level: messages below it are never produced at all.

    Parameters
    ----------
    level : level_enum
        The new logging level.

    Raises
    ------
    TypeError
        If ``level`` is not a ``level_enum`` member (an int is refused, as in rmm).
    """

def get_logging_level() -> level_enum:
    """
    The least severe level that librmm's debug logger writes.

    Returns
    -------
    level_enum
        The logging level.
    """

def flush_logger() -> None:
    """Write out every message that librmm's debug logger has buffered."""

def _devices_with_resource() -> list[int]:
    """
    The devices that have an entry in librmm's per-device resource map, in order.
    """

def set_flush_level(level: level_enum) -> None:
    """
    Flush librmm's debug logger after every message of ``level`` or above.

    Parameters
    ----------
    level : level_enum
        The flush level.

    Raises
    ------
    TypeError
        If ``level`` is not a ``level_enum`` member (an int is refused, as in rmm).
    """

def get_flush_level() -> level_enum:
    """
    The level at or above which librmm's debug logger flushes after each message.

    Returns
    -------
    level_enum
        The flush level.
    """

def _history_configure(enabled: bool, devices: Sequence[int] | None, stacks: bool, max_events: int) -> None:
    """Start, reconfigure or stop recording (nbrmm.memory.record_history)."""

def _history_add_hook(code: types.CodeType, library: str) -> None:
    """Attribute allocations made under the function of `code` to `library`."""

def _history_recording() -> bool:
    """Whether any device is being recorded."""

def _history_data() -> tuple[list[str], list[tuple[int, int, int]], list[tuple[int, ...]], list[tuple[int, int, int, int, int, int, int, int, int, bool]], list[tuple[int, int, int, int, int, int, int, int, int, bool]], int]:
    """
    The recorded history: (strings, frames, stacks, events, live allocations, dropped).
    """

def _history_push_tag(name: str) -> int:
    """Push a tag on this thread's stack; returns the token that pops it."""

def _history_pop_tag(token: int) -> bool:
    """
    Take the tag pushed with `token` off this thread's stack; False when this thread has none such.
    """

def _history_current_tag() -> str | None:
    """The innermost tag of this thread, or None."""

_CATCH_ALL_NOTE: str = ...
