"""nbrmm.Buffer and DeviceBuffer."""

import gc
import pathlib
import weakref

import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap, read_host, run_python, write_host
from nbrmm import _nbrmm
from extensions import testing as _testing


def test_buffer_over_host_callbacks():
    heap = HostHeap()
    mr = heap.resource()
    buf = nbrmm.Buffer(1000, mr=mr)
    assert buf.size == buf.nbytes == len(buf) == 1000
    assert buf.capacity() >= 1000
    assert buf.mr is mr
    assert buf.stream == nbrmm.DEFAULT_STREAM
    assert buf.alignment == 256
    assert heap.live == {buf.ptr: 1000}
    write_host(buf.ptr, b"abc")
    assert read_host(buf.ptr, 3) == b"abc"
    del buf
    assert heap.bytes_in_use == 0


def test_zero_size_buffer_allocates_nothing():
    heap = HostHeap()
    buf = nbrmm.Buffer(0, mr=heap.resource())
    assert buf.size == 0 and buf.ptr == 0
    assert heap.calls == []
    assert buf.tobytes() == b""
    assert bytes(buf) == b""


def test_buffer_keeps_its_resource_alive():
    heap = HostHeap()
    mr = heap.resource()
    ref = weakref.ref(mr)
    buf = nbrmm.Buffer(10, mr=mr)
    del mr
    gc.collect()
    assert ref() is not None and buf.mr is ref()
    del buf
    gc.collect()
    assert ref() is None
    assert heap.bytes_in_use == 0


def test_close_and_context_manager():
    heap = HostHeap()
    with nbrmm.Buffer(20, mr=heap.resource()) as buf:
        assert heap.bytes_in_use == 20
    assert heap.bytes_in_use == 0
    assert buf.closed
    for use in (lambda: buf.ptr, lambda: buf.size, lambda: len(buf), buf.tobytes,
                lambda: buf.resize(3), lambda: buf.__cuda_array_interface__):
        with pytest.raises(ValueError, match="closed"):
            use()
    buf.close()  # closing twice is harmless
    assert "closed" in repr(buf)


def test_bad_input_leaves_no_partial_state():
    heap = HostHeap()
    mr = heap.resource()
    for bad, exc in [(-5, ValueError), ("x", ValueError), (2.0, TypeError)]:
        with pytest.raises(exc, match="nbytes"):
            nbrmm.Buffer(bad, mr=mr)
    with pytest.raises(TypeError, match="mr"):
        nbrmm.Buffer(10, mr="cuda")
    assert heap.calls == []


@pytest.mark.parametrize("subclass", [False, True], ids=["Buffer", "subclass"])
def test_constructor_accepts_the_signature_of_init(subclass):
    # A Python subclass is constructed through ``__init__``, not Buffer's own vectorcall.
    cls = type("BufferSubclass", (nbrmm.Buffer,), {}) if subclass else nbrmm.Buffer
    heap = _testing.host_heap_resource()
    assert cls(nbytes=16, mr=heap).size == 16
    assert cls(**{"nbytes": 24, "mr": heap}).size == 24
    assert cls(mr=heap).size == 0
    b = cls(16, mr=heap, alignment=4096, stream=nbrmm.DEFAULT_STREAM)
    assert b.alignment == 4096 and b.ptr % 4096 == 0 and type(b) is cls
    for args, kwargs in [((1, 2), {"mr": heap}), ((1,), {"mr": heap, "bogus": 3}),
                         ((1,), {"nbytes": 2, "mr": heap})]:
        with pytest.raises(TypeError):
            cls(*args, **kwargs)
    with pytest.raises(TypeError, match="stream"):
        cls(1, mr=heap, stream=5)
    with pytest.raises(ValueError, match="nbytes"):
        cls(-1, mr=heap)


def test_constructor_refuses_wrong_calls_with_its_signature():
    heap = _testing.host_heap_resource()
    for call, message in (
        (lambda: nbrmm.Buffer(1, 2, mr=heap),  # mr is keyword-only
         "Buffer(): takes at most 1 positional argument (2 given); pass 'mr', 'stream' and "
         "'alignment' by keyword"),
        (lambda: nbrmm.Buffer(size=1, mr=heap),  # no parameter 'size'
         "Buffer(): unexpected keyword argument 'size' (its keyword arguments are 'nbytes', "
         "'mr', 'stream' and 'alignment')"),
        (lambda: nbrmm.Buffer(1, nbytes=1, mr=heap),  # nbytes twice
         "Buffer(): got multiple values for argument 'nbytes'"),
    ):
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == message


