"""nanobind bindings for librmm (RAPIDS Memory Manager)"""

from collections.abc import Sequence
import types
from typing import Any

import numpy.typing
from typing_extensions import Buffer as _Buffer, CapsuleType

import nbrmm._typing

from nbrmm import (
    ArgumentRangeError as ArgumentRangeError,
    BadAlloc as BadAlloc,
    Buffer as Buffer,
    CudaError as CudaError,
    CudaStreamFlags as CudaStreamFlags,
    CudaStreamPool as CudaStreamPool,
    CudaUnavailableError as CudaUnavailableError,
    DeviceBuffer as DeviceBuffer,
    FileOpenError as FileOpenError,
    InvalidArgumentError as InvalidArgumentError,
    LogicError as LogicError,
    OutOfMemory as OutOfMemory,
    Stream as Stream,
)
from nbrmm.logger import level_enum as level_enum
from nbrmm.mr import (
    AlignedResourceAdaptor as AlignedResourceAdaptor,
    ArenaMemoryResource as ArenaMemoryResource,
    BinningMemoryResource as BinningMemoryResource,
    CallbackMemoryResource as CallbackMemoryResource,
    CudaAsyncMemoryResource as CudaAsyncMemoryResource,
    CudaAsyncViewMemoryResource as CudaAsyncViewMemoryResource,
    CudaMemoryResource as CudaMemoryResource,
    DeviceMemoryResource as DeviceMemoryResource,
    FailureCallbackResourceAdaptor as FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource as FixedSizeMemoryResource,
    LimitingResourceAdaptor as LimitingResourceAdaptor,
    LoggingResourceAdaptor as LoggingResourceAdaptor,
    ManagedMemoryResource as ManagedMemoryResource,
    PinnedHostMemoryResource as PinnedHostMemoryResource,
    PoolMemoryResource as PoolMemoryResource,
    PrefetchResourceAdaptor as PrefetchResourceAdaptor,
    SamHeadroomMemoryResource as SamHeadroomMemoryResource,
    StatisticsResourceAdaptor as StatisticsResourceAdaptor,
    SystemMemoryResource as SystemMemoryResource,
    ThreadSafeResourceAdaptor as ThreadSafeResourceAdaptor,
    TrackingResourceAdaptor as TrackingResourceAdaptor,
    UpstreamResourceAdaptor as UpstreamResourceAdaptor,
)
from nbrmm.mr.experimental import (
    CudaAsyncManagedMemoryResource as CudaAsyncManagedMemoryResource,
)


def _raise_pending() -> None: ...

_exception_translator: CapsuleType = ...

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

DEFAULT_STREAM: Stream = ...

LEGACY_DEFAULT_STREAM: Stream = ...

PER_THREAD_DEFAULT_STREAM: Stream = ...

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

def _lend_memory(nbytes: int, mr: DeviceMemoryResource | None, stream: nbrmm._typing.CudaStreamLike) -> tuple[int, CapsuleType]:
    """
    Allocate ``nbytes`` bytes from ``mr`` (None: the current device resource) on
    ``stream``, for a library that takes an opaque owner of the memory.

    Returns
    -------
    tuple[int, PyCapsule]
        The pointer (0 for 0 bytes) and its owner, which gives the memory back to the
        resource that allocated it, on ``stream``, when it dies.
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

_NOT_INITIALIZED_NOTE: str = ...
