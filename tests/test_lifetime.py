"""Lifetimes across adaptors: Python keeps Python upstreams, C++ keeps C++ upstreams and
callables, and cycles through Python callbacks are collected."""

import gc
import weakref

import pytest

import nbrmm
import nbrmm.mr
from helpers import POOL_SIZE, HostHeap, read_host, write_host

DEV = nbrmm.get_current_device()


def collect():
    for _ in range(3):
        gc.collect()


class HostSubclass(nbrmm.mr.DeviceMemoryResource):
    """A resource written in Python, over host memory."""

    def __init__(self):
        super().__init__()
        self.heap = HostHeap()

    def allocate(self, nbytes, stream):
        return self.heap.allocate(nbytes, stream)

    def deallocate(self, ptr, nbytes, stream):
        self.heap.deallocate(ptr, nbytes, stream)


# --------------------------------------------------------------------------------------
# Python keeps the Python upstream
# --------------------------------------------------------------------------------------


def test_adaptor_keeps_its_python_upstream():
    heap = HostHeap()
    up = heap.resource()
    up_ref = weakref.ref(up)
    mr = nbrmm.mr.StatisticsResourceAdaptor(up)
    del up
    collect()
    assert up_ref() is not None and mr.upstream_mr is up_ref()
    p = mr.allocate(64)
    assert heap.live == {p: 64}
    mr.deallocate(p, 64)
    del mr
    collect()
    assert up_ref() is None


def test_a_chain_lives_as_long_as_its_top():
    heap = HostHeap()
    base = heap.resource()
    stats = nbrmm.mr.StatisticsResourceAdaptor(base)
    pool = nbrmm.mr.PoolMemoryResource(stats, 1 << 16)
    top = nbrmm.mr.LimitingResourceAdaptor(pool, 1 << 20)
    refs = [weakref.ref(o) for o in (base, stats, pool)]
    del base, stats, pool
    collect()
    assert all(r() is not None for r in refs)
    assert top.upstream_mr.upstream_mr is refs[1]()
    p = top.allocate(1000)
    assert refs[1]().allocation_counts.current_bytes == 1 << 16  # the pool's chunk
    top.deallocate(p, 1000)
    del top
    collect()
    assert all(r() is None for r in refs)
    assert heap.bytes_in_use == 0  # the pool returned its chunk through the chain


def test_buffer_outlives_every_python_reference_to_its_resources():
    heap = HostHeap()
    pool = nbrmm.mr.PoolMemoryResource(heap.resource(), 1 << 16)
    buf = nbrmm.Buffer(100, mr=nbrmm.mr.StatisticsResourceAdaptor(pool))
    pool_ref = weakref.ref(pool)
    del pool
    collect()
    write_host(buf.ptr, b"b" * 100)
    assert read_host(buf.ptr, 100) == b"b" * 100
    assert pool_ref() is not None
    del buf
    collect()
    assert pool_ref() is None and heap.bytes_in_use == 0


# --------------------------------------------------------------------------------------
# C++ keeps the C++ upstream (and the Python callables behind it)
# --------------------------------------------------------------------------------------


def test_cpp_keeps_the_upstream_and_its_python_object_alive():
    heap = HostHeap()
    heap_ref = weakref.ref(heap)
    up = heap.resource()
    stats = nbrmm.mr.StatisticsResourceAdaptor(up)
    obj_refs = [weakref.ref(up), weakref.ref(stats)]
    nbrmm.mr.set_current_device_resource(stats)
    del heap, up, stats
    collect()
    # Every C++ copy of a resource made in Python carries its Python object.
    assert all(r() is not None for r in obj_refs)
    buf = nbrmm.Buffer(32)  # the current resource: the adaptor over its upstream
    assert heap_ref().bytes_in_use == 32
    assert nbrmm.mr.get_current_device_resource() is obj_refs[1]()
    assert obj_refs[1]().allocation_counts.current_bytes == 32
    del buf
    nbrmm.mr.reset_per_device_resource(DEV)
    collect()
    assert heap_ref() is None
    assert all(r() is None for r in obj_refs)


def test_binning_owns_its_bins_in_cpp():
    heap, bin_heap = HostHeap(), HostHeap()
    bin_heap_ref = weakref.ref(bin_heap)
    mr = nbrmm.mr.BinningMemoryResource(heap.resource())
    bin_mr = bin_heap.resource()
    mr.add_bin(1024, bin_mr)
    bin_ref = weakref.ref(bin_mr)
    del bin_mr, bin_heap
    collect()
    assert bin_ref() is not None  # the Python bin object is kept by the binning resource
    nbrmm.mr.set_current_device_resource(mr)
    mr_ref = weakref.ref(mr)
    del mr
    collect()
    assert mr_ref() is not None and bin_ref() is not None  # kept by librmm's map
    got = nbrmm.mr.get_current_device_resource()
    assert got.bin_mrs == [bin_ref()]
    buf = nbrmm.Buffer(700)  # routed to the bin
    assert bin_heap_ref().bytes_in_use == 700
    del buf, got
    nbrmm.mr.reset_per_device_resource(DEV)
    collect()
    assert mr_ref() is None and bin_ref() is None
    assert bin_heap_ref() is None
    assert heap.bytes_in_use == 0


