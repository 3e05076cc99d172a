"""Numba external memory manager (EMM plugin): numba-cuda device memory from nbrmm.

Examples
--------
Through the environment, before Numba creates its CUDA context::

    NUMBA_CUDA_MEMORY_MANAGER=nbrmm.allocators.numba python script.py

or in code (also before any CUDA use by Numba):

>>> from numba import cuda
>>> from nbrmm.allocators.numba import RMMNumbaManager, numba_manager
>>> cuda.set_memory_manager(RMMNumbaManager)             # the current device resource
>>> cuda.set_memory_manager(numba_manager(mr=resource))  # or a chosen resource

Device arrays are :class:`nbrmm.Buffer` objects allocated on the default stream (the EMM
interface has no stream); each is freed to the resource that allocated it.
"""

from __future__ import annotations

from collections import namedtuple as _namedtuple
from collections.abc import Callable
from typing import Any

from nbrmm.allocators import _Missing
from nbrmm.memory import _register_hook

# Numba has no type information: its classes (the manager's base included) are Any.
_missing: _Missing | None = None
try:
    from numba import cuda as _cuda
    from numba.cuda import HostOnlyCUDAMemoryManager, IpcHandle, MemoryPointer
except ImportError as exc:  # as in rmm's other hooks, the module imports; use raises
    _missing = _Missing("numba", "Numba's CUDA target (the 'numba-cuda' package, which "
                        "provides numba.cuda)", exc)
else:
    try:
        from cuda.bindings.driver import CUdeviceptr as _CUdeviceptr
        from cuda.bindings.driver import cuIpcGetMemHandle as _cuIpcGetMemHandle
    except ImportError as exc:
        _missing = _Missing("cuda.bindings", "the 'cuda-bindings' package (a dependency "
                            "of numba-cuda)", exc)
    try:
        from numba.cuda.cudadrv.driver import MemoryInfo as _MemoryInfo
    except ImportError:  # pragma: no cover - older numba-cuda layouts
        _MemoryInfo = _namedtuple("MemoryInfo", "free,total")  # type: ignore[no-redef,name-match]

if _missing is not None:

    class HostOnlyCUDAMemoryManager:  # type: ignore[no-redef]  # noqa: D101 - the stand-in base
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            assert _missing is not None
            _missing.raise_for("nbrmm.allocators.numba.RMMNumbaManager")

from nbrmm import DEFAULT_STREAM as _DEFAULT_STREAM
from nbrmm import Buffer as _Buffer
from nbrmm import available_device_memory as _available_device_memory
from nbrmm.mr import DeviceMemoryResource as _DeviceMemoryResource


def _release(key: int, allocations: dict[int, Any]) -> Callable[[], None]:
    """A finalizer that drops the buffer stored under ``key`` (which frees it)."""

    def finalizer() -> None:
        # After a context reset Numba has already emptied ``allocations``.
        allocations.pop(key, None)

    return finalizer


class RMMNumbaManager(HostOnlyCUDAMemoryManager):  # type: ignore[misc]  # a base of type Any
    """Numba external memory manager that allocates device memory from nbrmm.

    Host (pinned) memory is left to Numba. Set it with ``numba.cuda.set_memory_manager``
    or ``NUMBA_CUDA_MEMORY_MANAGER=nbrmm.allocators.numba``.

    Attributes
    ----------
    mr : DeviceMemoryResource or None
        The resource to allocate from; None (here) means the current device resource at
        each allocation. :func:`numba_manager` makes a subclass bound to a resource.
    """

    mr: _DeviceMemoryResource | None = None

    def initialize(self) -> None:
        """Nothing to set up: the memory comes from nbrmm resources."""

    def memalloc(self, size: int) -> MemoryPointer:
        """Allocate ``size`` bytes of device memory from :attr:`mr`.

        Returns
        -------
        numba.cuda.MemoryPointer
            The memory; it is freed (to the resource that allocated it) when Numba
            finalizes the pointer.
        """
        mr = self.mr
        if mr is not None and mr.device >= 0:
            device = self.context.device.id
            if mr.device != device:
                raise ValueError(
                    f"mr: the resource serves device {mr.device}, but Numba is "
                    f"allocating on device {device}"
                )
        buf = _Buffer(size, mr=mr, stream=_DEFAULT_STREAM)
        key = id(buf)
        # ``allocations`` comes from HostOnlyCUDAMemoryManager and is emptied when the
        # context is reset, which frees every buffer still held.
        self.allocations[key] = buf
        return MemoryPointer(
            self.context,
            _CUdeviceptr(buf.ptr),
            size,
            finalizer=_release(key, self.allocations),
        )

    def get_ipc_handle(self, memory: MemoryPointer) -> IpcHandle:
        """An IPC handle for ``memory``, with its offset inside the underlying block.

        Pool-like resources hand out parts of larger ``cudaMalloc`` blocks, and CUDA IPC
        works on whole blocks: the handle names the block and the offset of ``memory``.
        """
        start, _ = _cuda.cudadrv.driver.device_extents(memory)
        _, handle = _cuIpcGetMemHandle(start)
        offset = int(memory.handle) - int(start)
        source_info = _cuda.current_context().device.get_device_identity()
        return IpcHandle(memory, handle, memory.size, source_info, offset=offset)

    def get_memory_info(self) -> _MemoryInfo:
        """Free and total memory of the context's device, in bytes.

        Returns
        -------
        MemoryInfo
            ``(free, total)`` as the driver reports them. Memory that a pool holds but
            does not use counts as used.
        """
        free, total = _available_device_memory(self.context.device.id)
        return _MemoryInfo(free=free, total=total)

    @property
    def interface_version(self) -> int:
        """The EMM interface version implemented (1)."""
        return 1


# The memory history attributes what this manager allocates to Numba.
_register_hook(RMMNumbaManager.memalloc, "numba")


def numba_manager(mr: _DeviceMemoryResource | None = None) -> type[RMMNumbaManager]:
    """Make a Numba memory manager class that allocates from ``mr``.

    Parameters
    ----------
    mr : DeviceMemoryResource, optional
        The resource to allocate from; None: the current device resource at each
        allocation (the same as :class:`RMMNumbaManager`).

    Returns
    -------
    type
        A subclass of :class:`RMMNumbaManager` with ``mr`` bound, for
        ``numba.cuda.set_memory_manager``.

    Raises
    ------
    TypeError
        If ``mr`` is not an nbrmm resource.
    ModuleNotFoundError
        If Numba's CUDA target cannot be imported.
    """
    if _missing is not None:
        _missing.raise_for("nbrmm.allocators.numba.numba_manager")
    if mr is None:
        return RMMNumbaManager
    if not isinstance(mr, _DeviceMemoryResource):
        raise TypeError(
            f"mr: expected an nbrmm.mr.DeviceMemoryResource, got {type(mr).__name__}"
        )
    return type(
        "RMMNumbaManager",
        (RMMNumbaManager,),
        {"mr": mr, "__module__": __name__, "__doc__": RMMNumbaManager.__doc__},
    )


# NUMBA_CUDA_MEMORY_MANAGER=nbrmm.allocators.numba selects this class.
_numba_memory_manager = RMMNumbaManager

#: This module. Its namespace refers to it, so that the interpreter clears the namespace at
#: exit (letting go of the Streams in it) also where something of it outlives the module,
#: such as a function that another library keeps.
_this_module = __import__("sys").modules[__name__]

__all__ = ["RMMNumbaManager", "numba_manager"]
