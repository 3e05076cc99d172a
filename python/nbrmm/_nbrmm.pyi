"""nanobind bindings for librmm (RAPIDS Memory Manager)"""

import enum
from typing import Any

from nbrmm._pickle import _reduce_ex as __reduce_ex__


class CudaError(RuntimeError):
    """A CUDA runtime call made by librmm failed (e.g. no GPU or driver)."""

class LogicError(RuntimeError):
    """A librmm precondition failed."""

class BadAlloc(MemoryError):
    """A memory resource could not allocate the requested memory."""

class OutOfMemory(BadAlloc):
    """A memory resource ran out of memory."""

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

def get_device_info(device: int) -> dict:
    """
    Name, memory and compute capability of a device.

    Returns
    -------
    dict
        Keys ``name``, ``total_memory``, ``compute_capability``, ``multiprocessors``,
        ``pci_bus_id``.
    """

def get_versions() -> dict:
    """
    Versions of the CUDA driver and runtime nbrmm runs with.

    Returns
    -------
    dict
        ``cuda_driver`` and ``cuda_runtime`` as CUDA encodes them (e.g. 13000), 0 when
        unavailable, and ``nanobind``.
    """

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
        If ``obj`` is not stream-like, or ``flags`` is given together with ``obj``.
    nbrmm.CudaError
        If a new stream cannot be created (e.g. no GPU).
    """

    def __init__(self, obj: object | None = None, flags: CudaStreamFlags | None = None) -> None: ...

    def __cuda_stream__(self) -> tuple:
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
    def owner(self) -> object:
        """
        The wrapped Python object, or None when this Stream was not made from one.
        """

    def __eq__(self, arg: object, /) -> object: ...

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
        Creation flags of the streams.
    """

    def __init__(self, pool_size: int = 16, flags: CudaStreamFlags = CudaStreamFlags.SYNC_DEFAULT) -> None: ...

    def get_stream(self, stream_id: int | None = None) -> object:
        """
        The next stream of the pool, or the stream with index ``stream_id``. The returned Stream keeps the pool alive.
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
    """

    def __init__(self) -> None:
        """
        Initialise a Python subclass (which must implement allocate and deallocate).
        """

    def allocate(self, nbytes: object, stream: object = ..., *, alignment: int = 256) -> int:
        """
        Allocate ``nbytes`` bytes, ordered on ``stream``.

        Parameters
        ----------
        nbytes : int or str
            Size in bytes (``"1MiB"`` style strings accepted).
        stream : Stream or object with ``__cuda_stream__``, optional
            The stream the allocation is ordered on.
        alignment : int, optional
            Required alignment (a power of two), 256 by default.

        Returns
        -------
        int
            The device pointer. Free it with :meth:`deallocate` with the same size, stream
            ordering and alignment.

        Raises
        ------
        MemoryError
            If the resource cannot satisfy the request (``nbrmm.OutOfMemory`` when out of memory).
        """

    def deallocate(self, ptr: int, nbytes: object, stream: object = ..., *, alignment: int = 256) -> None:
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

    def __eq__(self, arg: object, /) -> object:
        """Whether both objects use the same underlying resource."""

    def __hash__(self) -> int: ...

    def __nbrmm_resource__(self) -> object:
        """
        An owning C++ copy of the resource, for C++ extensions (capsule protocol).

        Returns
        -------
        PyCapsule
            Named ``"nbrmm.device_resource:<librmm major>.<minor>"``, holding a heap-allocated
            ``cuda::mr::any_resource<cuda::mr::device_accessible>`` that the capsule owns. Use
            ``nbrmm::resource_from_python`` from ``<nbrmm/nbrmm.hpp>`` rather than calling this.
        """

    def __repr__(self) -> str: ...

class UpstreamResourceAdaptor(DeviceMemoryResource):
    """
    Base class of resources that adapt an upstream resource.

    The adaptor owns a C++ copy of its upstream (so C++ keeps the upstream alive) and also
    keeps the Python upstream object, returned as ``upstream_mr``.
    """

    @property
    def upstream_mr(self) -> object:
        """The upstream resource object this adaptor was created with."""

    def get_upstream(self) -> object:
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

    def __init__(self, allocate_func: object, deallocate_func: object) -> None: ...

    @property
    def allocate_func(self) -> object:
        """The allocation callable."""

    @property
    def deallocate_func(self) -> object:
        """The deallocation callable."""

def get_per_device_resource(device: int) -> object:
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
    """

def set_per_device_resource(device: int, mr: object) -> None:
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
    """

def get_current_device_resource() -> object:
    """
    The resource of the current device in librmm's per-device map.

    The same as ``get_per_device_resource(current device)``: whatever Python or C++ set last.
    """

