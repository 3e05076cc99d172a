"""Interop with CuPy, PyTorch, numba-cuda and cuda.core on the GPU: streams, CAI, DLPack."""

import gc
import weakref

import pytest

import nbrmm
import nbrmm.mr

pytestmark = pytest.mark.gpu


def _stream_sources():
    import cupy
    import torch
    from cuda.core import Device
    from numba import cuda as nbcuda

    dev = Device(0)
    dev.set_current()
    return {
        "cupy": lambda: cupy.cuda.Stream(non_blocking=True),
        "torch": lambda: torch.cuda.Stream(),
        "cuda.core": lambda: dev.create_stream(),
        "numba": lambda: nbcuda.stream(),
    }


@pytest.mark.parametrize("lib", ["cupy", "torch", "cuda.core", "numba"])
def test_framework_streams_are_accepted_directly(lib):
    foreign = _stream_sources()[lib]()
    payload = bytes(range(256)) * 16
    buf = nbrmm.Buffer(len(payload), stream=foreign)
    assert buf.stream.owner is foreign
    assert buf.stream.handle != 0
    buf.copy_from_host(payload, stream=foreign)  # asynchronous on that stream
    nbrmm.Stream(foreign).synchronize()
    assert buf.tobytes() == payload
    # Work ordered on the same stream sees the data.
    other = nbrmm.Buffer(len(payload), stream=foreign)
    other.copy_from_device(buf, stream=foreign)
    out = bytearray(len(payload))
    other.copy_to_host(out, stream=foreign)
    nbrmm.Stream(foreign).synchronize()
    assert bytes(out) == payload


def test_wrapped_framework_stream_stays_alive():
    import cupy

    s = cupy.cuda.Stream(non_blocking=True)
    ref = weakref.ref(s)
    buf = nbrmm.Buffer(64, stream=s)
    del s
    gc.collect()
    assert ref() is not None  # the buffer frees on it later
    del buf
    gc.collect()
    assert ref() is None


def test_owned_stream_outlives_its_python_object_while_buffers_use_it():
    s = nbrmm.Stream(flags=nbrmm.CudaStreamFlags.NON_BLOCKING)
    buf = nbrmm.Buffer(1 << 16, stream=s)
    handle = s.handle
    del s
    gc.collect()
    assert buf.stream.handle == handle
    buf.copy_from_host(b"\x01" * (1 << 16), stream=buf.stream)
    buf.stream.synchronize()
    assert buf.tobytes()[:4] == b"\x01" * 4


def test_cupy_reads_and_writes_through_cai():
    import cupy

    buf = nbrmm.Buffer.to_device(bytes(range(100)))
    arr = cupy.asarray(buf)
    assert arr.dtype == cupy.uint8 and arr.shape == (100,)
    assert int(arr.sum()) == sum(range(100))
    arr[:] = 7  # the consumer writes, nbrmm reads back
    cupy.cuda.get_current_stream().synchronize()
    assert buf.tobytes() == b"\x07" * 100


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_dlpack_zero_copy_and_lifetime(lib):
    payload = bytes(range(64))
    buf = nbrmm.Buffer.to_device(payload)
    ref = weakref.ref(buf)
    ptr = buf.ptr
    if lib == "cupy":
        import cupy

        arr = cupy.from_dlpack(buf)
        assert arr.data.ptr == ptr
        arr += 1
        cupy.cuda.get_current_stream().synchronize()
    else:
        import torch

        arr = torch.from_dlpack(buf)
        assert arr.data_ptr() == ptr and arr.device.type == "cuda"
        arr += 1
        torch.cuda.synchronize()
    assert buf.tobytes() == bytes((b + 1) % 256 for b in payload)
    del buf
    gc.collect()
    assert ref() is not None  # the consumer keeps the buffer (and its memory) alive
    del arr
    gc.collect()
    assert ref() is None


def test_torch_reads_cai():
    import torch

    buf = nbrmm.Buffer.to_device(b"\x05" * 32)
    t = torch.as_tensor(buf, device="cuda")
    assert t.sum().item() == 5 * 32


def test_copy_from_device_accepts_cupy_arrays():
    import cupy

    src = cupy.arange(50, dtype=cupy.uint8)
    buf = nbrmm.Buffer(50)
    buf.copy_from_device(src)
    assert buf.tobytes() == bytes(range(50))
    with pytest.raises(ValueError, match="contiguous"):
        buf.copy_from_device(cupy.arange(100, dtype=cupy.uint8)[::2])
    with pytest.raises(ValueError, match="do not fit"):
        buf.copy_from_device(cupy.arange(51, dtype=cupy.uint8))


def test_dlpack_orders_consumer_stream_after_producer():
    import cupy

    s = nbrmm.Stream(flags=nbrmm.CudaStreamFlags.NON_BLOCKING)
    buf = nbrmm.Buffer(1 << 20, stream=s)
    buf.copy_from_host(b"\x09" * (1 << 20), stream=s)
    consumer = cupy.cuda.Stream(non_blocking=True)
    with consumer:
        arr = cupy.from_dlpack(buf)  # passes consumer's stream to __dlpack__
        total = int(arr.sum(dtype=cupy.uint64))
    assert total == 9 * (1 << 20)
