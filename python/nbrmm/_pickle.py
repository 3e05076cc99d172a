"""Pickling of buffers: contents travel as host bytes (out-of-band with protocol 5)."""

import contextlib
import contextvars
import pickle

from nbrmm import _nbrmm

_unpickle_mr = contextvars.ContextVar("nbrmm_unpickle_mr", default=None)


def _reduce_ex(self, protocol):
    host = bytearray(self.size)
    self.copy_to_host(host)
    data = pickle.PickleBuffer(host) if protocol >= 5 else bytes(host)
    return _rebuild, (type(self), data)


def _rebuild(cls, data):
    """Recreates a buffer on the resource chosen for unpickling (default: the current)."""
    return cls.to_device(memoryview(data), mr=_unpickle_mr.get())


@contextlib.contextmanager
def unpickling_resource(mr):
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


def loads(data, *, mr=None, buffers=None):
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


def _reduce(self):
    return _reduce_ex(self, 2)


_nbrmm.Buffer.__reduce_ex__ = _reduce_ex
_nbrmm.Buffer.__reduce__ = _reduce  # as rmm's DeviceBuffer has; code may call it directly
