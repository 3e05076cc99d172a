"""Allocator hooks that make CuPy, PyTorch and Numba allocate through nbrmm.

Each framework has its own module, imported explicitly (``import nbrmm`` imports none
of them, nor any framework):

- :mod:`nbrmm.allocators.cupy`: ``rmm_cupy_allocator`` and ``cupy_allocator(mr=None,
  stream=None)`` for ``cupy.cuda.set_allocator`` / ``cupy.cuda.using_allocator``.
- :mod:`nbrmm.allocators.torch`: ``rmm_torch_allocator`` and ``torch_allocator(mr=None)``,
  ``torch.cuda.memory.CUDAPluggableAllocator`` objects.
- :mod:`nbrmm.allocators.numba`: ``RMMNumbaManager`` and ``numba_manager(mr=None)``, Numba
  external memory managers (``NUMBA_CUDA_MEMORY_MANAGER=nbrmm.allocators.numba``).

Every hook frees each allocation to the resource that made it, on the stream it was made
on, even when the current device resource changes in between.

As in rmm, each module imports without its framework; its hooks then raise
``ModuleNotFoundError`` (naming the framework and how to install it) when used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

__all__: list[str] = []


class _Missing:
    """Why a hook module's framework is unavailable, and the error raised on use."""

    def __init__(self, package: str, install: str, error: ImportError) -> None:
        self.package = package  # the module that failed to import, e.g. "cupy"
        self.install = install  # what to install, in words
        self.error = error  # the ImportError

    def raise_for(self, what: str) -> NoReturn:
        """Raise ``ModuleNotFoundError`` for a use of ``what`` (a qualified name)."""
        raise ModuleNotFoundError(
            f"{what} needs {self.install}. Importing {self.package!r} failed: {self.error}",
            name=self.package,
        ) from self.error

    def function(self, what: str, doc: str) -> Callable[..., NoReturn]:
        """A stand-in for the function ``what`` that raises on every call."""

        def unavailable(*args: Any, **kwargs: Any) -> NoReturn:
            self.raise_for(what)

        unavailable.__name__ = unavailable.__qualname__ = what.rsplit(".", 1)[-1]
        unavailable.__doc__ = doc
        return unavailable