def test_failure_callback_outlives_python_while_cpp_holds_it():
    limit = nbrmm.mr.LimitingResourceAdaptor(HostHeap().resource(), 256)

    class Spill:
        def __init__(self):
            self.calls = []

        def __call__(self, nbytes):
            self.calls.append(nbytes)
            return False

    spill = Spill()
    spill_ref = weakref.ref(spill)
    mr = nbrmm.mr.FailureCallbackResourceAdaptor(limit, spill)
    nbrmm.mr.set_current_device_resource(mr)
    del mr, spill, limit
    collect()
    assert spill_ref() is not None
    with pytest.raises(MemoryError):
        nbrmm.Buffer(1000)
    assert spill_ref().calls == [1000]
    nbrmm.mr.reset_per_device_resource(DEV)
    collect()
    assert spill_ref() is None


# --------------------------------------------------------------------------------------
# Python subclasses as upstreams of C++ adaptors
# --------------------------------------------------------------------------------------


def test_python_subclass_as_upstream_of_cpp_adaptors():
    sub = HostSubclass()
    heap = sub.heap
    sub_ref = weakref.ref(sub)
    stats = nbrmm.mr.StatisticsResourceAdaptor(sub)
    pool = nbrmm.mr.PoolMemoryResource(stats, 1 << 16)
    del sub, stats
    collect()
    assert sub_ref() is not None
    bufs = [nbrmm.Buffer(n, mr=pool) for n in (10, 20, 30)]
    assert list(heap.live.values()) == [1 << 16]  # the pool's chunk, from the subclass
    assert pool.upstream_mr.upstream_mr is sub_ref()
    del bufs, pool
    collect()
    assert sub_ref() is None
    assert heap.bytes_in_use == 0
    assert [c[0] for c in heap.calls] == ["allocate", "deallocate"]


def test_python_subclass_kept_by_cpp_only():
    sub = HostSubclass()
    heap = sub.heap
    sub_ref = weakref.ref(sub)
    nbrmm.mr.set_current_device_resource(nbrmm.mr.TrackingResourceAdaptor(sub))
    del sub
    collect()
    assert sub_ref() is not None  # its bound methods are owned by the C++ adaptor
    buf = nbrmm.Buffer(50)
    assert heap.bytes_in_use == 50
    del buf
    nbrmm.mr.reset_per_device_resource(DEV)
    collect()
    assert sub_ref() is None


# --------------------------------------------------------------------------------------
# Cycles through callbacks
# --------------------------------------------------------------------------------------


def test_cycle_through_a_failure_callback_is_collected():
    holder = {}

    def spill(nbytes):
        return holder["mr"] is None  # the callback references its own adaptor

    mr = nbrmm.mr.FailureCallbackResourceAdaptor(HostHeap().resource(), spill)
    holder["mr"] = mr
    refs = [weakref.ref(mr), weakref.ref(spill)]
    del mr, spill, holder
    collect()
    assert [r() for r in refs] == [None, None]


def test_cycle_through_a_bound_method_callback_is_collected():
    class Spiller:
        def __init__(self):
            up = nbrmm.mr.LimitingResourceAdaptor(HostHeap().resource(), 0)
            self.mr = nbrmm.mr.FailureCallbackResourceAdaptor(up, self.spill)

        def spill(self, nbytes):
            return False

    s = Spiller()
    with pytest.raises(MemoryError):
        s.mr.allocate(1)
    ref = weakref.ref(s)
    del s
    collect()
    assert ref() is None


def test_shared_failure_callback_is_not_collected_while_cpp_uses_it():
    holder = {}

    def spill(nbytes):
        return holder.get("mr") is None

    mr = nbrmm.mr.FailureCallbackResourceAdaptor(HostHeap().resource(), spill)
    holder["mr"] = mr
    nbrmm.mr.set_current_device_resource(nbrmm.mr.StatisticsResourceAdaptor(mr))
    ref = weakref.ref(spill)
    del mr, spill, holder
    collect()
    assert ref() is not None  # a C++ copy (in the map) still calls it
    nbrmm.mr.reset_per_device_resource(DEV)
    collect()
    assert ref() is None


# --------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------


@pytest.mark.skipif(nbrmm.get_device_count() < 2, reason="needs two GPUs")
def test_upstream_from_another_device_is_refused():
    first = nbrmm.mr.CudaMemoryResource()
    current = nbrmm.get_current_device()
    other = (current + 1) % nbrmm.get_device_count()
    nbrmm.set_current_device(other)
    try:
        with pytest.raises(ValueError, match="upstream_mr"):
            nbrmm.mr.StatisticsResourceAdaptor(first)
        with pytest.raises(ValueError, match="upstream_mr"):
            nbrmm.mr.PoolMemoryResource(first, POOL_SIZE)
        binning = nbrmm.mr.BinningMemoryResource(nbrmm.mr.CudaMemoryResource())
        with pytest.raises(ValueError, match="bin_resource"):
            binning.add_bin(1024, first)
    finally:
        nbrmm.set_current_device(current)
