"""Dask serialization of :class:`nbrmm.Buffer` (and ``DeviceBuffer``).

Two families, as distributed has for ``rmm.DeviceBuffer``:

``dask`` (host path, used over TCP and for spilling)
    The contents travel as one host frame, copied on the buffer's own stream. The
    receiver allocates a buffer of the same class from its current device resource (read
    from librmm's map when the frame arrives) and copies the frame in.
``cuda`` (device path, used by UCX)
    The buffer itself is the frame. A receiver handed a device frame of another kind (a
    receive buffer of the communication library) copies it into a new buffer from its
    current device resource.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
from distributed.protocol.serialize import dask_deserialize, dask_serialize

from nbrmm._nbrmm import Buffer, DeviceBuffer
from nbrmm._typing import CudaArrayLike

if TYPE_CHECKING:
    from typing_extensions import Buffer as _HostBuffer
    from typing_extensions import TypeIs

_B = TypeVar("_B", bound=Buffer)

#: A header as distributed carries it (it adds keys of its own to ours).
_Header: TypeAlias = dict[str, Any]


class _DeviceFrame(CudaArrayLike, Protocol):
    """A frame in device memory (an nbrmm Buffer, or a receive buffer of the communication
    library): a CUDA array with its size in bytes."""

    @property
    def nbytes(self) -> int: ...


if TYPE_CHECKING:
    #: A frame: host memory (bytes, bytearray, memoryview) or, in the ``cuda`` family,
    #: device memory.
    _Frame: TypeAlias = _HostBuffer | _DeviceFrame

_F = TypeVar("_F", bound="_HostBuffer | _DeviceFrame")


def _new(cls: type[_B], nbytes: int) -> _B:
    """An uninitialised buffer of class ``cls`` from the current device resource."""
    return cls(size=nbytes) if issubclass(cls, DeviceBuffer) else cls(nbytes)


def _ready(buf: Buffer) -> None:
    """Wait for the work ordered on ``buf``'s stream, unless the stream is the legacy
    default stream (whose copies synchronize)."""
    stream = buf.stream
    if buf.nbytes and not stream.is_default():
        stream.synchronize()


def _header(buf: Buffer) -> _Header:
    return {"nbytes": buf.nbytes}


def _on_device(frame: _Frame) -> TypeIs[_DeviceFrame]:
    """Whether a frame is in device memory (it has ``__cuda_array_interface__``)."""
    return hasattr(frame, "__cuda_array_interface__")


def _nbytes(frame: _Frame) -> int:
    """The size of a frame in bytes: for a device frame, what its
    ``__cuda_array_interface__`` describes (what a copy from it reads), not what it says
    its ``nbytes`` is."""
    if not _on_device(frame):
        return memoryview(frame).nbytes
    try:
        interface = frame.__cuda_array_interface__
        size = int(str(interface["typestr"])[2:])
        for extent in interface["shape"]:
            size *= operator.index(extent)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ValueError(f"frames: not a device array ({type(e).__name__}: {e})") from None
    return size


def _expect(
    header: Mapping[str, object], frames: Sequence[_F], cls: type[Buffer]
) -> tuple[_F, int]:
    """The one frame, checked against the header (frames come from the network)."""
    if len(frames) != 1:
        raise ValueError(f"frames: a {cls.__name__} travels as one frame, got {len(frames)}")
    nbytes = header.get("nbytes")
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise ValueError(f"header: no valid 'nbytes' for a {cls.__name__}: {nbytes!r}")
    frame = frames[0]
    size = _nbytes(frame)
    if size != nbytes:
        raise ValueError(f"frames: expected {nbytes} bytes, got {size}")
    return frame, nbytes


def _register(cls: type[Buffer]) -> None:
    def dask_serialize_buffer(buf: Buffer) -> tuple[_Header, list[bytearray]]:
        host = bytearray(buf.nbytes)
        if host:
            buf.copy_to_host(host, stream=buf.stream)
            _ready(buf)
        return _header(buf), [host]

    def dask_deserialize_buffer(
        header: Mapping[str, object], frames: Sequence[_HostBuffer]
    ) -> Buffer:
        frame, nbytes = _expect(header, frames, cls)
        out = _new(cls, nbytes)
        if nbytes:
            out.copy_from_host(frame)
        return out

    def cuda_serialize_buffer(buf: Buffer) -> tuple[_Header, list[Buffer]]:
        _ready(buf)
        return _header(buf), [buf]

    def cuda_deserialize_buffer(
        header: Mapping[str, object], frames: Sequence[_Frame]
    ) -> Buffer:
        frame, nbytes = _expect(header, frames, cls)
        if type(frame) is cls:
            return frame
        out = _new(cls, nbytes)
        if nbytes:
            if _on_device(frame):
                out.copy_from_device(frame)
            else:
                out.copy_from_host(frame)
        return out

    dask_serialize.register(cls, dask_serialize_buffer)
    dask_deserialize.register(cls, dask_deserialize_buffer)
    cuda_serialize.register(cls, cuda_serialize_buffer)
    cuda_deserialize.register(cls, cuda_deserialize_buffer)


_register(Buffer)
_register(DeviceBuffer)
