"""One current resource for Python and C++, tested against a separate C++ extension.

``cpp_ext`` (tests/ext, built by tests/extensions.py) is its own shared object: it uses
librmm directly (not nbrmm's binding code) and the public header <nbrmm/nbrmm.hpp> for the
hand-over of resources and buffers.
"""

import gc
import os
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbrmm
import nbrmm.mr
from extensions import cpp_ext, testing
from helpers import HostHeap, run_python

DEV = nbrmm.get_current_device()
ON_GPU = nbrmm.get_device_count() > 0


def test_public_header_is_installed():
    assert os.path.exists(os.path.join(nbrmm.get_include(), "nbrmm", "nbrmm.hpp"))


def test_python_set_is_seen_by_cpp():
    heap = HostHeap()
    mr = heap.resource()
    nbrmm.mr.set_current_device_resource(mr)
    assert not cpp_ext.current_is_owned()
    buf = cpp_ext.allocate_from_current(123)  # C++ allocates from the current resource
    assert heap.bytes_in_use == 123
    assert isinstance(buf, nbrmm.Buffer)
    assert buf.size == 123 and buf.mr is mr  # adopted without copying, true resource
    assert heap.live == {buf.ptr: 123}
    del buf
    assert heap.bytes_in_use == 0


def test_cpp_set_is_seen_by_python():
    cpp_ext.set_current_owned(False)
    assert cpp_ext.current_is_owned()
    current = nbrmm.mr.get_current_device_resource()
    assert type(current) is nbrmm.mr.DeviceMemoryResource or isinstance(
        current, nbrmm.mr.DeviceMemoryResource
    )
    before = cpp_ext.owned_counts()
    buf = nbrmm.Buffer(64)  # mr=None: the resource C++ set
    assert cpp_ext.owned_counts()[0] == before[0] + 64
    assert buf.mr == current
    del buf
    assert cpp_ext.owned_counts()[0] == before[0]


def test_python_gets_the_concrete_class_for_cpp_resources():
    cpp_ext.set_current_owned(False)
    current = nbrmm.mr.get_current_device_resource()
    assert isinstance(current, nbrmm.mr.StatisticsResourceAdaptor)
    assert current.allocation_counts.current_bytes == cpp_ext.owned_counts()[0]


def test_cpp_reset_is_seen_by_python():
    mr = HostHeap().resource()
    nbrmm.mr.set_current_device_resource(mr)
    cpp_ext.reset_current()
    assert type(nbrmm.mr.get_current_device_resource()) is nbrmm.mr.CudaMemoryResource


def test_adopted_cpp_buffer_outlives_its_resource_references():
    # The cudf#14229 scenario: C++ allocates with a resource, Python drops every reference
    # to the resource, the buffer still frees correctly to it.
    heap = HostHeap()
    heap_ref = weakref.ref(heap)
    mr = heap.resource()
    mr_ref = weakref.ref(mr)
    buf = cpp_ext.allocate_with(mr, 40)
    assert buf.mr is mr
    del mr, heap
    gc.collect()
    assert mr_ref() is not None and heap_ref() is not None  # kept by the buffer
    assert heap_ref().bytes_in_use == 40
    del buf
    gc.collect()
    assert mr_ref() is None and heap_ref() is None


def test_cpp_copy_keeps_python_resource_and_callables_alive():
    heap = HostHeap()
    heap_ref = weakref.ref(heap)
    cpp_ext.hold_resource(heap.resource())
    del heap
    gc.collect()
    assert heap_ref() is not None
    cpp_ext.allocate_held(10)  # GIL released in C++; the callback re-acquires it
    assert [c[0] for c in heap_ref().calls] == ["allocate", "deallocate"]
    cpp_ext.release_held()
    gc.collect()
    assert heap_ref() is None


def test_allocate_with_rejects_non_resources():
    with pytest.raises(ValueError, match="nbrmm memory resource"):
        cpp_ext.allocate_with(object(), 8)


def test_none_means_the_current_resource_in_the_cpp_api():
    heap = HostHeap()
    nbrmm.mr.set_current_device_resource(heap.resource())
    buf = cpp_ext.allocate_with(None, 8)
    assert heap.bytes_in_use == 8
    del buf


@settings(max_examples=40)
@given(st.lists(st.sampled_from(["py_set", "cpp_set", "cpp_reset", "py_alloc", "cpp_alloc"]),
                max_size=12))
def test_interleaved_python_and_cpp_set_get_allocate(ops):
    """Model: which side set the current resource last decides who serves allocations."""
    heap = HostHeap()
    py_mr = heap.resource()
    cpp_ext.reset_current()
    owner = "initial"
    live = []
    for op in ops:
        if op == "py_set":
            nbrmm.mr.set_current_device_resource(py_mr)
            owner = "py"
        elif op == "cpp_set":
            cpp_ext.set_current_owned(ON_GPU)
            owner = "cpp"
        elif op == "cpp_reset":
            cpp_ext.reset_current()
            owner = "initial"
        else:
            if owner == "initial" and not ON_GPU:
                continue  # cudaMalloc cannot serve without a GPU
            before_heap = heap.bytes_in_use
            before_cpp = cpp_ext.owned_counts()[0] if owner == "cpp" else None
            size = 32 + len(live)
            buf = nbrmm.Buffer(size) if op == "py_alloc" else cpp_ext.allocate_from_current(size)
            live.append(buf)
            del buf
            if owner == "py":
                assert live[-1].mr is py_mr and heap.bytes_in_use == before_heap + size
            elif owner == "cpp":
                assert cpp_ext.owned_counts()[0] == before_cpp + size
                assert heap.bytes_in_use == before_heap
        current = nbrmm.mr.get_current_device_resource()
        if owner == "py":
            assert current is py_mr
        elif owner == "cpp":
            assert cpp_ext.current_is_owned() and current is not py_mr
        else:
            assert type(current) is nbrmm.mr.CudaMemoryResource
    live.clear()
    assert heap.bytes_in_use == 0
    cpp_ext.reset_current()


