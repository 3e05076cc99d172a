"""nbrmm.interop: nbrmm resources, buffers and streams as cuda.core's and back.

The CPU tests run over host memory (``HostHeap``): cuda.core frees host-only memory
without a CUDA driver. They never let cuda.core reach for the driver (no ``Device``, no
stream-ordered ``close(stream)``, no pointer queries): without one, a failed attempt can
leave cuda.bindings' loader lock taken, and the next attempt would hang. The GPU tests
(marked ``gpu``) cover the device paths.
"""

import copy
import ctypes
import doctest
import enum
import gc
import inspect
import pathlib
import pickle
import re
import sys
import threading
import weakref

import pytest

import cuda.core as cc

import nbrmm
import nbrmm.interop as interop
import nbrmm.mr
from helpers import (
    POOL_SIZE,
    HostHeap,
    cuda_core_host_resource,
    read_host,
    run_python,
    run_threads,
    write_host,
)
from extensions import cpp_ext, testing

LEGACY = cc.LEGACY_DEFAULT_STREAM
PER_THREAD = cc.PER_THREAD_DEFAULT_STREAM
DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "interop.md"


def collect():
    for _ in range(3):
        gc.collect()


ON_GPU = nbrmm.get_device_count() > 0


def cuda_core_thread():
    """With a driver, cuda.core wants its device current in each thread that uses it."""
    if ON_GPU:
        cc.Device(nbrmm.get_current_device()).set_current()


@pytest.fixture(autouse=True)
def _cuda_core_device_current():
    cuda_core_thread()
    yield


def host_adapter(heap=None, mr=None, **properties):
    """(heap, a cuda.core resource over nbrmm's host-heap resource). The memory is
    reported host-only, so cuda.core records no deallocation stream (no driver needed)."""
    heap = heap or HostHeap()
    props = {"is_device_accessible": False, "is_host_accessible": True, **properties}
    return heap, interop.to_cuda_core_memory_resource(mr or heap.resource(), **props)


class Recorder(nbrmm.mr.DeviceMemoryResource):
    """An nbrmm resource in Python that records the stream handle of every call."""

    def __init__(self, inner=None):
        super().__init__()
        self.heap = HostHeap()
        self.inner = inner
        self.log = []

    def allocate(self, nbytes, stream):
        self.log.append(("allocate", stream.handle))
        if self.inner is not None:
            return self.inner.allocate(nbytes, stream)
        return self.heap.allocate(nbytes, stream)

    def deallocate(self, ptr, nbytes, stream):
        self.log.append(("deallocate", stream.handle))
        if self.inner is not None:
            self.inner.deallocate(ptr, nbytes, stream)
        else:
            self.heap.deallocate(ptr, nbytes, stream)


