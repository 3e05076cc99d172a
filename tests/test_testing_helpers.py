"""The C++ measurement helpers of the test suite's ``nbrmm_testing`` extension (the
benchmarks' floor)."""

import threading

import numpy as np
import pytest
from helpers import HostHeap

import nbrmm
import nbrmm.mr
from nbrmm import _nbrmm
from extensions import testing as _testing


def _alternating(calls, n, nbytes):
    kinds = [c[0] for c in calls]
    assert kinds == ["allocate", "deallocate"] * n
    assert all(c[1] == nbytes for c in calls)
    # every deallocation frees the pointer of the allocation right before it
    assert all(calls[i][2] == calls[i + 1][2] for i in range(0, len(calls), 2))


def test_allocate_round_trip_counts_exactly_n_allocations():
    heap = HostHeap()
    ns = _testing.allocate_round_trip_ns(heap.resource(), 256, 137)
    assert isinstance(ns, float)
    assert ns > 0
    _alternating(heap.calls, 137, 256)
    assert heap.bytes_in_use == 0


def test_device_buffer_round_trip_allocates_once_per_buffer():
    heap = HostHeap()
    ns = _testing.device_buffer_round_trip_ns(heap.resource(), 4096, 50)
    assert ns > 0
    _alternating(heap.calls, 50, 4096)
    assert heap.bytes_in_use == 0


def test_device_buffer_of_zero_bytes_allocates_nothing():
    heap = HostHeap()
    assert _testing.device_buffer_round_trip_ns(heap.resource(), 0, 20) > 0
    assert heap.calls == []


def test_the_figure_is_per_round_trip():
    # 200 times the work: a total would grow about 200-fold, a per-iteration figure not.
    mr = HostHeap().resource()
    few = min(_testing.allocate_round_trip_ns(mr, 64, 10) for _ in range(3))
    many = min(_testing.allocate_round_trip_ns(mr, 64, 2000) for _ in range(3))
    assert few / 20 < many < few * 20


def test_allocation_failure_stops_the_loop_and_propagates():
    heap = HostHeap()
    made = []

    def allocate(nbytes, stream):
        if len(made) == 5:
            raise MemoryError("heap exhausted")
        made.append(nbytes)
        return heap.allocate(nbytes, stream)

    mr = nbrmm.mr.CallbackMemoryResource(allocate, heap.deallocate)
    with pytest.raises(MemoryError, match="heap exhausted"):
        _testing.allocate_round_trip_ns(mr, 32, 100)
    assert len(made) == 5
    assert heap.bytes_in_use == 0


def test_the_gil_is_released_while_looping():
    # Two threads loop over Python callbacks at once: each callback must re-take the
    # GIL, which works only if the loops released it.
    heap = HostHeap()
    mr = heap.resource()
    errors = []

    def run():
        try:
            _testing.allocate_round_trip_ns(mr, 16, 500)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [c[0] for c in heap.calls].count("allocate") == 1000
    assert heap.bytes_in_use == 0


@pytest.mark.parametrize("name", ["allocate_round_trip_ns", "device_buffer_round_trip_ns"])
def test_bad_arguments_name_the_parameter(name):
    fn = getattr(_testing, name)
    mr = HostHeap().resource()
    with pytest.raises(ValueError, match="iterations"):
        fn(mr, 8, 0)
    with pytest.raises(ValueError, match="nbytes"):
        fn(mr, -1, 1)
    with pytest.raises(TypeError, match="mr"):
        fn(object(), 8, 1)
    with pytest.raises(TypeError, match="stream"):
        fn(mr, 8, 1, stream="not a stream")


def test_memcpy_bad_arguments():
    with pytest.raises(ValueError, match="iterations"):
        _testing.memcpy_ns(1, 1, 8, 0)
    with pytest.raises(ValueError, match="dst"):
        _testing.memcpy_ns(0, 1, 8, 1)
    with pytest.raises(ValueError, match="src"):
        _testing.memcpy_ns(1, 0, 8, 1)


@pytest.mark.gpu
def test_memcpy_copies_between_host_and_device():
    src = np.arange(1 << 16, dtype=np.uint8)
    mr = nbrmm.mr.CudaMemoryResource()
    dev = nbrmm.Buffer(src.nbytes, mr=mr)
    dev2 = nbrmm.Buffer(src.nbytes, mr=mr)
    back = np.zeros_like(src)
    assert _testing.memcpy_ns(dev.ptr, src.ctypes.data, src.nbytes, 3) > 0
    assert _testing.memcpy_ns(dev2.ptr, dev.ptr, src.nbytes, 2) > 0
    assert _testing.memcpy_ns(back.ctypes.data, dev2.ptr, src.nbytes, 1) > 0
    assert (back == src).all()


@pytest.mark.gpu
def test_round_trips_on_a_device_resource():
    mr = nbrmm.mr.CudaMemoryResource()
    assert _testing.allocate_round_trip_ns(mr, 1 << 20, 20) > 0
    assert _testing.device_buffer_round_trip_ns(mr, 256, 20) > 0
    stream = nbrmm.Stream()
    assert _testing.allocate_round_trip_ns(mr, 256, 5, stream=stream) > 0
