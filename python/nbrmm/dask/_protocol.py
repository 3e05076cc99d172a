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

from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
from distributed.protocol.serialize import dask_deserialize, dask_serialize

from nbrmm._nbrmm import Buffer, DeviceBuffer


def _new(cls, nbytes):
    """An uninitialised buffer of class ``cls`` from the current device resource."""
    return DeviceBuffer(size=nbytes) if issubclass(cls, DeviceBuffer) else cls(nbytes)


def _ready(buf):
    """Wait for the work ordered on ``buf``'s stream, unless the stream is the legacy
    default stream (whose copies synchronize)."""
    stream = buf.stream
    if buf.nbytes and not stream.is_default():
        stream.synchronize()


def _header(buf):
    return {"nbytes": buf.nbytes}


def _expect(header, frames, cls):
    """The one frame, checked against the header (frames come from the network)."""
    if len(frames) != 1:
        raise ValueError(f"frames: a {cls.__name__} travels as one frame, got {len(frames)}")
    nbytes = header.get("nbytes")
    if not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"header: no valid 'nbytes' for a {cls.__name__}: {nbytes!r}")
    frame = frames[0]
    size = frame.nbytes if hasattr(frame, "nbytes") else len(frame)
    if size != nbytes:
        raise ValueError(f"frames: expected {nbytes} bytes, got {size}")
    return frame, nbytes


def _register(cls):
    @dask_serialize.register(cls)
    def dask_serialize_buffer(buf):
        host = bytearray(buf.nbytes)
        if host:
            buf.copy_to_host(host, stream=buf.stream)
            _ready(buf)
        return _header(buf), [host]

    @dask_deserialize.register(cls)
    def dask_deserialize_buffer(header, frames):
        frame, nbytes = _expect(header, frames, cls)
        out = _new(cls, nbytes)
        if nbytes:
            out.copy_from_host(frame)
        return out

    @cuda_serialize.register(cls)
    def cuda_serialize_buffer(buf):
        _ready(buf)
        return _header(buf), [buf]

    @cuda_deserialize.register(cls)
    def cuda_deserialize_buffer(header, frames):
        frame, nbytes = _expect(header, frames, cls)
        if type(frame) is cls:
            return frame
        out = _new(cls, nbytes)
        if nbytes:
            if hasattr(frame, "__cuda_array_interface__"):
                out.copy_from_device(frame)
            else:
                out.copy_from_host(frame)
        return out


_register(Buffer)
_register(DeviceBuffer)
