"""Streams both ways: nbrmm's and other libraries' streams as cuda.core ``Stream`` objects,
and cuda.core's as ``nbrmm.Stream`` objects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import cuda.core as cc

import nbrmm
from nbrmm._args import stream_for
from nbrmm._nbrmm import _as_stream
from nbrmm.interop._args import stream_handle

if TYPE_CHECKING:
    from nbrmm._typing import CudaStreamLike

_graph: Any = getattr(cc, "graph", None)
#: What cuda.core accepts as a ``stream``: its Stream, and a GraphBuilder (stream capture).
CUDA_CORE_STREAM_TYPES: tuple[type, ...] = (cc.Stream,) + (
    (_graph.GraphBuilder,) if getattr(_graph, "GraphBuilder", None) is not None else ()
)


class StreamHandle:
    """A raw stream handle with the ``__cuda_stream__`` protocol (owns nothing)."""

    __slots__ = ("handle",)

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def _default_stream(handle: int) -> cc.Stream | None:
    """cuda.core's default stream of the handle (0 and 1: legacy, 2: per-thread), or None."""
    if handle in (0, 1):
        return cc.LEGACY_DEFAULT_STREAM
    if handle == 2:
        return cc.PER_THREAD_DEFAULT_STREAM
    return None


def to_cuda_core_stream(
    stream: CudaStreamLike, *, device: int | cc.Device | None = None
) -> cc.Stream:
    """A cuda.core ``Stream`` for any stream-like object.

    Parameters
    ----------
    stream : nbrmm.Stream or object implementing ``__cuda_stream__``
        The stream. A cuda.core ``Stream`` is returned as it is, and so is the cuda.core
        stream an ``nbrmm.Stream`` wraps.
    device : int or cuda.core.Device, optional
        The device whose ``create_stream`` wraps the stream; by default cuda.core's
        current device. Not used for the default streams.

    Returns
    -------
    cuda.core.Stream
        ``LEGACY_DEFAULT_STREAM`` or ``PER_THREAD_DEFAULT_STREAM`` for the default streams
        (handles 0 and 1, and 2); otherwise a stream made by ``Device.create_stream``,
        which keeps ``stream`` alive. cuda.core needs that device to have been made
        current in the calling thread (``Device.set_current()``).

    Raises
    ------
    TypeError
        If ``stream`` is not stream-like.
    ValueError
        If its ``__cuda_stream__`` returns no stream handle.
    """
    if isinstance(stream, cc.Stream):
        return stream
    if isinstance(stream, nbrmm.Stream) and isinstance(stream.owner, cc.Stream):
        return stream.owner
    default = _default_stream(stream_handle(stream))
    if default is not None:
        return default
    dev = device if isinstance(device, cc.Device) else cc.Device(device)
    return dev.create_stream(stream)


def from_cuda_core_stream(stream: CudaStreamLike) -> nbrmm.Stream:
    """An ``nbrmm.Stream`` for a cuda.core ``Stream`` (or any stream-like object).

    nbrmm takes cuda.core streams directly wherever it takes a ``stream``; this is the
    same conversion, for code that wants an ``nbrmm.Stream`` object.

    Parameters
    ----------
    stream : cuda.core.Stream or object implementing ``__cuda_stream__``
        The stream; an ``nbrmm.Stream`` is returned as it is.

    Returns
    -------
    nbrmm.Stream
        A view of the stream that keeps ``stream`` alive (``.owner`` is ``stream``).

    Raises
    ------
    TypeError
        If ``stream`` is not stream-like.
    ValueError
        If its ``__cuda_stream__`` returns no stream handle.
    """
    if isinstance(stream, nbrmm.Stream):
        return _as_stream(stream)  # itself (refused if its __init__ never ran)
    stream_handle(stream)  # a clear error naming the parameter
    return stream_for(stream, "stream")  # (read again: the object may answer otherwise)


def cuda_core_stream_for_nbrmm(stream: CudaStreamLike, device: int) -> cc.Stream:
    """A cuda.core stream for a stream nbrmm passes to a resource (a view of its handle,
    valid for the call)."""
    handle = stream_handle(stream)
    default = _default_stream(handle)
    if default is not None:
        return default
    owner = stream.owner if isinstance(stream, nbrmm.Stream) else stream
    if isinstance(owner, cc.Stream):
        return owner
    try:
        return cc.Device(device if device >= 0 else None).create_stream(StreamHandle(handle))
    except Exception:  # noqa: BLE001 - cuda.core's device is not set up in this thread
        return cc.Stream.from_handle(handle)