class ForeignStream:
    """A stream of another library: only the ``__cuda_stream__`` protocol."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def calls(heap):
    return [c[0] for c in heap.calls]


def raw_allocate(mr, nbytes):
    """Memory of ``mr`` as the adapter allocates it: the allocate of nbrmm's base class,
    which records it with ``mr`` (also for resources written in Python)."""
    return nbrmm.mr.DeviceMemoryResource.allocate(mr, nbytes)


# --------------------------------------------------------------------------------------
# The module
# --------------------------------------------------------------------------------------


def test_public_names_exist_and_are_documented():
    assert interop.__all__ == sorted(interop.__all__)
    for name in interop.__all__:
        obj = getattr(interop, name)
        assert obj.__doc__, name
        if inspect.isclass(obj):
            for attr in ("allocate", "deallocate"):
                if attr in vars(obj):
                    assert getattr(obj, attr).__doc__, f"{name}.{attr}"


def test_importing_nbrmm_leaves_cuda_core_alone():
    out = run_python(
        """
        import sys, nbrmm, nbrmm.mr
        print("cuda.core" in sys.modules)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_without_cuda_core_the_import_error_names_the_extra():
    out = run_python(
        """
        import sys
        sys.modules["cuda.core"] = None  # as if it were not installed
        try:
            import nbrmm.interop
        except ImportError as e:
            print(e.name, "|", e)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("cuda.core |")
    assert "nbrmm[cuda-core]" in out.stdout


# --------------------------------------------------------------------------------------
# nbrmm resources as cuda.core resources
# --------------------------------------------------------------------------------------


def test_adapter_is_a_cuda_core_resource_that_mirrors_its_nbrmm_resource():
    mr = HostHeap().resource()
    adapter = interop.to_cuda_core_memory_resource(mr)
    assert isinstance(adapter, cc.MemoryResource)
    assert isinstance(adapter, interop.NbrmmMemoryResource)
    assert adapter.upstream_mr is mr
    assert adapter.device_id == mr.device
    assert adapter.is_device_accessible is True
    assert adapter.is_host_accessible is False
    assert adapter.is_managed is False
    assert "CallbackMemoryResource" in repr(adapter)


def test_adapter_knows_managed_and_host_memory_through_adaptors():
    managed = nbrmm.mr.ManagedMemoryResource()
    chain = nbrmm.mr.LimitingResourceAdaptor(nbrmm.mr.StatisticsResourceAdaptor(managed), 1 << 20)
    for mr in (managed, chain):
        adapter = interop.NbrmmMemoryResource(mr)
        assert adapter.is_managed and adapter.is_host_accessible and adapter.is_device_accessible
    pinned = interop.NbrmmMemoryResource(nbrmm.mr.PinnedHostMemoryResource())
    assert pinned.is_host_accessible and not pinned.is_managed
    # A cuda.core resource under nbrmm: what it says of its memory.
    over_cuda_core = nbrmm.mr.StatisticsResourceAdaptor(
        interop.from_cuda_core_memory_resource(cuda_core_host_resource(is_managed=True))
    )
    adapter = interop.NbrmmMemoryResource(over_cuda_core)
    assert adapter.is_managed and adapter.is_host_accessible


def test_adapter_properties_can_be_given_and_are_read_only():
    heap, adapter = host_adapter(device_id=3, is_managed=True)
    assert (adapter.device_id, adapter.is_device_accessible) == (3, False)
    assert adapter.is_host_accessible and adapter.is_managed
    for name in ("device_id", "is_managed", "upstream_mr", "anything"):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(adapter, name, None)
        with pytest.raises(AttributeError, match="read-only"):
            delattr(adapter, name)
    assert adapter.device_id == 3


@pytest.mark.parametrize(
    ("kwargs", "exc", "param"),
    [
        ({"mr": object()}, TypeError, "mr"),
        ({"mr": "pool"}, TypeError, "mr"),
        ({"mr": cc.LEGACY_DEFAULT_STREAM}, TypeError, "mr"),
        ({"device_id": True}, TypeError, "device_id"),
        ({"device_id": "0"}, TypeError, "device_id"),
        ({"device_id": -2}, ValueError, "device_id"),
        ({"device_id": 2**31}, ValueError, "device_id"),
        ({"device_id": 2**64}, ValueError, "device_id"),
        ({"device_id": 0.0}, TypeError, "device_id"),
        ({"is_managed": 1}, TypeError, "is_managed"),
        ({"is_host_accessible": "yes"}, TypeError, "is_host_accessible"),
        ({"is_device_accessible": None, "is_managed": 0}, TypeError, "is_managed"),
    ],
)
def test_adapter_rejects_bad_arguments(kwargs, exc, param):
    # A copy: pytest keeps its parameters to the end, nbrmm objects must not be among them.
    kwargs = {"mr": HostHeap().resource(), **kwargs}
    with pytest.raises(exc, match=param):
        interop.NbrmmMemoryResource(**kwargs)


def test_a_cuda_core_resource_is_not_wrapped_again():
    with pytest.raises(TypeError, match="from_cuda_core_memory_resource"):
        interop.NbrmmMemoryResource(cuda_core_host_resource())


def test_adapter_defaults_to_the_current_resource_now():
    mr = HostHeap().resource()
    with nbrmm.mr.using_device_resource(mr):
        adapter = interop.to_cuda_core_memory_resource()
    assert adapter.upstream_mr is mr
    assert nbrmm.mr.get_current_device_resource() is not mr


def test_allocate_takes_nbrmm_memory_and_close_gives_it_back_once():
    heap, adapter = host_adapter()
    buf = adapter.allocate(100, stream=LEGACY)
    assert isinstance(buf, cc.Buffer)
    assert heap.live == {buf.handle: 100}
    assert buf.size == 100 and buf.memory_resource is adapter
    assert buf.is_host_accessible and not buf.is_device_accessible
    # Memory given as not device-accessible belongs to no device, whatever the nbrmm
    # resource's device (0 where a GPU is, -1 without one); the buffer's own device_id is
    # cuda.core's to derive (cuda-core 1.2.0 reports the current device, later versions
    # the resource's -1).
    assert adapter.upstream_mr.device in (-1, 0)
    assert adapter.device_id == -1 and buf.device_id in (-1, 0)
    write_host(buf.handle, b"cuda.core")
    assert read_host(buf.handle, 9) == b"cuda.core"
    buf.close()
    assert buf.is_closed and heap.live == {}
    buf.close()  # closing twice frees nothing more
    assert calls(heap) == ["allocate", "deallocate"]


def test_collected_and_context_managed_buffers_are_freed_once():
    heap, adapter = host_adapter()
    buf = adapter.allocate(64, stream=LEGACY)
    del buf
    collect()
    with adapter.allocate(32, stream=LEGACY) as buf:
        assert heap.live == {buf.handle: 32}
    assert buf.is_closed and heap.live == {}
    assert calls(heap) == ["allocate", "deallocate"] * 2


def test_allocate_and_deallocate_reach_nbrmm_on_the_stream_given():
    rec = Recorder()
    _, adapter = host_adapter(mr=rec)
    adapter.allocate(10, stream=LEGACY).close()
    adapter.allocate(10, stream=PER_THREAD).close()
    # Other stream objects are cuda.core streams once converted; defaults need no device.
    adapter.allocate(10, stream=nbrmm.PER_THREAD_DEFAULT_STREAM).close()
    adapter.allocate(10, stream=nbrmm.DEFAULT_STREAM).close()
    adapter.allocate(10, stream=ForeignStream(2)).close()
    # Each allocation reaches nbrmm on the stream given; each free on the stream cuda.core
    # frees on: the allocation's (cuda-core 1.2.0 records it for host memory too) or its
    # default stream (later versions record none for host memory).
    assert [call for call, _ in rec.log] == ["allocate", "deallocate"] * 5
    allocated = [stream for call, stream in rec.log if call == "allocate"]
    freed = [stream for call, stream in rec.log if call == "deallocate"]
    assert allocated == [1, 2, 2, 1, 2]
    assert all(f in (a, 1) for a, f in zip(allocated, freed)), freed
    ptr = raw_allocate(rec, 16)
    adapter.deallocate(ptr, 16, stream=ForeignStream(0x1234))  # any stream reaches nbrmm
    assert rec.log[-1] == ("deallocate", 0x1234)
    assert rec.heap.live == {}


@pytest.mark.parametrize(
    ("size", "exc", "match"),
    [
        (-1, ValueError, "size: must be non-negative"),
        (2**64, ValueError, "size: .* too large"),
        ("1KiB", TypeError, "size: expected an int, got str"),  # nbrmm would take it
        ("x", TypeError, "size: expected an int, got str"),
        (None, TypeError, "size: expected an int, got NoneType"),
        (True, TypeError, "size: expected an int, got bool"),
        (1.5, TypeError, "size: expected an int, got float"),
    ],
)
def test_bad_sizes_raise_and_leak_nothing(size, exc, match):
    heap, adapter = host_adapter()
    with pytest.raises(exc, match=match):
        adapter.allocate(size, stream=LEGACY)
    assert heap.live == {}
    assert calls(heap).count("allocate") == calls(heap).count("deallocate")


@pytest.mark.parametrize(
    "stream",
    [None, object(), 5, "stream", ForeignStream("x")],
    ids=["None", "object", "int", "str", "bad_protocol"],
)
def test_bad_streams_raise_and_allocate_nothing(stream):
    heap, adapter = host_adapter()
    with pytest.raises(TypeError, match="stream"):
        adapter.allocate(16, stream=stream)
    with pytest.raises(TypeError):
        adapter.allocate(16)  # stream is required, as in cuda.core
    assert heap.calls == []


def test_out_of_memory_is_a_memory_error_and_leaks_nothing():
    heap = HostHeap()
    limited = nbrmm.mr.LimitingResourceAdaptor(heap.resource(), 1024)
    _, adapter = host_adapter(heap, mr=limited)
    keep = adapter.allocate(1024, stream=LEGACY)
    with pytest.raises(MemoryError):
        adapter.allocate(256, stream=LEGACY)
    keep.close()
    assert heap.live == {} and limited.get_allocated_bytes() == 0


def test_failing_nbrmm_resource_propagates_and_leaks_nothing():
    def refuse(nbytes, stream):
        raise ValueError("no memory for you")

    _, adapter = host_adapter(mr=nbrmm.mr.CallbackMemoryResource(refuse, lambda *a: None))
    with pytest.raises(ValueError, match="no memory for you"):
        adapter.allocate(16, stream=LEGACY)


def test_bad_arguments_are_refused_by_name_before_a_resource_sees_them():
    # A resource written in Python may take anything: the adapter refuses a bad pointer,
    # size or stream itself, naming it, and the resource is never called.
    rec = Recorder()
    _, adapter = host_adapter(mr=rec)
    buf = adapter.allocate(16, stream=LEGACY)
    ptr = int(buf.handle)
    for bad_ptr, bad_size, error, name in [
        (ptr, "16", TypeError, "size"),
        (ptr, 16.0, TypeError, "size"),
        (ptr, True, TypeError, "size"),
        (ptr, -1, ValueError, "size"),
        (ptr, 2**64, ValueError, "size"),
        (str(ptr), 16, TypeError, "ptr"),
        (True, 16, TypeError, "ptr"),
        (-1, 16, ValueError, "ptr"),
        (2**64, 16, ValueError, "ptr"),
        (ptr, 16, TypeError, "stream"),
    ]:
        with pytest.raises(error, match=name):
            adapter.deallocate(bad_ptr, bad_size, stream=None if name == "stream" else LEGACY)
    for bad_size, error in [(-1, ValueError), (2**64, ValueError), ("16", TypeError),
                            (True, TypeError), (16.0, TypeError)]:
        with pytest.raises(error, match="size"):
            adapter.allocate(bad_size, stream=LEGACY)
    assert [call for call, _ in rec.log] == ["allocate"]
    buf.close()
    assert [call for call, _ in rec.log] == ["allocate", "deallocate"]
    assert rec.heap.live == {}


def test_integer_types_and_size_zero_are_taken():
    # NumPy integers and int subclasses are pointers and sizes too; the resource sees ints.
    np = pytest.importorskip("numpy")
    rec = Recorder()
    _, adapter = host_adapter(mr=rec)
    Int = type("Int", (int,), {})
    size = enum.IntEnum("Size", {"SMALL": 8}).SMALL
    bufs = [adapter.allocate(np.uint16(16), stream=LEGACY), adapter.allocate(size, stream=LEGACY)]
    assert sorted(rec.heap.live.values()) == [8, 16] and [b.size for b in bufs] == [16, 8]
    for b in bufs:
        b.close()
    p, q = (rec.allocate(n, nbrmm.DEFAULT_STREAM) for n in (16, 8))
    adapter.deallocate(np.uint64(p), np.int64(16), stream=LEGACY)
    adapter.deallocate(Int(q), size, stream=LEGACY)
    empty = adapter.allocate(0, stream=LEGACY)
    assert empty.size == 0
    empty.close()
    assert rec.heap.live == {} and len(rec.log) == 8


def test_each_allocation_goes_back_once_to_the_resource_that_made_it():
    heap, adapter = host_adapter()
    mr = adapter.upstream_mr
    bufs = [adapter.allocate(n, stream=LEGACY) for n in (1, 256, 4096)]
    assert sorted(heap.live.values()) == [1, 256, 4096]
    ptr, size = int(bufs[1].handle), bufs[1].size
    with pytest.raises(ValueError, match="nbytes"):  # the size it was allocated with
        adapter.deallocate(ptr, size + 1, stream=LEGACY)
    other_heap, other = host_adapter()
    with pytest.raises(ValueError, match="another resource"):
        other.deallocate(ptr, size, stream=LEGACY)
    for b in bufs:
        b.close()
    assert heap.live == {}
    with pytest.raises(ValueError, match="not an outstanding allocation"):  # twice
        adapter.deallocate(ptr, size, stream=LEGACY)
    with pytest.raises(ValueError, match="not an outstanding allocation"):  # never
        adapter.deallocate(0x1000, 16, stream=LEGACY)
    # Memory from the resource's own allocate() goes back through the adapter too.
    adapter.deallocate(mr.allocate(64), 64, stream=LEGACY)
    assert heap.live == {} and other_heap.calls == []
    assert calls(heap).count("allocate") == calls(heap).count("deallocate") == 4


def test_closed_streams_are_refused_and_leak_nothing():
    heap, adapter = host_adapter()
    closed = cc.Stream.from_handle(0x5000)
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        adapter.allocate(8, stream=closed)
    assert heap.calls == []
    ptr = raw_allocate(adapter.upstream_mr, 8)
    with pytest.raises(RuntimeError, match="closed"):
        adapter.deallocate(ptr, 8, stream=closed)
    assert heap.live == {ptr: 8}
    adapter.deallocate(ptr, 8, stream=LEGACY)
    assert heap.live == {}


def test_the_methods_take_their_arguments_as_cuda_core_passes_them():
    heap, adapter = host_adapter()
    with pytest.raises(TypeError, match="stream"):
        adapter.allocate(8)  # required, as in cuda.core
    with pytest.raises(TypeError, match="positional"):
        adapter.allocate(8, LEGACY)  # keyword-only
    with pytest.raises(TypeError, match="stream"):
        adapter.deallocate(0x1000, 8)
    assert heap.calls == []
    adapter.allocate(size=16, stream=LEGACY).close()
    ptr = raw_allocate(adapter.upstream_mr, 16)
    adapter.deallocate(size=16, ptr=ptr, stream=LEGACY)
    assert heap.live == {} and heap.calls[-2:] == [("allocate", 16, ptr), ("deallocate", 16, ptr)]
    for method, names in ((interop.NbrmmMemoryResource.allocate, ["self", "size", "stream"]),
                          (interop.NbrmmMemoryResource.deallocate,
                           ["self", "ptr", "size", "stream"])):
        params = inspect.signature(method).parameters
        assert list(params) == names and params["stream"].kind is params["stream"].KEYWORD_ONLY
    # On an instance whose __init__ never ran, they raise and touch nothing.
    bare = interop.NbrmmMemoryResource.__new__(interop.NbrmmMemoryResource)
    with pytest.raises(AttributeError):
        bare.allocate(8, stream=LEGACY)
    with pytest.raises(AttributeError):
        bare.deallocate(0x1000, 8, stream=LEGACY)


def test_a_subclass_of_the_adapter_allocates_from_its_resource():
    class Tagged(interop.NbrmmMemoryResource):
        __slots__ = ("tag",)

    heap = HostHeap()
    adapter = Tagged(heap.resource(), is_device_accessible=False)
    buf = adapter.allocate(48, stream=LEGACY)
    assert buf.memory_resource is adapter and list(heap.live.values()) == [48]
    buf.close()
    assert heap.live == {}


def _closed_stream():
    """A cuda.core Stream (subclass) that claims the legacy stream; cuda.core sees it
    closed (it was never constructed)."""

    class ClosedStream(cc.Stream):
        def __cuda_stream__(self):
            return (0, 1)

    return ClosedStream.__new__(ClosedStream)


def _adapter_reading(read):
    """An NbrmmMemoryResource subclass whose ``is_device_accessible`` (which cuda.core's
    Buffer.from_handle reads from 1.2.1 on) returns ``read(adapter)``."""

    class Reading(interop.NbrmmMemoryResource):
        @property
        def is_device_accessible(self):
            return read(self)

        @is_device_accessible.setter
        def is_device_accessible(self, value):
            pass

    return Reading


def test_memory_cuda_core_never_took_goes_back_when_from_handle_fails():
    # allocate() allocates, then cuda.core's Buffer.from_handle makes the Buffer. Should
    # from_handle raise before its Buffer takes the memory (a stream cuda.core refuses, a
    # property missing), the memory goes back at once, and the error is cuda.core's.
    closed = _closed_stream()
    heap, recorder = HostHeap(), Recorder()
    cpp = nbrmm.mr.StatisticsResourceAdaptor(testing.host_heap_resource())
    # Resources over Python's and over C++'s memory, and one written in Python.
    for mr in (heap.resource(), cpp, recorder):
        adapter = interop.to_cuda_core_memory_resource(mr, is_device_accessible=False)
        with pytest.raises(RuntimeError, match="closed"):
            adapter.allocate(64, stream=closed)
        adapter = interop.to_cuda_core_memory_resource(mr, is_device_accessible=False)
        interop.NbrmmMemoryResource.is_device_accessible.__delete__(adapter)
        try:  # (cuda.core reads the property in from_handle from 1.2.1 on)
            adapter.allocate(64, stream=LEGACY).close()
        except AttributeError as error:
            assert "is_device_accessible" in str(error)
    assert heap.live == {} and [c[0] for c in heap.calls] == ["allocate", "deallocate"] * 2
    counts = cpp.allocation_counts
    assert (counts.current_bytes, counts.total_count) == (0, 2)
    assert [call for call, _ in recorder.log] == ["allocate", "deallocate"] * 2
    assert recorder.heap.live == {}
    # A resource written in Python that returns no pointer: refused, by name.
    class NoPointer(nbrmm.mr.DeviceMemoryResource):
        def allocate(self, nbytes, stream=None):
            return "here"

        def deallocate(self, ptr, nbytes, stream=None):
            raise AssertionError("nothing was allocated")

    adapter = interop.to_cuda_core_memory_resource(NoPointer(), is_device_accessible=False)
    with pytest.raises(TypeError, match=r"NoPointer.allocate\(\) must return the pointer"):
        adapter.allocate(8, stream=LEGACY)


@pytest.mark.parametrize(("returned", "message"), [
    (0, r"^Odd.allocate\(\) returned a null pointer for 16 bytes"),
    (-5, r"^Odd.allocate\(\) returned -5, which is not a pointer value$"),
    (2**64, rf"^Odd.allocate\(\) returned {2**64}, which is not a pointer value$"),
    ("misaligned", r"^Odd.allocate\(\) returned 0x[0-9a-f]+, which is not aligned to 256 bytes"),
])
def test_a_pointer_from_a_resource_in_python_is_checked(returned, message):
    """The adapter checks what a resource written in Python returns as nbrmm's own paths
    do, instead of handing cuda.core a null, impossible or misaligned pointer; a
    misaligned block goes back to the resource first."""
    heap = HostHeap()
    given_back = []

    class Odd(nbrmm.mr.DeviceMemoryResource):
        def allocate(self, nbytes, stream=None):
            if returned == "misaligned":
                return heap.allocate(nbytes, stream) + 8
            return returned

        def deallocate(self, ptr, nbytes, stream=None):
            given_back.append((ptr, nbytes))
            heap.deallocate(ptr - 8, nbytes, stream)

    adapter = interop.to_cuda_core_memory_resource(Odd(), is_device_accessible=False)
    with pytest.raises(nbrmm.InvalidArgumentError, match=message):
        adapter.allocate(16, stream=LEGACY)
    assert heap.live == {}
    assert len(given_back) == (1 if returned == "misaligned" else 0)


def test_memory_from_handle_never_took_goes_back_once_with_threads_at_it():
    # Threads allocate at once, some buffers made and closed, some refused by cuda.core
    # after the memory was allocated: each allocation is given back exactly once.
    closed = _closed_stream()
    heap = HostHeap()
    adapters = [
        interop.to_cuda_core_memory_resource(heap.resource(), is_device_accessible=False),
        interop.to_cuda_core_memory_resource(Recorder(), is_device_accessible=False),
    ]
    failures = []

    def churn(adapter):
        try:
            try:  # (cuda.core before 1.2.1 records a stream for host memory too: a context)
                cc.Device().set_current()
            except Exception:  # noqa: BLE001 - no GPU: host memory needs none
                pass
            for i in range(300):
                if i % 3:
                    adapter.allocate(32 + i, stream=LEGACY).close()
                else:
                    with pytest.raises(RuntimeError, match="closed"):
                        adapter.allocate(32 + i, stream=closed)
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)

    threads = [threading.Thread(target=churn, args=(a,)) for a in adapters * 3]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the GIL changes hands inside the calls
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []
    calls = [c[0] for c in heap.calls]
    assert calls.count("allocate") == calls.count("deallocate") == 3 * 300 and heap.live == {}
    recorder = adapters[1].upstream_mr
    log = [call for call, _ in recorder.log]
    assert log.count("allocate") == log.count("deallocate") == 3 * 300
    assert recorder.heap.live == {}


class _SameAddress(nbrmm.mr.DeviceMemoryResource):
    """A resource written in Python that hands out one address value over and over (as
    offsets into a pool of its own would), and logs its calls."""

    def __init__(self):
        super().__init__()
        self.log = []

    def allocate(self, nbytes, stream=None):
        self.log.append("allocate")
        return 0x10000

    def deallocate(self, ptr, nbytes, stream=None):
        self.log.append("deallocate")


def test_memory_a_dropped_buffer_gave_back_is_not_given_back_again():
    # cuda.core's Buffer.from_handle may make the Buffer, drop it (its deleter calls
    # deallocate) and raise. Emulated here from the property from_handle reads (cuda.core
    # 1.2.1 on; before, the buffer is simply made): either way, deallocate runs once.
    def dropped_then_raised(adapter):
        interop.NbrmmMemoryResource.deallocate(adapter, 0x10000, 64, stream=LEGACY)
        raise RuntimeError("from_handle failed after dropping its Buffer")

    DroppedThenRaised = _adapter_reading(dropped_then_raised)
    mr = _SameAddress()
    adapter = DroppedThenRaised(mr, is_device_accessible=False)
    try:
        adapter.allocate(64, stream=LEGACY).close()
    except RuntimeError as error:
        assert "after dropping" in str(error)
    assert mr.log == ["allocate", "deallocate"]


def test_adapter_and_its_buffers_keep_the_nbrmm_resource_alive():
    heap = HostHeap()
    mr = heap.resource()
    mr_ref = weakref.ref(mr)
    adapter = interop.to_cuda_core_memory_resource(mr, is_device_accessible=False)
    adapter_ref = weakref.ref(adapter)
    buf = adapter.allocate(128, stream=LEGACY)
    del mr, adapter
    collect()
    assert mr_ref() is not None and adapter_ref() is buf.memory_resource
    del buf
    collect()
    assert mr_ref() is None and adapter_ref() is None
    assert heap.live == {}


def test_a_cycle_through_an_adapter_is_collected():
    class SelfServing(nbrmm.mr.DeviceMemoryResource):
        def __init__(self):
            super().__init__()
            self.heap = HostHeap()
            self.adapter = interop.to_cuda_core_memory_resource(self, is_device_accessible=False)

        def allocate(self, nbytes, stream):
            return self.heap.allocate(nbytes, stream)

        def deallocate(self, ptr, nbytes, stream):
            self.heap.deallocate(ptr, nbytes, stream)

    mr = SelfServing()
    heap, refs = mr.heap, [weakref.ref(mr), weakref.ref(mr.adapter)]
    mr.adapter.allocate(32, stream=LEGACY).close()
    del mr
    collect()
    assert all(r() is None for r in refs)
    assert heap.live == {}


def test_threads_allocate_and_free_through_one_adapter():
    heap, adapter = host_adapter()

    def work(_):
        cuda_core_thread()
        for i in range(300):
            buf = adapter.allocate(8 + i % 64, stream=LEGACY if i % 2 else PER_THREAD)
            if i % 3:
                buf.close()
            del buf

    errors = run_threads(work, 8)
    collect()
    assert errors == []
    assert heap.live == {}
    assert calls(heap).count("allocate") == calls(heap).count("deallocate") == 8 * 300


# --------------------------------------------------------------------------------------
# cuda.core resources as nbrmm resources
# --------------------------------------------------------------------------------------


def test_a_cuda_core_resource_serves_nbrmm_buffers():
    cc_mr = cuda_core_host_resource()
    mr = interop.from_cuda_core_memory_resource(cc_mr)
    assert type(mr) is interop.CudaCoreMemoryResource
    assert isinstance(mr, nbrmm.mr.DeviceMemoryResource)
    assert mr.upstream_mr is cc_mr and not mr.is_managed
    buf = nbrmm.Buffer(300, mr=mr)
    assert cc_mr.heap.live == {buf.ptr: 300} and mr.outstanding == 1
    write_host(buf.ptr, b"from cuda.core")
    assert read_host(buf.ptr, 14) == b"from cuda.core"
    other = nbrmm.Buffer(1000, mr=mr, stream=PER_THREAD)  # a cuda.core stream for nbrmm
    assert other.stream.owner is PER_THREAD
    del buf, other
    collect()
    assert cc_mr.heap.live == {} and mr.outstanding == 0
    assert [c[0] for c in cc_mr.heap.calls] == ["allocate", "allocate", "deallocate", "deallocate"]


def test_adaptors_and_pools_over_a_cuda_core_resource():
    cc_mr = cuda_core_host_resource()
    stats = nbrmm.mr.StatisticsResourceAdaptor(interop.from_cuda_core_memory_resource(cc_mr))
    pool = nbrmm.mr.PoolMemoryResource(stats, 1 << 16, 1 << 18)
    bufs = [nbrmm.Buffer(1000, mr=pool) for _ in range(10)]
    # The pool took one chunk from cuda.core and served every buffer from it.
    assert stats.allocation_counts.current_bytes == 1 << 16
    assert stats.allocation_counts.total_count == 1
    assert list(cc_mr.heap.live.values()) == [1 << 16]
    del bufs, pool
    collect()
    assert stats.allocation_counts.current_bytes == 0 and cc_mr.heap.live == {}


def test_cuda_core_resource_errors():
    with pytest.raises(TypeError, match="mr: expected a cuda.core.MemoryResource"):
        interop.from_cuda_core_memory_resource(object())
    with pytest.raises(TypeError, match="mr"):
        interop.CudaCoreMemoryResource(None)
    with pytest.raises(TypeError, match="mr"):
        interop.CudaCoreMemoryResource(HostHeap().resource())  # an nbrmm resource
    cc_mr = cuda_core_host_resource()
    mr = interop.CudaCoreMemoryResource(cc_mr)
    for bad, exc in ((-1, ValueError), (2**64, ValueError), (None, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="nbytes"):
            mr.allocate(bad)
    assert mr.allocate(0) == 0  # nothing is asked of cuda.core
    mr.deallocate(0, 0)
    with pytest.raises(ValueError, match="ptr: .* not a live allocation"):
        mr.deallocate(0x1000, 8)
    with pytest.raises(TypeError, match="ptr"):
        mr.deallocate("0x1000", 8)
    ptr = mr.allocate(64)
    mr.deallocate(ptr, 64)
    with pytest.raises(ValueError, match="not a live allocation"):
        mr.deallocate(ptr, 64)  # twice
    assert cc_mr.heap.live == {} and len(cc_mr.heap.calls) == 2


#: An exception of the name and module of cuda.core's CUDAError (which cuda.core does not
#: export), as cuda.core raises it for a driver call that fails.
CUDAError = type("CUDAError", (Exception,), {"__module__": "cuda.core._utils.cuda_utils"})


def test_cuda_core_failures_reach_nbrmm_callers():
    cc_mr = cuda_core_host_resource(fail=CUDAError("CUDA_ERROR_OUT_OF_MEMORY: out of memory"))
    mr = interop.from_cuda_core_memory_resource(cc_mr)
    with pytest.raises(nbrmm.OutOfMemory, match="out of memory") as info:
        nbrmm.Buffer(10, mr=mr)
    assert info.value.__cause__ is cc_mr.fail
    cc_mr.fail = ValueError("something else")
    with pytest.raises(ValueError, match="something else"):
        nbrmm.Buffer(10, mr=mr)
    # Only cuda.core's own error for out of memory is out of memory: any other exception
    # reaches the caller as itself, whatever its message says.
    for other in (
        RuntimeError("CUDA_ERROR_OUT_OF_MEMORY"),
        CUDAError("CUDA_ERROR_INVALID_VALUE"),
        type("MyError", (Exception,), {})("config OUT_OF_MEMORY_LIMIT missing"),
    ):
        cc_mr.fail = other
        with pytest.raises(type(other)) as info:
            nbrmm.Buffer(10, mr=mr)
        assert info.value is other
    cc_mr.fail = None
    buf = nbrmm.Buffer(48, mr=mr)
    assert cc_mr.heap.live == {buf.ptr: 48}
    del buf
    assert cc_mr.heap.live == {} and mr.outstanding == 0


def _returning(value_for):
    """A cuda.core resource (over a HostHeap) whose allocate returns ``value_for(self, size)``."""

    class Returning(cc.MemoryResource):
        heap = HostHeap()
        is_device_accessible, is_host_accessible, is_managed, device_id = False, True, False, -1

        def allocate(self, size, *, stream):
            return value_for(self, size)

        def deallocate(self, ptr, size, *, stream):
            self.heap.deallocate(ptr, size, stream)

    return Returning()


def _short_buffer(res, size):
    return cc.Buffer.from_handle(res.heap.allocate(1, None), 1, mr=res)


@pytest.mark.parametrize(
    ("value_for", "exc", "match"),
    [
        (_short_buffer, MemoryError, "invalid buffer for 4096 bytes .*1 bytes"),
        (lambda res, size: res.heap.allocate(size, None), TypeError, "returned int"),
        (lambda res, size: None, TypeError, "returned NoneType, not a cuda.core.Buffer"),
    ],
    ids=["smaller", "int", "None"],
)
def test_what_a_cuda_core_resource_returns_is_checked(value_for, exc, match):
    res = _returning(value_for)
    mr = interop.from_cuda_core_memory_resource(res)
    stats = nbrmm.mr.StatisticsResourceAdaptor(mr)
    with pytest.raises(exc, match=match):
        nbrmm.Buffer(4096, mr=stats)
    assert mr.outstanding == 0 and stats.allocation_counts.current_bytes == 0
    if value_for is _short_buffer:  # the short buffer was closed, its memory freed
        assert res.heap.live == {}
    else:  # what a resource returns that is no Buffer is not nbrmm's to free
        for ptr, nbytes in list(res.heap.live.items()):
            res.heap.deallocate(ptr, nbytes, None)


def test_memory_kind_of_a_cuda_core_resource_is_seen_through_adaptors():
    host_only = interop.from_cuda_core_memory_resource(cuda_core_host_resource())
    for top in (host_only, nbrmm.mr.StatisticsResourceAdaptor(host_only)):
        adapter = interop.NbrmmMemoryResource(top)
        assert (adapter.device_id, adapter.is_device_accessible) == (-1, False)
        assert adapter.is_host_accessible and not adapter.is_managed


def test_the_adapter_cannot_be_pickled_or_copied():
    _, adapter = host_adapter()
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="cannot pickle or copy 'NbrmmMemoryResource'"):
            pickle.dumps(adapter, protocol=protocol)
    for copier in (copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="cannot pickle or copy"):
            copier(adapter)


def test_cpp_copies_keep_the_cuda_core_resource_alive():
    cc_mr = cuda_core_host_resource()
    heap, cc_ref = cc_mr.heap, weakref.ref(cc_mr)
    mr = interop.from_cuda_core_memory_resource(cc_mr)
    cpp_ext.hold_resource(mr)
    try:
        del mr, cc_mr
        collect()
        assert cc_ref() is not None
        cpp_ext.allocate_held(256)  # C++ allocates through Python, without the GIL held
        assert heap.live == {} and [c[1] for c in heap.calls] == [256, 256]
    finally:
        cpp_ext.release_held()
    collect()
    assert cc_ref() is None


def test_a_cycle_through_a_cuda_core_resource_is_collected():
    cc_mr = cuda_core_host_resource()
    cc_mr.back = interop.from_cuda_core_memory_resource(cc_mr)
    nbrmm.Buffer(16, mr=cc_mr.back).close()
    heap, refs = cc_mr.heap, [weakref.ref(cc_mr), weakref.ref(cc_mr.back)]
    del cc_mr
    collect()
    assert all(r() is None for r in refs) and heap.live == {}


def test_wrappers_unwrap_instead_of_stacking():
    cc_mr = cuda_core_host_resource()
    mr = interop.from_cuda_core_memory_resource(cc_mr)
    assert interop.to_cuda_core_memory_resource(mr) is cc_mr
    adapter = interop.to_cuda_core_memory_resource(mr, is_managed=True)  # asked for: wrapped
    assert type(adapter) is interop.NbrmmMemoryResource and adapter.upstream_mr is mr
    assert interop.from_cuda_core_memory_resource(adapter) is mr
    nb = HostHeap().resource()
    assert interop.from_cuda_core_memory_resource(interop.NbrmmMemoryResource(nb)) is nb


def test_memory_crosses_both_layers_and_is_freed_once():
    heap, adapter = host_adapter()
    mr = interop.CudaCoreMemoryResource(adapter)  # nbrmm -> cuda.core -> nbrmm
    stats = nbrmm.mr.StatisticsResourceAdaptor(mr)
    bufs = [nbrmm.Buffer(n, mr=stats) for n in (1, 100, 10_000)]
    assert sorted(heap.live.values()) == [1, 100, 10_000]
    assert mr.outstanding == 3
    del bufs
    collect()
    assert heap.live == {} and mr.outstanding == 0 and len(heap.calls) == 6


def test_a_cuda_core_resource_may_call_back_into_nbrmm():
    heap = HostHeap()
    inner = heap.resource()
    seen = []

    class Reentrant(cc.MemoryResource):
        """Allocates its own bookkeeping from nbrmm while nbrmm waits for it."""

        def allocate(self, size, *, stream):
            seen.append(nbrmm.Buffer(16, mr=inner))
            return cc.Buffer.from_handle(heap.allocate(size, None), size, mr=self)

        def deallocate(self, ptr, size, *, stream):
            seen.pop()
            heap.deallocate(ptr, size, None)

        is_device_accessible = False
        is_host_accessible = True
        device_id = -1

    mr = interop.from_cuda_core_memory_resource(Reentrant())
    pool = nbrmm.mr.PoolMemoryResource(mr, 1 << 16)
    bufs = [nbrmm.Buffer(100, mr=mr) for _ in range(3)] + [nbrmm.Buffer(100, mr=pool)]
    assert len(seen) == 4 and len(heap.live) == 8
    del bufs, pool
    collect()
    assert seen == [] and heap.live == {}


def test_the_pool_resource_takes_only_cuda_core_pools():
    for bad in (cuda_core_host_resource(), object(), HostHeap().resource()):
        with pytest.raises(TypeError, match="mr: expected a cuda.core DeviceMemoryResource"):
            interop.CudaCorePoolResource(bad)


# --------------------------------------------------------------------------------------
# Buffers
# --------------------------------------------------------------------------------------


def test_an_nbrmm_buffer_as_a_cuda_core_buffer():
    heap = HostHeap()
    nb = nbrmm.Buffer(64, mr=heap.resource())
    ref = weakref.ref(nb)
    view = interop.to_cuda_core_buffer(nb)
    assert isinstance(view, cc.Buffer)
    assert (view.handle, view.size) == (nb.ptr, 64)
    assert isinstance(view.owner, interop.BufferOwner) and view.owner.buffer is nb
    assert view.memory_resource is None  # cuda.core frees nothing itself
    write_host(view.handle, b"shared")
    del nb
    collect()
    assert ref() is not None and read_host(ref().ptr, 6) == b"shared"
    assert interop.from_cuda_core_buffer(view) is ref()  # the way back is the original
    view.close()
    collect()
    assert ref() is None and heap.live == {} and calls(heap) == ["allocate", "deallocate"]


def test_collected_cuda_core_views_free_the_nbrmm_buffer_once():
    heap = HostHeap()
    nb = nbrmm.Buffer(32, mr=heap.resource())
    views = [interop.to_cuda_core_buffer(nb) for _ in range(3)]
    del nb
    collect()
    assert len(heap.live) == 1
    del views
    collect()
    assert heap.live == {} and calls(heap) == ["allocate", "deallocate"]


def test_a_cuda_core_buffer_as_an_nbrmm_buffer():
    heap, adapter = host_adapter()
    cc_buf = adapter.allocate(128, stream=LEGACY)
    ref = weakref.ref(cc_buf)
    nb = interop.from_cuda_core_buffer(cc_buf)
    assert isinstance(nb, nbrmm.Buffer)
    assert (nb.ptr, nb.size) == (cc_buf.handle, 128)
    assert isinstance(nb.mr, interop.CudaCoreMemoryResource)
    assert nb.stream.handle == 0  # the default stream unless one is given
    assert interop.to_cuda_core_buffer(nb) is cc_buf  # the way back is the original
    write_host(nb.ptr, b"adopted")
    del cc_buf
    collect()
    assert ref() is not None and read_host(ref().handle, 7) == b"adopted"
    nb.close()  # lets go of the cuda.core Buffer, which frees its memory
    collect()
    assert ref() is None and heap.live == {} and calls(heap) == ["allocate", "deallocate"]


def test_an_adopted_buffer_leaves_the_cuda_core_buffer_to_its_other_owners():
    heap, adapter = host_adapter()
    cc_buf = adapter.allocate(16, stream=LEGACY)
    nb = interop.from_cuda_core_buffer(cc_buf, stream=PER_THREAD)
    assert nb.stream.handle == 2 and nb.stream.owner is PER_THREAD
    del nb
    collect()
    assert not cc_buf.is_closed and heap.live == {cc_buf.handle: 16}
    assert interop.from_cuda_core_buffer(cc_buf) is not None  # still usable
    collect()
    cc_buf.close()
    assert heap.live == {}


def test_an_adopted_buffer_gets_more_memory_from_the_cuda_core_resource():
    heap, adapter = host_adapter()
    nb = interop.from_cuda_core_buffer(adapter.allocate(64, stream=LEGACY))
    ptr = nb.mr.allocate(256)  # growth and copies allocate here
    assert heap.live[ptr] == 256
    nb.mr.deallocate(ptr, 256)
    assert len(heap.live) == 1
    # A cuda.core Buffer without a resource lends its memory and nothing more.
    owner = HostHeap()
    raw = owner.allocate(32, None)
    plain = cc.Buffer.from_handle(raw, 32, owner=owner)
    nb2 = interop.from_cuda_core_buffer(plain)
    assert nb2.ptr == raw
    with pytest.raises(MemoryError, match="cannot allocate more"):
        nb2.mr.allocate(8)
    del nb, nb2, plain
    collect()
    assert heap.live == {}
    owner.deallocate(raw, 32, None)


def test_buffers_of_size_zero_cross_both_ways():
    heap, adapter = host_adapter()
    nb = nbrmm.Buffer(0, mr=heap.resource())
    view = interop.to_cuda_core_buffer(nb)
    assert view.size == 0 and view.owner.buffer is nb
    cc_buf = adapter.allocate(0, stream=LEGACY)
    back = interop.from_cuda_core_buffer(cc_buf)
    assert back.size == 0
    del nb, view, cc_buf, back
    collect()
    assert heap.live == {}


@pytest.mark.parametrize(
    "bad", [None, object(), b"bytes", 0x1000], ids=["None", "object", "bytes", "int"]
)
def test_buffer_conversions_reject_other_objects(bad):
    with pytest.raises(TypeError, match="buffer: expected an nbrmm.Buffer"):
        interop.to_cuda_core_buffer(bad)
    with pytest.raises(TypeError, match="buffer: expected a cuda.core.Buffer"):
        interop.from_cuda_core_buffer(bad)


def test_closed_buffers_are_refused():
    heap, adapter = host_adapter()
    nb = nbrmm.Buffer(8, mr=heap.resource())
    nb.close()
    with pytest.raises(ValueError, match="closed"):
        interop.to_cuda_core_buffer(nb)
    cc_buf = adapter.allocate(8, stream=LEGACY)
    cc_buf.close()
    with pytest.raises(ValueError, match="closed"):
        interop.from_cuda_core_buffer(cc_buf)
    # A closed original is not handed back: a new view of the live memory is made.
    nb2 = nbrmm.Buffer(8, mr=heap.resource())
    view = interop.to_cuda_core_buffer(nb2)
    view.close()
    with pytest.raises(ValueError, match="closed"):
        interop.from_cuda_core_buffer(view)
    assert heap.live == {nb2.ptr: 8}


def test_a_bad_stream_for_an_adopted_buffer_leaves_it_untouched():
    heap, adapter = host_adapter()
    cc_buf = adapter.allocate(8, stream=LEGACY)
    with pytest.raises(TypeError, match="stream"):
        interop.from_cuda_core_buffer(cc_buf, stream=object())
    assert not cc_buf.is_closed
    cc_buf.close()
    assert heap.live == {}


# --------------------------------------------------------------------------------------
# Streams
# --------------------------------------------------------------------------------------


def test_default_streams_convert_without_a_device():
    # Both sides speak __cuda_stream__: (version 0, the handle).
    assert nbrmm.PER_THREAD_DEFAULT_STREAM.__cuda_stream__() == (0, 2)
    assert LEGACY.__cuda_stream__() == (0, 1)
    assert interop.to_cuda_core_stream(ForeignStream(2)) is PER_THREAD
    assert interop.to_cuda_core_stream(nbrmm.DEFAULT_STREAM) is LEGACY
    assert interop.to_cuda_core_stream(nbrmm.LEGACY_DEFAULT_STREAM) is LEGACY
    assert interop.to_cuda_core_stream(nbrmm.PER_THREAD_DEFAULT_STREAM) is PER_THREAD
    assert interop.to_cuda_core_stream(ForeignStream(0)) is LEGACY
    assert interop.to_cuda_core_stream(PER_THREAD) is PER_THREAD
    assert interop.to_cuda_core_stream(nbrmm.Stream(PER_THREAD)) is PER_THREAD  # its owner


def test_cuda_core_streams_are_nbrmm_streams():
    s = interop.from_cuda_core_stream(PER_THREAD)
    assert isinstance(s, nbrmm.Stream) and s.handle == 2 and s.owner is PER_THREAD
    assert s.is_per_thread_default()
    assert interop.from_cuda_core_stream(nbrmm.DEFAULT_STREAM) is nbrmm.DEFAULT_STREAM
    with pytest.raises(TypeError, match="^stream: .*got nbrmm.Stream that is not initialized"):
        interop.from_cuda_core_stream(nbrmm.Stream.__new__(nbrmm.Stream))
    assert nbrmm.Stream(LEGACY).handle == 1 and nbrmm.Stream(LEGACY).is_default()
    # nbrmm takes cuda.core streams wherever it takes a stream.
    seen = []
    heap = HostHeap()

    def allocate(nbytes, stream):
        seen.append(stream.handle)
        return heap.allocate(nbytes, stream)

    mr = nbrmm.mr.CallbackMemoryResource(allocate, heap.deallocate)
    mr.deallocate(mr.allocate(64, PER_THREAD), 64, PER_THREAD)
    buf = nbrmm.Buffer(64, mr=mr, stream=LEGACY)
    assert seen == [2, 1] and buf.stream.owner is LEGACY


@pytest.mark.parametrize(
    "bad",
    [
        None,
        object(),
        3,
        ForeignStream("h"),
        type("Bad", (), {"__cuda_stream__": lambda s: [0, 1]})(),
        ForeignStream(True),
    ],
    ids=["None", "object", "int", "str_handle", "list", "bool_handle"],
)
def test_stream_conversions_reject_non_streams(bad):
    with pytest.raises(TypeError, match="stream"):
        interop.to_cuda_core_stream(bad)
    with pytest.raises(TypeError, match="stream"):
        interop.from_cuda_core_stream(bad)


@pytest.mark.parametrize("handle", [-1, 2**64, -(2**63)])
def test_stream_handles_out_of_range_are_refused_naming_the_stream(handle):
    heap, adapter = host_adapter()
    bad = ForeignStream(handle)
    for convert in (interop.to_cuda_core_stream, interop.from_cuda_core_stream):
        with pytest.raises(ValueError, match=f"stream: __cuda_stream__\\(\\) returned {handle}"):
            convert(bad)
    with pytest.raises(ValueError, match="stream"):
        adapter.allocate(8, stream=bad)
    assert heap.live == {}


# --------------------------------------------------------------------------------------
# Interpreter exit
# --------------------------------------------------------------------------------------


def test_exit_with_live_buffers_on_both_sides():
    out = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        import cuda.core as cc, nbrmm, nbrmm.interop as interop
        from helpers import HostHeap, cuda_core_host_resource
        if nbrmm.get_device_count() > 0:
            cc.Device(nbrmm.get_current_device()).set_current()
        heap = HostHeap()
        adapter = interop.to_cuda_core_memory_resource(heap.resource(), is_device_accessible=False)
        kept = [adapter.allocate(100, stream=cc.LEGACY_DEFAULT_STREAM) for _ in range(3)]
        upstream = interop.from_cuda_core_memory_resource(cuda_core_host_resource())
        bufs = [nbrmm.Buffer(100, mr=upstream) for _ in range(3)]
        pool = nbrmm.mr.PoolMemoryResource(upstream, 1 << 16)
        pooled = nbrmm.Buffer(64, mr=pool)
        lent = adapter.allocate(64, stream=cc.LEGACY_DEFAULT_STREAM)
        adopted = interop.from_cuda_core_buffer(lent)
        del lent
        view = interop.to_cuda_core_buffer(nbrmm.Buffer(32, mr=heap.resource()))
        nbrmm.mr.set_current_device_resource(upstream)
        current = nbrmm.Buffer(16)
        print("ready")
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ready"
    assert "leaked" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr
    assert "Warning" not in out.stderr, out.stderr


def test_exit_with_a_cuda_core_resource_of_the_main_module_behind_live_buffers():
    # The resource's class lives in __main__, whose globals keep the nbrmm Buffers: the
    # cuda.core Buffers under them keep the resource from C++, out of the collector's view.
    out = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        import cuda.core as cc, nbrmm, nbrmm.interop as interop
        from helpers import HostHeap
        if nbrmm.get_device_count() > 0:
            cc.Device(nbrmm.get_current_device()).set_current()

        class MainResource(cc.MemoryResource):
            heap = HostHeap()
            is_device_accessible, is_host_accessible = False, True
            is_managed, device_id = False, -1

            def allocate(self, size, *, stream):
                ptr = self.heap.allocate(size, stream)
                return cc.Buffer.from_handle(ptr, size, mr=self, stream=stream)

            def deallocate(self, ptr, size, *, stream):
                self.heap.deallocate(ptr, size, stream)

        res = MainResource()
        kept = nbrmm.Buffer(100, mr=interop.from_cuda_core_memory_resource(res))
        pool = nbrmm.mr.PoolMemoryResource(interop.from_cuda_core_memory_resource(res), 1 << 16)
        pooled = nbrmm.Buffer(64, mr=pool)
        res.lent = interop.from_cuda_core_buffer(res.allocate(32, stream=cc.LEGACY_DEFAULT_STREAM))
        print("ready")
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ready"
    assert "leaked" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr


def test_at_exit_interop_lets_go_of_what_it_holds():
    # A handler registered before nbrmm.interop is imported runs after interop's own.
    out = run_python(
        f"""
        import atexit, sys
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        import cuda.core as cc, nbrmm, nbrmm.mr
        from helpers import HostHeap, cuda_core_host_resource

        def after_interop():
            # The adapter let go of its nbrmm resource: it allocates no more, and a buffer
            # freed now is left to the process, as cuda.core leaves its own at exit.
            assert adapter.upstream_mr is None and resource_ref() is not None
            try:
                adapter.allocate(8, stream=cc.LEGACY_DEFAULT_STREAM)
            except RuntimeError as e:
                assert "shutting down" in str(e), e
            else:
                raise AssertionError("allocated after exit")
            kept.close()
            assert len(heap.live) == 1
            # The nbrmm resource over cuda.core let go of its cuda.core Buffers (cuda.core
            # closed them) and allocates no more; freeing its memory now frees nothing.
            assert upstream.outstanding == 0 and cc_mr.heap.live == {{}}
            try:
                nbrmm.Buffer(8, mr=upstream)
            except RuntimeError as e:
                assert "shutting down" in str(e), e
            else:
                raise AssertionError("allocated after exit")
            buf.close()
            assert len(cc_mr.heap.calls) == 2
            # The nbrmm Buffer behind a cuda.core view went back to its resource.
            assert view.owner.buffer is None and view_heap.live == {{}}
            print("checked at exit")

        atexit.register(after_interop)
        import weakref
        import nbrmm.interop as interop
        try:  # where a GPU is: cuda.core before 1.2.1 records a stream for host memory too
            cc.Device(0).set_current()
        except Exception:
            pass

        heap, view_heap = HostHeap(), HostHeap()
        adapter = interop.to_cuda_core_memory_resource(heap.resource(), is_device_accessible=False)
        resource_ref = weakref.ref(adapter.upstream_mr)
        kept = adapter.allocate(8, stream=cc.LEGACY_DEFAULT_STREAM)
        cc_mr = cuda_core_host_resource()
        upstream = interop.from_cuda_core_memory_resource(cc_mr)
        buf = nbrmm.Buffer(40, mr=upstream)
        view = interop.to_cuda_core_buffer(nbrmm.Buffer(16, mr=view_heap.resource()))
        print("ready")
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ready", "checked", "at", "exit"], out.stdout + out.stderr
    assert "Exception ignored" not in out.stderr and "leaked" not in out.stderr, out.stderr


_EXIT_WHILE_THREADS_ALLOCATE = """
    import atexit, sys, threading, time
    ended = []
    # Registered before nbrmm's exit hook, so run after it: how long exit waited.
    atexit.register(lambda: print(f"waited {{time.monotonic() - ended[0]:.2f}}"))
    sys.path.insert(0, {tests!r})
    import cuda.core as cc, nbrmm, nbrmm.mr, nbrmm.interop as interop
    from helpers import HostHeap, cuda_core_host_resource
    from extensions import testing

    class Mine(nbrmm.mr.DeviceMemoryResource):
        def __init__(self):
            super().__init__()
            self.heap = HostHeap()
        def allocate(self, n, stream=None):
            return self.heap.allocate(n, stream)
        def deallocate(self, p, n, stream=None):
            self.heap.deallocate(p, n, stream)

    def adapt(mr):
        return {adapt}

    # Over a callback resource, a resource written in Python and a C++ heap.
    resources = [(adapt(HostHeap().resource()), nbrmm.DEFAULT_STREAM),
                 (adapt(Mine()), cc.LEGACY_DEFAULT_STREAM),
                 (adapt(testing.host_heap_resource()), cc.LEGACY_DEFAULT_STREAM)]
    upstream = interop.from_cuda_core_memory_resource(cuda_core_host_resource())
    started = threading.Semaphore(0)

    def churn(mr, stream):
        first = True
        while True:
            try:
                {allocate}
                nbrmm.Buffer(64, mr=upstream)
            except RuntimeError:  # the interpreter is shutting down
                pass
            if first:
                started.release()
                first = False

    for mr, stream in resources * 2:
        threading.Thread(target=churn, args=(mr, stream), daemon=True).start()
    for _ in range(2 * len(resources)):
        started.acquire(timeout=30)
    time.sleep(0.05)
    print("exiting", flush=True)
    ended.append(time.monotonic())
    """


def _exit_while_threads_allocate(adapt, allocate):
    # Several runs: the race is timing's.
    code = _EXIT_WHILE_THREADS_ALLOCATE.format(
        tests=str(pathlib.Path(__file__).parent), adapt=adapt, allocate=allocate
    )
    for _ in range(4):
        out = run_python(code)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split()
        assert lines[0] == "exiting" and lines[1] == "waited", out.stdout
        assert float(lines[2]) < 1.0, out.stdout  # (the bound is 2 s)
        assert "leaked" not in out.stderr and "FATAL" not in out.stderr, out.stderr


def test_exit_while_threads_allocate_from_cuda_core():
    # Daemon threads allocate nbrmm Buffers from nbrmm resources (some calling Python) and
    # from a cuda.core resource written in Python when the interpreter exits. nbrmm's
    # calls under way end and new ones from other threads are refused, so CPython never
    # ends a thread inside C++ (which aborted the process: "exception not rethrown"), and
    # exit does not wait its whole 2 s bound for threads parked for good.
    _exit_while_threads_allocate("mr", "nbrmm.Buffer(64, mr=mr)")


@pytest.mark.xfail(
    sys.version_info < (3, 14),
    reason="cuda.core (1.2.0 to 1.2.2 at least) frees a buffer in a C++ destructor that runs "
    "the resource's Python deallocate, where CPython before 3.14 may end a daemon thread "
    "at exit, which aborts (docs/interop.md, Interpreter exit)",
    strict=False,
)
def test_exit_while_threads_allocate_through_adapters():
    # The same through NbrmmMemoryResource adapters: cuda.core closes each buffer in its
    # own C++ destructor, which calls the adapter's Python deallocate. Before 3.14 a daemon
    # thread that CPython ends there (at any bytecode, or where the resource's Python code
    # releases the GIL) aborts the process, with or without nbrmm; from 3.14 it must pass.
    _exit_while_threads_allocate(
        "interop.to_cuda_core_memory_resource(mr, is_device_accessible=False, "
        "is_host_accessible=True)",
        "mr.allocate(64, stream=stream).close()",
    )


# --------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------


@pytest.fixture
def device():
    """cuda.core's Device for nbrmm's current device, made current in this thread (as
    cuda.core requires); its ``memory_resource`` is restored afterwards."""
    dev = cc.Device(nbrmm.get_current_device())
    dev.set_current()
    previous = dev.memory_resource
    yield dev
    dev.memory_resource = previous
    dev.sync()
    collect()


def arena_with_stats():
    arena = nbrmm.mr.ArenaMemoryResource(nbrmm.mr.CudaMemoryResource(), arena_size=4 * POOL_SIZE)
    return nbrmm.mr.StatisticsResourceAdaptor(arena)


PAYLOAD = bytes(range(256)) * 16


@pytest.mark.gpu
def test_gpu_a_device_allocates_from_an_nbrmm_arena(device):
    stats = arena_with_stats()
    adapter = interop.to_cuda_core_memory_resource(stats)
    assert adapter.device_id == device.device_id and adapter.is_device_accessible
    assert not adapter.is_host_accessible and not adapter.is_managed
    device.memory_resource = adapter
    stream = device.create_stream()
    buf = device.allocate(len(PAYLOAD), stream=stream)
    assert buf.memory_resource is adapter and buf.device_id == device.device_id
    counts = stats.allocation_counts
    assert (counts.current_bytes, counts.current_count) == (len(PAYLOAD), 1)
    buf.fill(0x2A, stream=stream)
    stream.sync()
    assert interop.from_cuda_core_buffer(buf).tobytes() == b"\x2a" * len(PAYLOAD)
    buf.close(stream)
    stream.sync()
    assert stats.allocation_counts.current_bytes == 0
    device.allocate(100, stream=device.default_stream)  # dropped at once: collected
    collect()
    counts = stats.allocation_counts
    assert (counts.current_bytes, counts.total_count) == (0, 2)


@pytest.mark.gpu
def test_gpu_memory_a_failed_buffer_took_goes_back_once(device):
    # Buffer.from_handle makes the Buffer, then fails to record the default stream for
    # its deallocation (no CUDA context is current on a new thread) and drops it: cuda.core
    # gives the memory back through deallocate. allocate() raises cuda.core's error and
    # does not give it back a second time, on either path.
    heap, recorder = HostHeap(), Recorder()
    errors = []

    def allocate_on_a_new_thread(adapter):
        try:
            adapter.allocate(64, stream=LEGACY)
        except Exception as error:  # noqa: BLE001 - checked below
            errors.append(error)

    for mr in (heap.resource(), recorder):
        adapter = interop.to_cuda_core_memory_resource(
            mr, is_device_accessible=True, is_host_accessible=True
        )
        thread = threading.Thread(target=allocate_on_a_new_thread, args=(adapter,))
        thread.start()
        thread.join()
    assert len(errors) == 2 and all("context" in str(e) for e in errors), errors
    assert [c[0] for c in heap.calls] == ["allocate", "deallocate"] and heap.live == {}
    assert [call for call, _ in recorder.log] == ["allocate", "deallocate"]
    assert recorder.heap.live == {}


@pytest.mark.gpu
def test_gpu_cuda_core_copies_into_and_out_of_nbrmm_memory(device):
    stats = arena_with_stats()
    nb = nbrmm.Buffer(len(PAYLOAD), mr=stats)
    view = interop.to_cuda_core_buffer(nb)
    own = cc.DeviceMemoryResource(device.device_id)  # cuda.core's own memory
    stream = device.create_stream()
    src = own.allocate(len(PAYLOAD), stream=stream)
    src.fill(0x5A, stream=stream)
    view.copy_from(src, stream=stream)  # cuda.core writes nbrmm's memory
    stream.sync()
    assert nb.tobytes() == b"\x5a" * len(PAYLOAD)
    nb.copy_from_host(PAYLOAD)  # nbrmm writes; cuda.core copies it into its own memory
    dst = view.copy_to(own.allocate(len(PAYLOAD), stream=stream), stream=stream)
    stream.sync()
    assert interop.from_cuda_core_buffer(dst).tobytes() == PAYLOAD
    counts = stats.allocation_counts
    assert (counts.current_count, counts.total_count) == (1, 1)  # only nb came from nbrmm
    src.close(stream)
    dst.close(stream)
    view.close()  # cuda.core frees nothing of it: it lets go of nb
    stream.sync()
    del nb
    assert stats.allocation_counts.current_bytes == 0


KERNEL = r"""
extern "C" __global__ void add_index(unsigned char* data, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) { data[i] = (unsigned char)(data[i] + i); }
}
"""


def compiled_kernel(device):
    """``add_index`` compiled by cuda.core's Program (NVRTC)."""
    try:
        options = cc.ProgramOptions(arch=f"sm_{device.arch}")
        program = cc.Program(KERNEL, code_type="c++", options=options)
        return program.compile("cubin").get_kernel("add_index")
    except Exception as e:  # noqa: BLE001 - only a missing NVRTC is tolerated
        if "nvrtc" in f"{type(e).__name__} {e}".lower():
            pytest.xfail(f"NVRTC is not available to cuda.core: {e}")
        raise


@pytest.mark.gpu
def test_gpu_a_cuda_core_kernel_writes_memory_nbrmm_allocated(device):
    kernel = compiled_kernel(device)
    n = 100_000
    nb = nbrmm.Buffer(n, mr=arena_with_stats())
    nb.copy_from_host(b"\x01" * n)
    stream = device.create_stream()
    config = cc.LaunchConfig(grid=(n + 255) // 256, block=256)
    cc.launch(stream, config, kernel, interop.to_cuda_core_buffer(nb), ctypes.c_uint64(n))
    stream.sync()
    assert nb.tobytes() == bytes((1 + i) % 256 for i in range(n))
    # The same through cuda.core allocating from nbrmm (the adapter as its resource).
    stats = arena_with_stats()
    device.memory_resource = interop.to_cuda_core_memory_resource(stats)
    buf = device.allocate(n, stream=stream)
    buf.fill(3, stream=stream)
    cc.launch(stream, config, kernel, buf, ctypes.c_uint64(n))
    stream.sync()
    assert interop.from_cuda_core_buffer(buf).tobytes() == bytes((3 + i) % 256 for i in range(n))
    assert stats.allocation_counts.current_bytes == n
    buf.close(stream)
    stream.sync()
    assert stats.allocation_counts.current_bytes == 0


@pytest.mark.gpu
def test_gpu_nbrmm_allocates_from_a_cuda_core_pool(device):
    pool = cc.DeviceMemoryResource(device.device_id, cc.DeviceMemoryResourceOptions())
    mr = interop.from_cuda_core_memory_resource(pool)
    assert type(mr) is interop.CudaCorePoolResource
    assert isinstance(mr, nbrmm.mr.CudaAsyncViewMemoryResource)
    assert mr.upstream_mr is pool and mr.device == device.device_id and not mr.is_managed
    assert mr.pool_handle() == int(pool.handle)
    assert interop.to_cuda_core_memory_resource(mr) is pool  # no detour the other way
    stats = nbrmm.mr.StatisticsResourceAdaptor(mr)
    before = pool.attributes.used_mem_current
    nb = nbrmm.Buffer(1 << 20, mr=stats)
    nb.copy_from_host(b"q" * (1 << 20))
    assert nb.tobytes() == b"q" * (1 << 20)
    # Both see it: nbrmm's statistics and cuda.core's pool.
    assert stats.allocation_counts.current_bytes == 1 << 20
    assert pool.attributes.used_mem_current >= before + (1 << 20)
    # cuda.core's allocations from the same pool are cuda.core's alone.
    stream = device.create_stream()
    own = pool.allocate(4096, stream=stream)
    assert stats.allocation_counts.current_count == 1
    own.close(stream)
    del nb
    device.sync()
    assert stats.allocation_counts.current_bytes == 0
    assert pool.attributes.used_mem_current == before


@pytest.mark.gpu
def test_gpu_pool_resource_checks_its_pool(device):
    pool = cc.DeviceMemoryResource(device.device_id, cc.DeviceMemoryResourceOptions())
    pool.close()
    with pytest.raises(ValueError, match="mr: the cuda.core resource is closed"):
        interop.CudaCorePoolResource(pool)
    if cc.Device.get_all_devices()[-1].device_id != device.device_id:
        other = cc.DeviceMemoryResource(cc.Device.get_all_devices()[-1].device_id)
        with pytest.raises(ValueError, match="mr: the pool is on device"):
            interop.CudaCorePoolResource(other)


@pytest.mark.gpu
def test_gpu_cpp_copies_of_the_pool_resource_keep_the_pool():
    out = run_python(
        """
        import gc, weakref
        import cuda.core as cc, nbrmm, nbrmm.mr, nbrmm.interop as interop
        dev = cc.Device(nbrmm.get_current_device())
        dev.set_current()
        pool = cc.DeviceMemoryResource(dev.device_id, cc.DeviceMemoryResourceOptions())
        ref = weakref.ref(pool)
        mr = interop.from_cuda_core_memory_resource(pool)
        nbrmm.mr.set_current_device_resource(mr)
        del mr, pool
        gc.collect()
        assert ref() is not None
        nbrmm._nbrmm._release_python_objects()  # left: the C++ copy in librmm's map
        gc.collect()
        assert ref() is not None, "the map's C++ copy must keep the pool's owner"
        current = nbrmm.mr.get_current_device_resource()
        assert type(current) is nbrmm.mr.CudaAsyncViewMemoryResource, type(current)
        assert current.pool_handle() == int(ref().handle)
        buf = nbrmm.Buffer(1 << 16)
        buf.copy_from_host(b"p" * (1 << 16))
        assert buf.tobytes() == b"p" * (1 << 16)
        adaptor = nbrmm.mr.StatisticsResourceAdaptor(current)
        nbrmm.mr.reset_per_device_resource(dev.device_id)
        del current
        gc.collect()
        assert ref() is not None  # the buffer's and the adaptor's copies
        del buf
        gc.collect()
        assert ref() is not None  # the adaptor's
        del adaptor
        gc.collect()
        assert ref() is None
        print("ok")
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok", out.stdout + out.stderr
    assert "leaked" not in out.stderr, out.stderr


@pytest.mark.gpu
def test_gpu_a_cycle_through_a_pool_and_its_resource_is_collected(device):
    class OwnPool(cc.DeviceMemoryResource):
        """A Python subclass: it can refer to the nbrmm resource made of it."""

    pool = OwnPool(device.device_id, cc.DeviceMemoryResourceOptions())
    pool.nbrmm = interop.from_cuda_core_memory_resource(pool)
    buf = nbrmm.Buffer(1000, mr=pool.nbrmm)
    buf.copy_from_host(b"c" * 1000)
    del buf
    refs = [weakref.ref(pool), weakref.ref(pool.nbrmm)]
    del pool
    collect()
    assert all(r() is None for r in refs)


def _pool_or_xfail(make, what):
    try:
        return make()
    except Exception as e:  # noqa: BLE001 - the driver or device may lack these pools
        pytest.xfail(f"cuda.core cannot make a {what} pool here: {type(e).__name__}: {e}")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["managed", "pinned"])
def test_gpu_managed_and_pinned_pools_serve_nbrmm(device, kind):
    if kind == "managed":
        make = lambda: cc.ManagedMemoryResource(cc.ManagedMemoryResourceOptions())  # noqa: E731
    else:
        make = lambda: cc.PinnedMemoryResource(cc.PinnedMemoryResourceOptions())  # noqa: E731
    pool = _pool_or_xfail(make, kind)
    mr = interop.from_cuda_core_memory_resource(pool)
    assert type(mr) is interop.CudaCorePoolResource
    assert mr.is_managed == (kind == "managed")
    adapter = interop.NbrmmMemoryResource(mr)
    assert adapter.is_host_accessible and adapter.is_managed == (kind == "managed")
    nb = nbrmm.Buffer(4096, mr=mr)
    device.sync()
    write_host(nb.ptr, PAYLOAD[:4096])  # host-accessible memory: the host writes it
    assert nb.tobytes() == PAYLOAD[:4096]
    del nb
    device.sync()


@pytest.mark.gpu
def test_gpu_a_python_cuda_core_resource_serves_nbrmm_on_its_streams(device):
    pinned = cc.LegacyPinnedMemoryResource()
    mr = interop.from_cuda_core_memory_resource(pinned)
    assert type(mr) is interop.CudaCoreMemoryResource
    assert interop.NbrmmMemoryResource(mr).device_id == -1  # pinned memory: no device
    stats = nbrmm.mr.StatisticsResourceAdaptor(mr)
    stream = nbrmm.Stream()
    nb = nbrmm.Buffer(4096, mr=stats, stream=stream)  # cuda.core gets a stream of its own
    assert mr.outstanding == 1 and stats.allocation_counts.current_bytes == 4096
    stream.synchronize()
    write_host(nb.ptr, PAYLOAD[:4096])
    assert nb.tobytes() == PAYLOAD[:4096]
    nb.resize(10_000, stream=stream)  # a second allocation, the first freed on `stream`
    stream.synchronize()
    assert nb.tobytes()[:4096] == PAYLOAD[:4096] and mr.outstanding == 1
    del nb
    assert mr.outstanding == 0 and stats.allocation_counts.current_bytes == 0
    # Freed on another stream than its allocation's: cuda.core closes it on that one.
    nb = nbrmm.Buffer(100, mr=mr)
    nb.copy_from_host(b"r" * 100)
    nb.resize(200, stream=stream)
    stream.synchronize()
    assert nb.tobytes()[:100] == b"r" * 100 and mr.outstanding == 1
    del nb
    assert mr.outstanding == 0


@pytest.mark.gpu
def test_gpu_memory_goes_back_on_the_stream_cuda_core_orders_it_on(device):
    rec = Recorder(inner=nbrmm.mr.CudaAsyncMemoryResource())
    adapter = interop.to_cuda_core_memory_resource(rec)
    s1, s2 = device.create_stream(), device.create_stream()
    h1, h2 = int(s1.handle), int(s2.handle)
    adapter.allocate(1000, stream=s1).close(s2)  # freed on the stream given to close
    buf = adapter.allocate(1000, stream=s1)
    del buf  # collected: freed on the stream it was allocated on
    collect()
    ns = nbrmm.Stream()
    buf = adapter.allocate(1000, stream=ns)  # another library's stream, converted
    assert buf.memory_resource is adapter
    del buf
    collect()
    assert rec.log == [
        ("allocate", h1), ("deallocate", h2),
        ("allocate", h1), ("deallocate", h1),
        ("allocate", ns.handle), ("deallocate", ns.handle),
    ]  # fmt: skip
    device.sync()


@pytest.mark.gpu
def test_gpu_a_buffer_cuda_core_cannot_record_is_freed_once(device):
    heap = HostHeap()
    adapter = interop.to_cuda_core_memory_resource(heap.resource())  # says: device memory
    outcome = []

    def without_context():  # a new thread has no current CUDA context
        try:
            adapter.allocate(256, stream=LEGACY)
            outcome.append(None)
        except Exception as e:  # noqa: BLE001 - checked below
            outcome.append(e)

    t = threading.Thread(target=without_context)
    t.start()
    t.join()
    collect()
    assert len(outcome) == 1
    assert outcome[0] is None or isinstance(outcome[0], Exception), outcome
    assert heap.live == {} and calls(heap) == ["allocate", "deallocate"]


@pytest.mark.gpu
def test_gpu_created_streams_cross_both_ways(device):
    ns = nbrmm.Stream()
    ref = weakref.ref(ns)
    cs = interop.to_cuda_core_stream(ns, device=device)
    assert isinstance(cs, cc.Stream) and int(cs.handle) == ns.handle
    del ns
    collect()
    assert ref() is not None  # cuda.core keeps the stream it wraps
    del cs
    collect()
    assert ref() is None
    own = device.create_stream()
    back = interop.from_cuda_core_stream(own)
    assert back.handle == int(own.handle) and back.owner is own
    assert interop.to_cuda_core_stream(back) is own
    buf = nbrmm.Buffer(100, stream=own)
    buf.copy_from_host(b"s" * 100, stream=own)
    own.sync()
    assert buf.tobytes() == b"s" * 100


@pytest.mark.gpu
def test_gpu_exit_with_interop_objects_alive():
    out = run_python(
        """
        import cuda.core as cc, nbrmm, nbrmm.mr, nbrmm.interop as interop
        dev = cc.Device(nbrmm.get_current_device())
        dev.set_current()
        arena = nbrmm.mr.ArenaMemoryResource(nbrmm.mr.CudaMemoryResource(), arena_size=1 << 24)
        dev.memory_resource = interop.to_cuda_core_memory_resource(arena)
        stream = dev.create_stream()
        kept = [dev.allocate(1000, stream=stream) for _ in range(4)]
        pool = cc.DeviceMemoryResource(dev.device_id, cc.DeviceMemoryResourceOptions())
        nbrmm.mr.set_current_device_resource(interop.from_cuda_core_memory_resource(pool))
        bufs = [nbrmm.Buffer(1000) for _ in range(4)]
        pinned = nbrmm.Buffer(100, mr=interop.from_cuda_core_memory_resource(
            cc.LegacyPinnedMemoryResource()))
        adopted = interop.from_cuda_core_buffer(dev.allocate(64, stream=stream), stream=stream)
        view = interop.to_cuda_core_buffer(nbrmm.Buffer(64, mr=arena))
        print("ready")
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ready"
    for bad in ("leaked", "Exception ignored", "Warning", "Traceback"):
        assert bad not in out.stderr, out.stderr


# --------------------------------------------------------------------------------------
# The user page (docs/interop.md)
# --------------------------------------------------------------------------------------


def doc_blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)


def test_docs_sessions_run():
    blocks = doc_blocks("pycon")
    assert blocks
    for block in blocks:
        test = doctest.DocTestParser().get_doctest(block, {}, DOCS.name, str(DOCS), 0)
        report = []
        result = doctest.DocTestRunner().run(test, out=report.append)
        assert result.attempted > 0 and result.failed == 0, "".join(report)


@pytest.mark.gpu
def test_gpu_docs_examples_run():
    blocks = doc_blocks("python")
    assert len(blocks) >= 5
    # cuda.core keeps for good what its objects still hold at exit (the stream it wraps):
    # the script lets go of them first, as the page advises.
    epilogue = "\ndel scratch, wrapped\nstream.sync()\nprint('docs ok')\n"
    out = run_python("\n".join(blocks) + epilogue)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("docs ok")
    assert "leaked" not in out.stderr, out.stderr
