"""CuPy allocator hooks: CuPy memory from nbrmm resources.

Examples
--------
>>> import cupy, nbrmm
>>> from nbrmm.allocators.cupy import cupy_allocator, rmm_cupy_allocator
>>> cupy.cuda.set_allocator(rmm_cupy_allocator)      # the current device resource
>>> arena = nbrmm.mr.ArenaMemoryResource(nbrmm.mr.CudaMemoryResource())
>>> with cupy.cuda.using_allocator(cupy_allocator(mr=arena)):
...     x = cupy.arange(10)                          # allocated from ``arena``

Each allocation is a ``cupy.cuda.MemoryPointer`` to an :class:`Memory` that owns a C++
copy of its resource: the memory returns to that resource, on the stream it was allocated
on, when CuPy drops it, even if the current resource has changed since. A failed
allocation raises ``cupy.cuda.memory.OutOfMemoryError`` (chained to nbrmm's error).
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbrmm import _nbrmm
from nbrmm._nbrmm import Stream  # noqa: F401 - rmm.allocators.cupy has it too
from nbrmm.allocators import _Missing

if TYPE_CHECKING:
    from nbrmm._typing import CudaStreamLike

_missing: _Missing | None

try:
    import cupy.cuda.memory as _cupy_memory
    import cupy.cuda.stream as _cupy_stream
except ImportError as exc:  # as in rmm, the module imports; its hooks raise when used
    _missing = _Missing("cupy", "CuPy (the 'cupy' package for your CUDA version, e.g. "
                        "cupy-cuda13x)", exc)
else:
    _missing = None
    try:
        import cupy_backends.cuda.stream as _cupy_backends_stream
    except ImportError:  # older CuPy: the current stream is read through cupy.cuda.stream
        _cupy_backends_stream = None


def _set_paths(*, stream_by_device: bool = True) -> None:
    """Prepare the hook for this CuPy, choosing how it reads CuPy's current stream.

    Parameters
    ----------
    stream_by_device : bool, optional
        Read CuPy's current stream per device through ``cupy_backends`` (where this CuPy
        has it), rather than through ``cupy.cuda.stream.get_current_stream_ptr``.
    """
    _nbrmm._cupy_init(
        _cupy_memory,
        _cupy_stream,
        _cupy_backends_stream,
        stream_by_device=stream_by_device,
    )


if _missing is None:
    _set_paths()


def cupy_allocator(
    mr: _nbrmm.DeviceMemoryResource | None = None, stream: CudaStreamLike | None = None
) -> Callable[[int], Any]:
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
        allocation keeps its resource alive until CuPy frees it.

    Raises
    ------
    TypeError
        If ``mr`` is not an nbrmm resource or ``stream`` is not stream-like.
    ModuleNotFoundError
        If CuPy cannot be imported.
    """
    if _missing is not None:
        _missing.raise_for("nbrmm.allocators.cupy.cupy_allocator")
    return _nbrmm._cupy_allocator(mr, stream)


rmm_cupy_allocator: Callable[[int], Any]
CupyAllocator: type | None
Memory: type | None
if _missing is None:
    #: The rmm-compatible hook: ``rmm_cupy_allocator(nbytes)`` allocates from the current
    #: device resource on CuPy's current stream.
    rmm_cupy_allocator = cupy_allocator()

    #: The class of the allocators made by :func:`cupy_allocator`.
    CupyAllocator = type(rmm_cupy_allocator)

    #: The class of the memory objects behind the MemoryPointers the allocators return.
    Memory = _nbrmm._cupy_memory_type()
else:
    rmm_cupy_allocator = _missing.function(
        "nbrmm.allocators.cupy.rmm_cupy_allocator",
        "The rmm-compatible CuPy hook (CuPy is not available: calling it raises "
        "ModuleNotFoundError).",
    )
    CupyAllocator = Memory = None


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
        if CupyAllocator is not None and isinstance(_cupy_memory.get_allocator(), CupyAllocator):
            _cupy_memory.set_allocator(None)
    except Exception:  # noqa: BLE001 - e.g. inside using_allocator: nothing to undo there
        pass


atexit.register(_uninstall_at_exit)

__all__ = ["CupyAllocator", "Memory", "cupy_allocator", "rmm_cupy_allocator"]