@pytest.mark.gpu
def test_cpp_owned_gpu_pool_serves_python():
    cpp_ext.set_current_owned(True)
    buf = nbrmm.Buffer(1000)
    buf.copy_from_host(b"\x07" * 1000)
    assert buf.tobytes() == b"\x07" * 1000
    assert cpp_ext.owned_counts()[0] >= 1000
    cpp_buf = cpp_ext.allocate_from_current(256)
    assert cpp_buf.mr == nbrmm.mr.get_current_device_resource()
    del buf, cpp_buf
    assert cpp_ext.owned_counts()[0] == 0


def test_restoring_a_cpp_resource_gives_cpp_its_own_object_back():
    cpp_ext.set_current_owned(False)
    wrapper = nbrmm.mr.get_current_device_resource()
    nbrmm.mr.set_current_device_resource(HostHeap().resource())
    assert not cpp_ext.current_is_owned()
    nbrmm.mr.set_current_device_resource(wrapper)  # e.g. leaving a `with` block
    assert cpp_ext.current_is_owned()  # C++ sees its own adaptor type again
    with nbrmm.mr.using_device_resource(HostHeap().resource()):
        assert not cpp_ext.current_is_owned()
    assert cpp_ext.current_is_owned()


def test_reading_a_cpp_entry_twice_gives_the_same_wrapper():
    cpp_ext.set_current_owned(False)
    first = nbrmm.mr.get_current_device_resource()
    assert nbrmm.mr.get_current_device_resource() is first
    cpp_ext.set_current_owned(False)  # a new C++ resource: a new wrapper
    second = nbrmm.mr.get_current_device_resource()
    assert second is not first and second != first
    ref = weakref.ref(second)
    del second
    gc.collect()
    assert ref() is None  # the cache does not keep wrappers alive


# --------------------------------------------------------------------------------------
# C++ resources to Python (resource_to_python)
# --------------------------------------------------------------------------------------


def test_a_python_resource_comes_back_from_cpp_as_itself():
    mr = nbrmm.mr.StatisticsResourceAdaptor(HostHeap().resource())
    assert cpp_ext.round_trip(mr) is mr


def test_a_cpp_resource_goes_to_cpp_as_cpp_made_it():
    """A C++-made resource's object hands C++ the resource itself (C++ can resource_cast
    it: live_bytes does), and comes back as the same kind of object."""
    cache = testing.host_cache_resource()
    assert type(cache) is nbrmm.mr.DeviceMemoryResource and cache.is_host_accessible
    buf = nbrmm.Buffer(1000, mr=cache)
    assert testing.live_bytes(cache) == 1024
    back = cpp_ext.round_trip(cache)
    assert type(back) is nbrmm.mr.DeviceMemoryResource and back == cache
    assert testing.live_bytes(back) == 1024
    buf.close()
    assert testing.live_bytes(cache) == 0


def test_a_known_cpp_type_comes_back_as_its_class():
    heap = HostHeap()
    pool = testing.make_cpp("pool", heap.resource())
    assert type(pool) is nbrmm.mr.PoolMemoryResource
    assert pool.pool_size() == 1 << 16 and not pool.is_host_accessible


def test_memory_of_an_unknown_cpp_type_is_host_accessible_only_when_declared():
    heap = testing.host_heap_resource()  # declared host-accessible by the extension
    assert memoryview(nbrmm.Buffer(8, mr=heap)).nbytes == 8
    plain = nbrmm.mr.DeviceMemoryResource._from_capsule(heap.__nbrmm_resource__())
    assert not plain.is_host_accessible and plain == heap
    with pytest.raises(BufferError):
        memoryview(nbrmm.Buffer(8, mr=plain))


@pytest.mark.parametrize("bad", [None, 1, object(), "nbrmm.device_resource"])
def test_capsule_entry_points_refuse_other_objects(bad):
    with pytest.raises(TypeError, match="capsule"):
        nbrmm.mr.DeviceMemoryResource._from_capsule(bad)


def test_a_buffer_of_a_cpp_caching_resource_frees_as_it_dies():
    cache = testing.host_cache_resource()
    nbrmm.Buffer(512, mr=cache)  # dies at once, with the GIL held: freed there and then
    assert testing.live_bytes(cache) == 0
    kept = nbrmm.Buffer(512, mr=cache)
    assert testing.live_bytes(cache) == 512
    del kept
    assert testing.live_bytes(cache) == 0