def set_current_device_resource(mr: object) -> None:
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
        Required alignment (a power of two), 256 by default.

    Notes
    -----
    The buffer keeps ``mr`` and ``stream`` alive; its C++ part also owns a copy of the
    resource. Copies on the default stream synchronize; on any other stream they are
    asynchronous (synchronize the stream before reading the destination).
    """

    def __init__(self, nbytes: object = 0, *, mr: object | None = None, stream: object = ..., alignment: int = 256) -> None: ...

    def __del__(*args, **kwargs) -> Any: ...

    @property
    def ptr(self) -> int:
        """The device pointer as an int."""

    @property
    def size(self) -> int:
        """Size in bytes."""

    @property
    def nbytes(self) -> int:
        """Size in bytes."""

    def __len__(self) -> int: ...

    def __sizeof__(self) -> int: ...

    def capacity(self) -> int:
        """Allocated capacity in bytes (at least ``size``)."""

    @property
    def mr(self) -> object:
        """The resource object that allocated the memory and will free it."""

    @property
    def stream(self) -> object:
        """The stream the buffer's memory is ordered on."""

    @property
    def device(self) -> int:
        """The device the memory lives on."""

    @property
    def alignment(self) -> int:
        """The alignment the memory was allocated with."""

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has freed the memory."""

    def reserve(self, new_capacity: object, stream: object = ...) -> None:
        """
        Grow the capacity to at least ``new_capacity`` bytes, keeping the contents.
        """

    def resize(self, new_size: object, stream: object = ...) -> None:
        """
        Resize to ``new_size`` bytes on the buffer's own resource, keeping the prefix.
        """

    def shrink_to_fit(self, stream: object = ...) -> None:
        """Release unused capacity."""

    def copy(self, mr: object | None = None, stream: object | None = None) -> object:
        """
        A new buffer with the same contents.

        Parameters
        ----------
        mr : DeviceMemoryResource, optional
            Where to allocate the copy; the buffer's own resource by default (as rmm does).
        stream : Stream, optional
            The stream of the copy; the buffer's own stream by default.
        """

    def __copy__(self) -> object: ...

    def __deepcopy__(self, memo: object) -> object: ...

    def copy_to_host(self, ary: object | None = None, stream: object = ...) -> object:
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
        The destination.
        """

    def copy_from_host(self, ary: object, stream: object = ...) -> None:
        """
        Copy a C-contiguous host buffer of at most ``size`` bytes into the buffer.
        """

    def copy_from_device(self, cuda_ary: object, stream: object = ...) -> None:
        """
        Copy a C-contiguous device array (``__cuda_array_interface__``) of at most ``size`` bytes into the buffer.
        """

    def tobytes(self, stream: object = ...) -> bytes:
        """The contents as ``bytes`` (always synchronizes)."""

    def __bytes__(self) -> bytes: ...

    @staticmethod
    def to_device(b: object, stream: object = ..., mr: object | None = None) -> object:
        """
        A new buffer holding a copy of the host buffer ``b`` (allocated from ``mr``, default: the current device resource).
        """

    def prefetch(self, device: int | None = None, stream: object | None = None) -> None:
        """
        Prefetch managed memory to ``device`` (``cudaCpuDeviceId`` = -1 for the host); a no-op for memory that is not managed.
        """

    def close(self) -> None:
        """Free the memory now; any later use of the buffer raises ValueError."""

    def __enter__(self) -> object: ...

    def __exit__(self, exc_type: object | None, exc_value: object | None, traceback: object | None) -> None: ...

    @property
    def __cuda_array_interface__(self) -> dict:
        """
        CUDA array interface (version 3): a 1-D ``uint8`` array with its stream.
        """

    def __dlpack__(self, *, stream: object | None = None, **kwargs) -> object:
        """
        DLPack export (1-D ``uint8``); the consumer's ``stream`` is ordered after the buffer's stream. The capsule keeps the buffer alive.
        """

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(device_type, device_id)`` of the memory for DLPack."""

    def __repr__(self) -> str: ...

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

    def __init__(self, *, ptr: int = 0, size: object = 0, stream: object = ..., mr: object | None = None) -> None: ...

    def __del__(*args, **kwargs) -> Any: ...

    @staticmethod
    def to_device(b: object, stream: object = ..., mr: object | None = None) -> object:
        """A new DeviceBuffer holding a copy of the host buffer ``b``."""

def to_device(b: object, stream: object = ..., mr: object | None = None) -> object:
    """
    A new DeviceBuffer holding a copy of the host buffer ``b`` (allocated from ``mr``, default: the current device resource).
    """
