"""Resources: the base API, callback resources, Python subclasses, and lifetimes."""

import gc
import sys
import weakref

import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbrmm
import nbrmm.mr
from helpers import HostHeap, read_host, write_host


def test_callback_resource_allocates_and_frees_through_python():
    heap = HostHeap()
    mr = heap.resource()
    ptr = mr.allocate(100)
    assert heap.live == {ptr: 100}
    write_host(ptr, b"x" * 100)
    assert read_host(ptr, 100) == b"x" * 100
    mr.deallocate(ptr, 100)
    assert heap.bytes_in_use == 0
    assert [c[0] for c in heap.calls] == ["allocate", "deallocate"]


def test_callback_receives_stream_objects():
    streams = []

    def alloc(n, s):
        streams.append(s)
        return 0x1000

    mr = nbrmm.mr.CallbackMemoryResource(alloc, lambda p, n, s: streams.append(s))
    ptr = mr.allocate(8, nbrmm.PER_THREAD_DEFAULT_STREAM)
    mr.deallocate(ptr, 8, nbrmm.PER_THREAD_DEFAULT_STREAM)
    assert all(isinstance(s, nbrmm.Stream) for s in streams)
    assert [s.handle for s in streams] == [2, 2]


@given(st.one_of(st.integers(0, 1 << 40), st.sampled_from(["1KiB", "2 MiB", "1.5KB", "7"])))
def test_sizes_accept_ints_and_strings(size):
    seen = []
    mr = nbrmm.mr.CallbackMemoryResource(
        lambda n, s: seen.append(n) or 0x100, lambda p, n, s: None
    )
    mr.deallocate(mr.allocate(size), size)
    expected = {"1KiB": 1024, "2 MiB": 2 << 20, "1.5KB": 1500, "7": 7}.get(size, size)
    assert seen == ([expected] if expected else [])  # 0 bytes ask nothing of the resource


@pytest.mark.parametrize(
    ("bad", "exc"),
    [(-1, ValueError), (2**64, ValueError), ("lots", ValueError), ("1XB", ValueError),
     (1.5, TypeError), (None, TypeError), (True, TypeError)],
)
def test_bad_sizes_name_the_argument(bad, exc):
    heap = HostHeap()
    mr = heap.resource()
    with pytest.raises(exc, match="nbytes"):
        mr.allocate(bad)
    assert heap.calls == []


def test_callbacks_must_be_callable():
    with pytest.raises(TypeError, match="allocate_func"):
        nbrmm.mr.CallbackMemoryResource(1, lambda p, n, s: None)
    with pytest.raises(TypeError, match="deallocate_func"):
        nbrmm.mr.CallbackMemoryResource(lambda n, s: 0, "free")


def test_exception_in_allocate_callback_reaches_the_caller():
    class Boom(Exception):
        pass

    def alloc(n, s):
        raise Boom("no memory today")

    mr = nbrmm.mr.CallbackMemoryResource(alloc, lambda p, n, s: None)
    with pytest.raises(Boom, match="no memory today"):
        mr.allocate(10)
    with pytest.raises(Boom):
        nbrmm.Buffer(10, mr=mr)


def test_garbage_from_allocate_callback_is_a_type_error():
    mr = nbrmm.mr.CallbackMemoryResource(lambda n, s: "ptr", lambda p, n, s: None)
    with pytest.raises(TypeError, match="int"):
        mr.allocate(10)
    null = nbrmm.mr.CallbackMemoryResource(lambda n, s: 0, lambda p, n, s: None)
    with pytest.raises(ValueError, match="allocate_func returned a null pointer"):
        null.allocate(10)


def test_exception_in_deallocate_callback_is_unraisable(monkeypatch):
    def free(p, n, s):
        raise RuntimeError("cannot free")

    reported = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: reported.append((type(u.exc_value), str(u.exc_value)))
    )
    mr = nbrmm.mr.CallbackMemoryResource(lambda n, s: 0x100, free)
    mr.deallocate(mr.allocate(1), 1)  # a deallocation cannot fail: reported, not raised
    assert reported == [(RuntimeError, "cannot free")]


def test_callables_live_as_long_as_cpp_holds_the_resource():
    heap = HostHeap()
    alloc_ref = weakref.ref(heap)
    mr = heap.resource()
    buf = nbrmm.Buffer(64, mr=mr)
    del heap, mr
    gc.collect()
    # The buffer's C++ copy of the resource owns the callables (bound to the heap).
    assert alloc_ref() is not None
    assert buf.mr is not None
    del buf
    gc.collect()
    assert alloc_ref() is None


def test_callables_outlive_python_while_in_the_per_device_map():
    heap = HostHeap()
    heap_ref = weakref.ref(heap)
    nbrmm.mr.set_current_device_resource(heap.resource())
    del heap
    gc.collect()
    assert heap_ref() is not None
    buf = nbrmm.Buffer(10)  # default mr: the current resource, served by the callables
    assert heap_ref().bytes_in_use == 10
    del buf
    nbrmm.mr.reset_per_device_resource(nbrmm.get_current_device())
    gc.collect()
    assert heap_ref() is None