def test_out_of_memory_from_a_cpp_resource_is_nbrmm_out_of_memory():
    with pytest.raises(nbrmm.OutOfMemory, match="host heap"):
        nbrmm.Buffer(1 << 62, mr=_testing.host_heap_resource())
    with pytest.raises(MemoryError):
        nbrmm.Buffer(1 << 62, mr=_testing.host_heap_resource())


def test_buffer_over_a_cpp_resource_without_a_gpu():
    heap = _testing.host_heap_resource()
    buf = nbrmm.Buffer(64, mr=heap)
    assert buf.mr is heap and buf.size == 64
    view = memoryview(buf)  # the host heap is host-accessible
    view[:3] = b"xyz"
    assert bytes(view[:3]) == b"xyz" == read_host(buf.ptr, 3)
    view.release()
    buf.close()
    assert buf.closed


def test_buffer_objects_are_reused_cleanly():
    """Freed Buffer objects are recycled: a new one starts empty and weak references to
    old ones are dead."""
    heap = HostHeap()
    mr = heap.resource()
    refs = []
    for n in range(300):
        b = nbrmm.Buffer(n % 7, mr=mr)
        refs.append(weakref.ref(b))
        del b
    assert all(r() is None for r in refs)
    assert heap.bytes_in_use == 0
    fresh = nbrmm.Buffer(0, mr=mr)
    assert fresh.size == 0 and fresh.mr is mr and not fresh.closed
    assert weakref.ref(fresh)() is fresh


def test_device_buffer_rmm_signature():
    heap = HostHeap()
    mr = heap.resource()
    db = nbrmm.DeviceBuffer(size=64, mr=mr)
    assert isinstance(db, nbrmm.Buffer)
    assert db.size == 64 and db.mr is mr
    with pytest.raises(TypeError):
        nbrmm.DeviceBuffer(64)  # keyword-only, as in rmm


def test_cuda_array_interface_v3():
    buf = nbrmm.Buffer(12, mr=HostHeap().resource())
    cai = buf.__cuda_array_interface__
    assert cai["version"] == 3
    assert cai["shape"] == (12,) and cai["typestr"] == "|u1"
    assert cai["data"] == (buf.ptr, False)
    assert cai["stream"] == 1  # the default stream, spelled as CAI requires


def test_dlpack_device_of_device_memory():
    buf = nbrmm.Buffer(12, mr=HostHeap().resource())
    assert buf.__dlpack_device__() == (2, max(nbrmm.get_current_device(), 0))


def test_buffer_protocol_refused_for_device_memory():
    buf = nbrmm.Buffer(12, mr=HostHeap().resource())
    with pytest.raises(BufferError, match="host-accessible"):
        memoryview(buf)


def test_host_copy_argument_checks():
    buf = nbrmm.Buffer(8, mr=HostHeap().resource())
    with pytest.raises(TypeError, match="ary"):
        buf.copy_from_host(12345)
    with pytest.raises(ValueError, match="ary"):
        buf.copy_from_host(b"123456789")  # 9 bytes into 8
    with pytest.raises(ValueError, match="ary"):
        buf.copy_to_host(bytearray(4))
    with pytest.raises(BufferError, match="writable"):  # BufferError, as in rmm
        buf.copy_to_host(b"immutable")
    with pytest.raises(ValueError, match="cuda_ary"):  # ValueError, as in rmm
        buf.copy_from_device(b"host bytes")


