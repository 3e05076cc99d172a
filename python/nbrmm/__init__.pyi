"""nbrmm: nanobind bindings for librmm, the RAPIDS Memory Manager.

One memory manager that Python and C++ agree on: the current device resource lives in
librmm's per-device map, every allocating call takes ``mr=``, and resources, buffers and
the Python callables behind them are kept alive by whoever uses them, C++ included.
"""

import enum
import types
from typing import Any, Self

import numpy.typing
from typing_extensions import Buffer as _Buffer, CapsuleType

import nbrmm._typing

from nbrmm.mr import DeviceMemoryResource

from nbrmm._nbrmm import (
    DEFAULT_STREAM as DEFAULT_STREAM,
    LEGACY_DEFAULT_STREAM as LEGACY_DEFAULT_STREAM,
    PER_THREAD_DEFAULT_STREAM as PER_THREAD_DEFAULT_STREAM,
    available_device_memory as available_device_memory,
    get_current_device as get_current_device,
    get_device_count as get_device_count,
    get_device_info as get_device_info,
    set_current_device as set_current_device,
    to_device as to_device,
)
from nbrmm import mr as mr, librmm, pylibrmm, rmm, statistics
from nbrmm.logger import (
    disable_logging as disable_logging,
    enable_logging as enable_logging,
    flush_logger as flush_logger,
    get_flush_level as get_flush_level,
    get_log_filenames as get_log_filenames,
    get_logging_level as get_logging_level,
    level_enum as level_enum,
    set_flush_level as set_flush_level,
    set_logging_level as set_logging_level,
    should_log as should_log,
)
from nbrmm._pickle import loads as loads, unpickling_resource as unpickling_resource
from nbrmm._reinitialize import (
    is_initialized as is_initialized,
    register_reinitialize_hook as register_reinitialize_hook,
    reinitialize as reinitialize,
    unregister_reinitialize_hook as unregister_reinitialize_hook,
)
from nbrmm._version import __git_commit__ as __git_commit__, __version__ as __version__
from nbrmm.rmm import RMMError as RMMError


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
            If the memory would move while it is exported or in use by a copy still running.
        """

    def resize(self, new_size: int | str, stream: nbrmm._typing.CudaStreamLike = ...) -> None:
        """
        Resize to ``new_size`` bytes on the buffer's own resource, keeping the prefix.

        Raises
        ------
        BufferError
            If the memory would move while it is exported or in use by a copy still running.
        """

    def shrink_to_fit(self, stream: nbrmm._typing.CudaStreamLike = ...) -> None:
        """
        Release unused capacity.

        Raises
        ------
        BufferError
            If the memory would move while it is exported or in use by a copy still running.
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
            alive) or in use by a copy or resize still running.
        """

    def __enter__(self) -> Self:
        """
        The buffer itself; leaving the ``with`` block closes it (a closed buffer raises ValueError, as a closed file does).
        """

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

def get_include() -> str:
    """The folder holding ``nbrmm/nbrmm.hpp``, nbrmm's C++ API for extensions.

    Returns
    -------
    str
        Add it to the include path of a C++ extension (together with librmm's headers).
    """

def _at_exit() -> None: ...

__all__ = [
    "ArgumentRangeError",
    "BadAlloc",
    "Buffer",
    "CudaError",
    "CudaStreamFlags",
    "CudaStreamPool",
    "CudaUnavailableError",
    "DEFAULT_STREAM",
    "DeviceBuffer",
    "FileOpenError",
    "InvalidArgumentError",
    "LEGACY_DEFAULT_STREAM",
    "LogicError",
    "OutOfMemory",
    "PER_THREAD_DEFAULT_STREAM",
    "RMMError",
    "Stream",
    "__git_commit__",
    "__version__",
    "available_device_memory",
    "disable_logging",
    "enable_logging",
    "flush_logger",
    "get_current_device",
    "get_device_count",
    "get_device_info",
    "get_flush_level",
    "get_include",
    "get_log_filenames",
    "get_logging_level",
    "is_initialized",
    "level_enum",
    "loads",
    "mr",
    "register_reinitialize_hook",
    "reinitialize",
    "set_current_device",
    "set_flush_level",
    "set_logging_level",
    "should_log",
    "to_device",
    "unpickling_resource",
    "unregister_reinitialize_hook",
]
