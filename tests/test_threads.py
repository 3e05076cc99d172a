"""Allocation from many Python threads: counters exact, no deadlock with callbacks."""

import threading

import pytest

import nbrmm
import nbrmm.mr
from helpers import POOL_SIZE, HostHeap


def _run_threads(n_threads, target):
    errors = []
    barrier = threading.Barrier(n_threads)

    def run(i):
        try:
            barrier.wait()
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "deadlock: a thread did not finish"
    assert errors == []


def test_callback_resource_from_eight_threads():
    """The GIL is released around allocation and re-acquired by the callbacks."""
    heap = HostHeap()
    mr = heap.resource()

    def work(i):
        live = []
        for k in range(2000):
            live.append(nbrmm.Buffer(1 + (k + i) % 64, mr=mr))
            if len(live) > 8:
                live.pop(0)
        live.clear()

    _run_threads(8, work)
    assert heap.bytes_in_use == 0
    allocs = sum(1 for c in heap.calls if c[0] == "allocate")
    frees = sum(1 for c in heap.calls if c[0] == "deallocate")
    assert allocs == frees == 8 * 2000


def test_set_and_get_current_from_threads():
    mrs = [HostHeap().resource() for _ in range(4)]

    def work(i):
        for k in range(500):
            nbrmm.mr.set_current_device_resource(mrs[(i + k) % 4])
            got = nbrmm.mr.get_current_device_resource()
            assert any(got is m for m in mrs)

    _run_threads(4, work)


def _gpu_resources():
    cuda = nbrmm.mr.CudaMemoryResource()
    return {
        "pool": lambda: nbrmm.mr.PoolMemoryResource(cuda, initial_pool_size=64 * POOL_SIZE),
        "arena": lambda: nbrmm.mr.ArenaMemoryResource(cuda, arena_size=64 * POOL_SIZE),
        "async": lambda: nbrmm.mr.CudaAsyncMemoryResource(),
    }


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["pool", "arena", "async"])
@pytest.mark.parametrize("per_thread_stream", [False, True])
def test_gpu_thread_stress(kind, per_thread_stream):
    iterations = 100_000
    upstream = _gpu_resources()[kind]()
    stats = nbrmm.mr.StatisticsResourceAdaptor(upstream)

    def work(i):
        stream = nbrmm.Stream() if per_thread_stream else nbrmm.DEFAULT_STREAM
        alloc, free = stats.allocate, stats.deallocate
        for k in range(iterations):
            n = 256 * (1 + (k + i) % 8)
            free(alloc(n, stream), n, stream)
        stream.synchronize()

    _run_threads(8, work)
    counts = stats.allocation_counts
    assert counts.current_bytes == 0 and counts.current_count == 0
    assert counts.total_count == 8 * iterations
