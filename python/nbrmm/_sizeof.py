"""``dask.sizeof`` for nbrmm buffers.

Dask finds :func:`register` through the ``dask.sizeof`` entry point of the installed
package, so the size of a buffer is known to Dask without importing :mod:`nbrmm.dask`.
This module imports nothing from Dask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbrmm._nbrmm import Buffer


def sizeof_buffer(buf: Buffer) -> int:
    """The device memory a buffer holds: its capacity (0 once closed)."""
    return 0 if buf.closed else buf.capacity()


def register(sizeof: Any) -> None:
    """Register :func:`sizeof_buffer` for :class:`nbrmm.Buffer` (and so ``DeviceBuffer``)
    with the dispatcher ``sizeof`` (``dask.sizeof.sizeof``, a ``dask.utils.Dispatch``,
    which has no type information)."""
    from nbrmm._nbrmm import Buffer

    sizeof.register(Buffer)(sizeof_buffer)
