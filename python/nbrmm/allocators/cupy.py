"""CuPy allocator hooks: CuPy memory from nbrmm resources.

Examples
--------
>>> import cupy, nbrmm
>>> from nbrmm.allocators.cupy import cupy_allocator, rmm_cupy_allocator
>>> cupy.cuda.set_allocator(rmm_cupy_allocator)      # the current device resource
>>> arena = nbrmm.mr.ArenaMemoryResource(nbrmm.mr.CudaMemoryResource())
>>> with cupy.cuda.using_allocator(cupy_allocator(mr=arena)):
...     x = cupy.arange(10)                          # allocated from ``arena``

Each allocation is handed to CuPy as a ``cupy.cuda.MemoryPointer`` to a
``cupy.cuda.UnownedMemory`` (:data:`Memory`) whose owner holds the allocation. When CuPy
drops the memory, the owner goes with it: the memory returns to the resource that
allocated it, on the stream it was allocated on, even if the current resource has
changed since. A failed allocation raises
``cupy.cuda.memory.OutOfMemoryError`` (chained to nbrmm's error).
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbrmm import _nbrmm
from nbrmm._args import check_size as _check_size
from nbrmm._args import stream_for as _stream_for
from nbrmm._nbrmm import Stream  # rmm.allocators.cupy has it too
from nbrmm.allocators import _Missing
from nbrmm.memory import _register_hook

if TYPE_CHECKING:
    from nbrmm._typing import CudaStreamLike

_missing: _Missing | None

try:
    import cupy as _cupy
    from cupy.cuda import memory as _cupy_memory
except ImportError as exc:  # as in rmm, the module imports; its hooks raise when used
    _missing = _Missing("cupy", "CuPy (the 'cupy' package for your CUDA version, e.g. "
                        "cupy-cuda13x)", exc)
else:
    _missing = None
    # What each allocation uses, bound once (nothing of CuPy is called at import).
    _get_device_id = _cupy.cuda.get_device_id
    _get_current_stream = _cupy.cuda.get_current_stream
    _UnownedMemory = _cupy.cuda.UnownedMemory
    _MemoryPointer = _cupy.cuda.MemoryPointer
    _OutOfMemoryError = _cupy_memory.OutOfMemoryError
    # CuPy's default streams, as nbrmm's Streams of the same handles (CuPy's null stream
    # is the legacy default stream, spelled 0; ``ptds`` is the per-thread default stream).
    _CUPY_NULL_STREAM = _cupy.cuda.Stream.null
    _CUPY_PER_THREAD_STREAM = _cupy.cuda.Stream.ptds

_lend_memory = _nbrmm._lend_memory
_DEFAULT_STREAM = _nbrmm.DEFAULT_STREAM
_PER_THREAD_DEFAULT_STREAM = _nbrmm.PER_THREAD_DEFAULT_STREAM


def _type_name(obj: object) -> str:
    cls = type(obj)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


class CupyAllocator:
    """A CuPy allocator: ``allocator(nbytes) -> cupy.cuda.MemoryPointer``.

    Use it with ``cupy.cuda.set_allocator`` or ``cupy.cuda.using_allocator``. Made by
    :func:`cupy_allocator` (``CupyAllocator(mr, stream)`` is the same).

    Parameters
    ----------
    mr : DeviceMemoryResource, optional
        The resource to allocate from. None (the default): the current device resource,
        read from librmm's per-device map at each allocation.
    stream : Stream or object with ``__cuda_stream__``, optional
        The stream every allocation is ordered on (and later freed on). None (the
        default): CuPy's current stream at each allocation.

    Raises
    ------
    TypeError
        If ``mr`` is not an nbrmm resource or ``stream`` is not stream-like.
    ModuleNotFoundError
        If CuPy cannot be imported.

    Notes
    -----
    Each call allocates ``nbytes`` bytes and returns a ``cupy.cuda.MemoryPointer`` to a
    ``cupy.cuda.UnownedMemory`` whose owner (an opaque object, not an nbrmm one: CuPy keeps
    some memory until the process ends) gives the memory back when CuPy drops it. A
    ``MemoryError`` of the resource is raised as ``cupy.cuda.memory.OutOfMemoryError``
    whose ``__cause__`` is that error, so that CuPy's retry logic runs; 0 bytes allocate
    nothing and give a null pointer, as CuPy's own allocators do.
    """

    __slots__ = ("_device", "_mr", "_stream")

    _mr: _nbrmm.DeviceMemoryResource | None
    _stream: Stream | None
    _device: int

    def __init__(
        self,
        mr: _nbrmm.DeviceMemoryResource | None = None,
        stream: CudaStreamLike | None = None,
    ) -> None:
        if _missing is not None:
            _missing.raise_for("nbrmm.allocators.cupy.CupyAllocator")
        device = -1
        if mr is not None:
            if not isinstance(mr, _nbrmm.DeviceMemoryResource):
                raise TypeError(
                    f"mr: expected an nbrmm.mr.DeviceMemoryResource, got {_type_name(mr)}"
                )
            device = mr.device
        fixed: Stream | None = None
        if stream is not None:
            if isinstance(stream, Stream):
                fixed = _nbrmm._as_stream(stream)  # itself (refused if never initialized)
            else:
                fixed = _stream_for(stream, "stream")
        self._mr = mr
        self._stream = fixed
        self._device = device  # the device ``mr`` serves; -1: any (or the current one)

    def __call__(self, nbytes: int, /) -> Any:
        """Allocate ``nbytes`` bytes for CuPy.

        Parameters
        ----------
        nbytes : int
            The size in bytes.

        Returns
        -------
        cupy.cuda.MemoryPointer
            A pointer to the start of a :data:`Memory` that owns the allocation.

        Raises
        ------
        cupy.cuda.memory.OutOfMemoryError
            If the resource cannot allocate (``__cause__`` is its ``MemoryError``).
        TypeError, ValueError
            If ``nbytes`` is not a non-negative int below 2**64, or the bound resource
            serves another device than CuPy's current one.
        """
        if type(nbytes) is not int or nbytes < 0 or nbytes >> 64:
            nbytes = _check_size(nbytes, "nbytes")
        device = _get_device_id()
        if self._device >= 0 and device != self._device:
            raise ValueError(
                f"mr: the resource serves device {self._device}, but CuPy is allocating "
                f"on device {device}"
            )
        stream: Any = self._stream
        if stream is None:
            stream = _get_current_stream(device)
            if stream is _CUPY_NULL_STREAM:
                stream = _DEFAULT_STREAM
            elif stream is _CUPY_PER_THREAD_STREAM:
                stream = _PER_THREAD_DEFAULT_STREAM
            # Any other CuPy stream goes to the buffer as it is (through
            # ``__cuda_stream__``): the buffer keeps it alive until the memory is freed.
        try:
            ptr, owner = _lend_memory(nbytes, self._mr, stream)
        except MemoryError as error:
            if isinstance(error, _OutOfMemoryError):
                raise
            raise _cupy_out_of_memory(nbytes, error) from error
        return _MemoryPointer(_UnownedMemory(ptr, nbytes, owner, device), 0)

    @property
    def mr(self) -> _nbrmm.DeviceMemoryResource | None:
        """The bound resource, or None: the current device resource at each allocation."""
        return self._mr

    @property
    def stream(self) -> Stream | None:
        """The fixed stream (an nbrmm.Stream), or None: CuPy's current stream at each
        allocation."""
        return self._stream

    def __repr__(self) -> str:
        return f"<nbrmm.allocators.cupy.CupyAllocator mr={self._mr!r} stream={self._stream!r}>"


def cupy_allocator(
    mr: _nbrmm.DeviceMemoryResource | None = None, stream: CudaStreamLike | None = None
) -> CupyAllocator:
    """Make a CuPy allocator that allocates from ``mr``.

    Parameters
    ----------
    mr : DeviceMemoryResource, optional
        The resource to allocate from. None (the default): the current device resource,
        read from librmm's per-device map at each allocation.
    stream : Stream or object with ``__cuda_stream__``, optional
        The stream every allocation is ordered on (and later freed on). None (the
        default): CuPy's current stream at each allocation.

    Returns
    -------
    CupyAllocator
        ``allocator(nbytes) -> cupy.cuda.MemoryPointer``, for ``cupy.cuda.set_allocator``
        or ``cupy.cuda.using_allocator``. It keeps ``mr`` and ``stream`` alive, and every
        allocation keeps its resource (and stream) alive until CuPy frees it.

    Raises
    ------
    TypeError
        If ``mr`` is not an nbrmm resource or ``stream`` is not stream-like.
    ModuleNotFoundError
        If CuPy cannot be imported.
    """
    if _missing is not None:
        _missing.raise_for("nbrmm.allocators.cupy.cupy_allocator")
    return CupyAllocator(mr, stream)


rmm_cupy_allocator: Callable[[int], Any]
Memory: type | None
if _missing is None:
    #: The rmm-compatible hook: ``rmm_cupy_allocator(nbytes)`` allocates from the current
    #: device resource on CuPy's current stream.
    rmm_cupy_allocator = CupyAllocator()

    #: The class of the memory objects behind the MemoryPointers the allocators return:
    #: CuPy's ``cupy.cuda.UnownedMemory``, whose owner (``_owner``) holds the allocation.
    Memory = _UnownedMemory
else:
    rmm_cupy_allocator = _missing.function(
        "nbrmm.allocators.cupy.rmm_cupy_allocator",
        "The rmm-compatible CuPy hook (CuPy is not available: calling it raises "
        "ModuleNotFoundError).",
    )
    Memory = None


def _cupy_out_of_memory(nbytes: int, error: MemoryError) -> Exception:
    """CuPy's OutOfMemoryError for ``nbytes``, with nbrmm's out-of-memory report (what the
    resource chain and the memory history hold) in its message where ``error`` has one."""
    oom: Exception = _OutOfMemoryError(nbytes, -1)
    report = getattr(error, "report", None)
    if report is not None:
        oom.args = ("\n".join([str(oom.args[0]) if oom.args else "", *report.lines()]),)
        oom.report = report  # type: ignore[attr-defined]
    return oom


# The memory history attributes what this hook allocates to CuPy.
_register_hook(CupyAllocator.__call__, "cupy")


def _uninstall_at_exit() -> None:
    """Stop CuPy from holding an nbrmm allocator past exit.

    CuPy keeps its global allocator in a C-level variable that interpreter shutdown never
    clears; an nbrmm allocator left there would keep its resource objects alive for good.
    CuPy falls back to its raw allocator; memory already handed to CuPy still returns to
    the resource that allocated it.
    """
    if _missing is not None:
        return
    try:
        if isinstance(_cupy_memory.get_allocator(), CupyAllocator):
            _cupy_memory.set_allocator(None)
    except Exception:  # noqa: BLE001 - e.g. inside using_allocator: nothing to undo there
        pass


atexit.register(_uninstall_at_exit)

#: This module. Its namespace refers to it, so that the interpreter clears the namespace at
#: exit (letting go of the Streams in it) also where something of it outlives the module,
#: such as an allocator that CuPy keeps.
_this_module = __import__("sys").modules[__name__]

__all__ = ["CupyAllocator", "Memory", "cupy_allocator", "rmm_cupy_allocator"]