def test_cycles_through_callbacks_are_collected():
    class Holder:
        pass

    holder = Holder()
    mr = nbrmm.mr.CallbackMemoryResource(lambda n, s: 0x10, lambda p, n, s: None)
    holder.mr = mr

    def alloc(n, s, holder=holder):
        return 0x10

    holder.mr = nbrmm.mr.CallbackMemoryResource(alloc, lambda p, n, s: None)
    ref = weakref.ref(holder)
    mr_ref = weakref.ref(holder.mr)
    del holder, alloc, mr
    gc.collect()
    assert ref() is None
    assert mr_ref() is None


class PyHeapResource(nbrmm.mr.DeviceMemoryResource):
    """A resource written in Python."""

    def __init__(self):
        super().__init__()
        self.heap = HostHeap()

    def allocate(self, nbytes, stream=nbrmm.DEFAULT_STREAM):
        return self.heap.allocate(nbytes, stream)

    def deallocate(self, ptr, nbytes, stream=nbrmm.DEFAULT_STREAM):
        self.heap.deallocate(ptr, nbytes, stream)


def test_python_subclass_serves_buffers_and_the_current_resource():
    mr = PyHeapResource()
    buf = nbrmm.Buffer(48, mr=mr)
    assert buf.mr is mr
    assert mr.heap.bytes_in_use == 48
    del buf
    assert mr.heap.bytes_in_use == 0

    nbrmm.mr.set_current_device_resource(mr)
    assert nbrmm.mr.get_current_device_resource() is mr
    buf = nbrmm.Buffer(16)
    assert buf.mr is mr and mr.heap.bytes_in_use == 16
    del buf


def test_python_subclass_must_implement_both_methods():
    class Half(nbrmm.mr.DeviceMemoryResource):
        def allocate(self, nbytes, stream=None):
            return 0

    with pytest.raises(TypeError, match="deallocate"):
        Half()
    with pytest.raises(TypeError, match="abstract"):
        nbrmm.mr.DeviceMemoryResource()


def test_the_adaptor_base_class_cannot_be_made():
    with pytest.raises(TypeError) as info:
        nbrmm.mr.UpstreamResourceAdaptor(HostHeap().resource())
    assert str(info.value).startswith("UpstreamResourceAdaptor is the base class of "
                                      "nbrmm's adaptors and cannot be made itself")
    with pytest.raises(TypeError, match="upstream_mr"):
        nbrmm.mr.UpstreamResourceAdaptor()


@pytest.mark.parametrize("base", [nbrmm.mr.PoolMemoryResource, nbrmm.mr.LoggingResourceAdaptor,
                                  nbrmm.mr.CallbackMemoryResource,
                                  nbrmm.mr.UpstreamResourceAdaptor])
def test_a_subclass_of_a_concrete_resource_is_not_made_by_the_base_init(base):
    """Its C++ object is the concrete class's: DeviceMemoryResource.__init__ would leave
    that class's own state unmade."""
    heap = HostHeap()

    class Sub(base):
        def __init__(self):
            nbrmm.mr.DeviceMemoryResource.__init__(self)

        def allocate(self, nbytes, stream=None):
            return heap.allocate(nbytes, stream)

        def deallocate(self, ptr, nbytes, stream=None):
            heap.deallocate(ptr, nbytes, stream)

    with pytest.raises(TypeError) as info:
        Sub()
    assert str(info.value) == (
        "DeviceMemoryResource.__init__() initializes Python subclasses of "
        f"DeviceMemoryResource itself; {Sub.__module__}.{Sub.__name__} derives from "
        f"nbrmm.mr.{base.__name__}: call that class's __init__ (super().__init__(...))")


def test_python_subclass_without_references_is_collected():
    mr = PyHeapResource()
    ref = weakref.ref(mr)
    del mr
    gc.collect()
    assert ref() is None


def test_equality_means_same_underlying_resource():
    heap = HostHeap()
    a = heap.resource()
    b = heap.resource()
    assert a == a and a != b
    nbrmm.mr.set_current_device_resource(a)
    got = nbrmm.mr.get_current_device_resource()
    assert got is a and got == a and hash(got) == hash(a)
    assert nbrmm.mr.CudaMemoryResource() == nbrmm.mr.CudaMemoryResource()
    assert hash(nbrmm.mr.CudaMemoryResource()) == hash(nbrmm.mr.CudaMemoryResource())
    assert a != object()


def test_resource_properties():
    mr = HostHeap().resource()
    assert mr.device == nbrmm.get_current_device()
    assert mr.is_device_accessible
    assert not mr.is_host_accessible


@pytest.mark.gpu
def test_cuda_memory_resource_on_gpu():
    mr = nbrmm.mr.CudaMemoryResource()
    ptr = mr.allocate(1 << 20)
    assert ptr != 0 and ptr % 256 == 0
    mr.deallocate(ptr, 1 << 20)
    assert mr.device == nbrmm.get_current_device() >= 0


