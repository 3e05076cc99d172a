"""PyTorch allocator hooks: torch CUDA memory from nbrmm resources.

Examples
--------
>>> import torch, nbrmm
>>> from nbrmm.allocators.torch import rmm_torch_allocator, torch_allocator
>>> torch.cuda.memory.change_current_allocator(rmm_torch_allocator)  # before any CUDA use

or, for some allocations only, through a memory pool:

>>> pool = torch.cuda.MemPool(torch_allocator(mr=some_resource).allocator())
>>> with torch.cuda.use_mem_pool(pool):
...     t = torch.ones(1024, device="cuda")

The allocator's C functions are compiled into nbrmm's extension. Memory goes back to the
resource that made it, on the stream it was allocated on, even if the current device
resource changed meanwhile: an allocator bound to resources frees to its own resource for
the device, and :data:`rmm_torch_allocator` records the resource of each allocation. The
functions never take the GIL themselves (torch may call them while holding its own locks);
a resource implemented in Python takes it for its callbacks, so prefer C++ resources behind
torch.

A failed allocation raises the C++ error into torch, which reports it as a
``RuntimeError`` (torch's pluggable allocators cannot raise ``torch.cuda.OutOfMemoryError``);
out of memory, its message starts ``out of memory: nbrmm could not allocate N bytes on
device D for torch:`` and gives the resource's reason.
"""

from __future__ import annotations

import threading as _threading

from nbrmm import _nbrmm
from nbrmm.allocators import _Missing

_missing: _Missing | None
try:
    import torch as _torch
    from torch.cuda.memory import CUDAPluggableAllocator as _CUDAPluggableAllocator
except ImportError as exc:  # as in rmm, the module imports; its hooks raise when used
    _missing = _Missing("torch", "PyTorch (the 'torch' package, a CUDA build)", exc)
else:
    _missing = None

_LIBRARY = _nbrmm.__file__
_lock = _threading.Lock()
_by_slot: dict[int, _CUDAPluggableAllocator] = {}


def torch_allocator(
    mr: _nbrmm.DeviceMemoryResource | dict[int, _nbrmm.DeviceMemoryResource] | None = None,
) -> _CUDAPluggableAllocator:
    """Make a torch pluggable allocator that allocates from ``mr``.

    Parameters
    ----------
    mr : DeviceMemoryResource or dict[int, DeviceMemoryResource], optional
        None (the default): the current resource of the device torch allocates on, read
        from librmm's per-device map at each allocation. A resource: that resource (for
        the device it was created on). A dict: one resource per device id.

    Returns
    -------
    torch.cuda.memory.CUDAPluggableAllocator
        For ``torch.cuda.memory.change_current_allocator`` or
        ``torch.cuda.MemPool(allocator.allocator())``. Equal bindings return the same
        object.

    Raises
    ------
    TypeError
        If ``mr`` is not a resource or a dict of them.
    ValueError
        If a resource was created on another device than its key, or too many different
        bindings were made (a binding stays alive for the life of the process, since torch
        may call it at any time).
    ModuleNotFoundError
        If PyTorch cannot be imported.
    """
    if _missing is not None:
        _missing.raise_for("nbrmm.allocators.torch.torch_allocator")
    slot = _nbrmm._torch_bind(mr)
    with _lock:
        allocator = _by_slot.get(slot)
        if allocator is None:
            allocator = _CUDAPluggableAllocator(
                _LIBRARY, f"nbrmm_torch_alloc_{slot}", f"nbrmm_torch_free_{slot}"
            )
            _by_slot[slot] = allocator
    return allocator


#: The rmm-compatible hook: a ``CUDAPluggableAllocator`` that allocates from the current
#: device resource (None without PyTorch or when torch has no usable CUDA, as in rmm).
rmm_torch_allocator: _CUDAPluggableAllocator | None = (
    torch_allocator() if _missing is None and _torch.cuda.is_available() else None
)

__all__ = ["rmm_torch_allocator", "torch_allocator"]