def test_copy_to_host_needs_numpy_and_never_falls_back_to_bytearray():
    # numpy is a dependency: without it, copy_to_host() raises instead of returning
    # another type (checked before any copy, so this runs without a GPU).
    out = run_python(
        """
        import sys
        sys.modules["numpy"] = None
        import nbrmm
        sys.path.insert(0, %r)
        from helpers import HostHeap
        heap = HostHeap()
        buf = nbrmm.Buffer(8, mr=heap.resource())
        try:
            buf.copy_to_host()
        except ImportError as e:
            print("ImportError", "numpy" in str(e))
        else:
            print("no error")
        del buf
        print(heap.bytes_in_use)
        """
        % str(pathlib.Path(__file__).parent)
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ImportError", "True", "0"]


@pytest.mark.gpu
def test_copy_to_host_returns_a_uint8_ndarray():
    np = pytest.importorskip("numpy")
    payload = bytes(range(200))
    buf = nbrmm.to_device(payload)
    host = buf.copy_to_host()
    assert isinstance(host, np.ndarray)
    assert host.dtype == np.uint8 and host.shape == (200,)
    assert host.tobytes() == payload
    empty = nbrmm.Buffer(0).copy_to_host()
    assert isinstance(empty, np.ndarray) and empty.shape == (0,)
    out = bytearray(200)
    assert buf.copy_to_host(out) is out


@pytest.mark.gpu
def test_gpu_round_trip_and_growth():
    payload = bytes(range(256)) * 4
    buf = nbrmm.DeviceBuffer.to_device(payload)
    assert buf.tobytes() == payload
    buf.resize(2048)
    assert buf.tobytes()[:1024] == payload
    buf.resize(10)
    buf.shrink_to_fit()
    assert buf.capacity() == 10 and buf.tobytes() == payload[:10]
    dup = buf.copy()
    assert dup.mr is buf.mr and dup.tobytes() == payload[:10]
    out = bytearray(10)
    buf.copy_to_host(out)
    assert bytes(out) == payload[:10]
    other = nbrmm.Buffer(10)
    other.copy_from_device(buf)
    assert other.tobytes() == payload[:10]


@pytest.mark.gpu
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickle_round_trip(protocol):
    import pickle

    payload = bytes(range(200))
    buf = nbrmm.DeviceBuffer.to_device(payload)
    data = pickle.dumps(buf, protocol=protocol)
    current = nbrmm.mr.CudaMemoryResource()
    nbrmm.mr.set_current_device_resource(current)
    back = pickle.loads(data)  # restored onto the current resource at load time
    assert type(back) is nbrmm.DeviceBuffer
    assert back.tobytes() == payload
    assert back.mr is current


@pytest.mark.gpu
def test_pickle5_out_of_band_and_mr_at_load_time():
    import pickle

    payload = b"out-of-band" * 10
    buf = nbrmm.Buffer.to_device(payload)
    frames = []
    data = pickle.dumps(buf, protocol=5, buffer_callback=frames.append)
    assert len(frames) == 1 and frames[0].raw().nbytes == len(payload)
    chosen = nbrmm.mr.CudaMemoryResource()
    back = nbrmm.loads(data, mr=chosen, buffers=frames)
    assert back.mr is chosen and back.tobytes() == payload
    with nbrmm.unpickling_resource(chosen):
        again = pickle.loads(data, buffers=frames)
    assert again.mr is chosen


def test_reduce_checks_its_arguments():
    buf = nbrmm.Buffer(8, mr=HostHeap().resource())
    with pytest.raises(TypeError, match="^self: expected an nbrmm.Buffer, got int$"):
        nbrmm.Buffer.__reduce_ex__(42, 2)
    with pytest.raises(TypeError, match="^protocol: expected an int, got str$"):
        buf.__reduce_ex__("5")
    with pytest.raises(TypeError, match=r"^Buffer.__reduce_ex__\(\) missing 1 required"):
        nbrmm.Buffer.__reduce_ex__(buf)
    with pytest.raises(TypeError, match="^self: expected an nbrmm.Buffer, got NoneType$"):
        nbrmm.Buffer.__reduce__(None)


def test_unpickling_resource_checks_its_argument():
    with pytest.raises(TypeError, match="mr"):
        with nbrmm.unpickling_resource("pool"):
            pass


def test_dlpack_capsules_keep_the_buffer_alive():
    heap = HostHeap()
    buf = nbrmm.Buffer(10, mr=heap.resource())
    ref = weakref.ref(buf)
    legacy = buf.__dlpack__()
    versioned = buf.__dlpack__(stream=None, max_version=(1, 0))
    assert "dltensor" in repr(legacy) and "dltensor_versioned" in repr(versioned)
    del buf
    gc.collect()
    assert ref() is not None and heap.bytes_in_use == 10
    del legacy, versioned
    gc.collect()
    assert ref() is None and heap.bytes_in_use == 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["PinnedHostMemoryResource", "ManagedMemoryResource"])
def test_buffer_protocol_for_host_accessible_memory(name):
    res = getattr(nbrmm.mr, name)()
    assert res.is_host_accessible
    buf = nbrmm.Buffer(64, mr=res)
    view = memoryview(buf)
    assert view.nbytes == 64 and not view.readonly
    view[:4] = b"abcd"  # the host writes through the protocol, the device copy sees it
    del view
    assert buf.tobytes()[:4] == b"abcd"
    assert buf.__dlpack_device__()[0] in (3, 13)  # CUDA host / CUDA managed