def _resource_in_a_cycle(heap):
    """A box whose ``mr`` allocates from ``heap`` through a callable that holds the box:
    box -> mr -> callables -> (closure) -> box."""

    class Box:
        pass

    box = Box()

    def alloc(n, s, box=box):
        return heap.allocate(n, s)

    box.mr = nbrmm.mr.CallbackMemoryResource(alloc, heap.deallocate)
    return box


def test_cycle_through_live_buffers_is_collected():
    """resource -> callables -> (closure) -> buffers -> C++ copies of the resource."""
    heap = HostHeap()
    box = _resource_in_a_cycle(heap)
    box.bufs = [nbrmm.Buffer(n, mr=box.mr) for n in (8, 16, 32)]
    refs = [weakref.ref(box.mr)] + [weakref.ref(b) for b in box.bufs]
    del box
    gc.collect()
    assert all(r() is None for r in refs)
    assert heap.bytes_in_use == 0  # finalizers freed the memory through the callables


def test_cycle_is_collected_after_its_buffers_are_gone():
    """The copy of the resource that the object keeps for its Buffers outlives them and
    is the object's own: it does not keep a cycle through the callables alive."""
    heap = HostHeap()
    box = _resource_in_a_cycle(heap)
    for n in (8, 16):
        nbrmm.Buffer(n, mr=box.mr)
    with nbrmm.Buffer(32, mr=box.mr):
        pass
    ref = weakref.ref(box.mr)
    del box
    gc.collect()
    assert ref() is None
    assert heap.bytes_in_use == 0 and len(heap.calls) == 6


def test_calling_del_of_a_resource_frees_nothing():
    """``__del__`` is the collector's finalizer of a resource in a cycle. Called from Python
    on a live resource, it must not free the memory of its live buffers (in use, and
    possibly exported)."""
    heap = HostHeap()
    box = _resource_in_a_cycle(heap)
    box.bufs = [nbrmm.Buffer(n, mr=box.mr) for n in (8, 16)]
    ptr = box.bufs[0].ptr
    box.mr.__del__()
    box.mr.__del__()
    assert [b.closed for b in box.bufs] == [False, False]
    assert heap.bytes_in_use == 24 and ptr in heap.live
    assert box.bufs[0].ptr == ptr
    refs = [weakref.ref(box.mr)] + [weakref.ref(b) for b in box.bufs]
    del box
    gc.collect()
    assert all(r() is None for r in refs)
    assert heap.bytes_in_use == 0  # the collector's own finalization still frees them


@pytest.mark.parametrize("rounds", [5])
def test_cycle_whose_callables_need_the_cycle_frees_before_clearing(rounds):
    """The deallocate callable reaches the heap only through an object of the cycle: the
    buffers must free their memory before the collector clears anything. Repeated so
    that later rounds reuse Buffer objects that a previous collection already freed."""
    heap = HostHeap()
    for _ in range(rounds):

        class Box:
            pass

        box = Box()
        box.heap = heap

        def alloc(n, s, box=box):
            return box.heap.allocate(n, s)

        def dealloc(p, n, s, box=box):
            box.heap.deallocate(p, n, s)

        box.mr = nbrmm.mr.CallbackMemoryResource(alloc, dealloc)
        box.bufs = [nbrmm.Buffer(n, mr=box.mr) for n in (8, 16, 32, 64)]
        refs = [weakref.ref(box.mr)] + [weakref.ref(b) for b in box.bufs]
        del box, alloc, dealloc
        gc.collect()
        assert all(r() is None for r in refs)
        assert heap.bytes_in_use == 0
    assert [c[0] for c in heap.calls].count("deallocate") == 4 * rounds


def test_resource_shared_with_cpp_is_not_collected_with_its_cycle():
    heap = HostHeap()

    class Box:
        pass

    box = Box()
    box.mr = nbrmm.mr.CallbackMemoryResource(
        lambda n, s, box=box: heap.allocate(n, s), heap.deallocate
    )
    nbrmm.mr.set_current_device_resource(box.mr)  # the per-device map holds a copy
    ref = weakref.ref(box)
    del box
    gc.collect()
    assert ref() is not None
    buf = nbrmm.Buffer(4)  # the callables still work
    assert heap.bytes_in_use == 4
    del buf


def test_deallocation_while_an_exception_propagates():
    """A temporary buffer freed during exception propagation runs its Python
    deallocate callback cleanly, and the original exception reaches the caller."""
    heap = HostHeap()
    mr = heap.resource()
    with pytest.raises(ValueError, match="new_size"):
        nbrmm.Buffer(8, mr=mr).resize(-1)
    assert heap.bytes_in_use == 0
    assert [c[0] for c in heap.calls] == ["allocate", "deallocate"]


def test_keyboard_interrupt_in_a_callback_reaches_the_caller():
    heap = HostHeap()
    calls = []

    def alloc(n, s):
        calls.append(n)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return heap.allocate(n, s)

    mr = nbrmm.mr.CallbackMemoryResource(alloc, heap.deallocate)
    with pytest.raises(KeyboardInterrupt):
        nbrmm.Buffer(16, mr=mr)
    buf = nbrmm.Buffer(16, mr=mr)  # the resource is still usable afterwards
    assert heap.bytes_in_use == 16
    del buf
    assert heap.bytes_in_use == 0
