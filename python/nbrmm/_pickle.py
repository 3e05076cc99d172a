"""Pickling of buffers: contents travel as host bytes (out-of-band with protocol 5)."""

from __future__ import annotations

import contextlib
import contextvars
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from nbrmm import _nbrmm
from nbrmm._args import type_name

if TYPE_CHECKING:
    from typing_extensions import Buffer

_MR = TypeVar("_MR", bound=_nbrmm.DeviceMemoryResource | None)
# What a buffer's __reduce_ex__ returns: _rebuild and its arguments.
_Reduced = tuple[
    "Callable[[type[_nbrmm.Buffer], Buffer], _nbrmm.Buffer]",
    "tuple[type[_nbrmm.Buffer], pickle.PickleBuffer | bytes]",
]

_unpickle_mr: contextvars.ContextVar[_nbrmm.DeviceMemoryResource | None] = (
    contextvars.ContextVar("nbrmm_unpickle_mr", default=None)
)


def __reduce_ex__(self: _nbrmm.Buffer, protocol: int) -> _Reduced:
    # (called through the class, ``self`` may be anything)
    if not isinstance(self, _nbrmm.Buffer):
        raise TypeError(f"self: expected an nbrmm.Buffer, got {type_name(self)}")
    if isinstance(protocol, bool) or not isinstance(protocol, int):
        raise TypeError(f"protocol: expected an int, got {type_name(protocol)}")
    host = bytearray(self.size)
    self.copy_to_host(host)
    data = pickle.PickleBuffer(host) if protocol >= 5 else bytes(host)
    return _rebuild, (type(self), data)


def _rebuild(cls: type[_nbrmm.Buffer], data: Buffer) -> _nbrmm.Buffer:
    """Recreates a buffer on the resource chosen for unpickling (default: the current)."""
    return cls.to_device(memoryview(data), mr=_unpickle_mr.get())


@contextlib.contextmanager
def unpickling_resource(mr: _MR) -> Iterator[_MR]:
    """Allocate the buffers unpickled inside the block from ``mr``.

    Without it, unpickled buffers are allocated from the current device resource at the
    time of unpickling.

    Parameters
    ----------
    mr : DeviceMemoryResource or None
        The resource (None: the current device resource).
    """
    if mr is not None and not isinstance(mr, _nbrmm.DeviceMemoryResource):
        raise TypeError(f"mr: expected an nbrmm.mr.DeviceMemoryResource, got {type(mr).__name__}")
    token = _unpickle_mr.set(mr)
    try:
        yield mr
    finally:
        _unpickle_mr.reset(token)


def loads(
    data: Buffer,
    *,
    mr: _nbrmm.DeviceMemoryResource | None = None,
    buffers: Iterable[Any] | None = None,
) -> Any:
    """``pickle.loads`` that allocates every unpickled buffer from ``mr``.

    Parameters
    ----------
    data : bytes-like
        The pickle.
    mr : DeviceMemoryResource, optional
        The resource for the buffers (default: the current device resource).
    buffers : iterable, optional
        Out-of-band buffers (pickle protocol 5).
    """
    with unpickling_resource(mr):
        return pickle.loads(data, buffers=buffers)


def __reduce__(self: _nbrmm.Buffer) -> _Reduced:
    return __reduce_ex__(self, 2)


# Methods of the extension's class, set here (mypy does not allow assigning methods).
for _method in (__reduce_ex__, __reduce__):
    _method.__qualname__ = f"Buffer.{_method.__name__}"
_nbrmm.Buffer.__reduce_ex__ = __reduce_ex__  # type: ignore[method-assign,assignment]
# as rmm's DeviceBuffer has; code may call it directly
_nbrmm.Buffer.__reduce__ = __reduce__  # type: ignore[method-assign,assignment]
