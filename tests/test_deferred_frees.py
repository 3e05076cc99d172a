"""Deferred frees: small blocks of caching resources wait for nbrmm's next GIL release.

A Buffer that dies with the GIL held hands a small block of a caching resource (pool,
arena, fixed-size; on the CPU, ``_testing.host_cache_resource()``) on the default stream
to a queue; the next window in which nbrmm releases the GIL frees it. These tests pin
down when the queue is used, when it is emptied, and that nothing is lost.
"""

import os

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import nbrmm
import nbrmm.mr
from helpers import run_python, run_threads
from nbrmm import _nbrmm
from extensions import testing as _testing

CAPACITY = 16
BUDGET = 1 << 20


def rounded(n):
    return (n + 255) // 256 * 256


class ForeignStream:
    """A stream from another library: only its handle is used (no CUDA call)."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.fixture(autouse=True)
def _empty_queue():
    _nbrmm._flush_deferred_frees()
    assert _nbrmm._deferred_frees() == (0, 0)
    yield
    _nbrmm._flush_deferred_frees()


@pytest.fixture
def cache():
    return _testing.host_cache_resource()


def test_destroyed_buffer_waits_for_the_next_allocation(cache):
    buf = nbrmm.Buffer(300, mr=cache)
    assert _testing.live_bytes(cache) == 512
    del buf
    assert _nbrmm._deferred_frees() == (1, 300)
    assert _testing.live_bytes(cache) == 512  # not freed yet
    nbrmm.Buffer(0, mr=cache)  # allocates nothing, releases no GIL: still queued
    assert _nbrmm._deferred_frees() == (1, 300)
    other = nbrmm.Buffer(16, mr=cache)
    assert _nbrmm._deferred_frees() == (0, 0)
    assert _testing.live_bytes(cache) == 256  # the old block is back, the new one live
    del other


def test_every_gil_release_empties_the_queue(cache):
    heap = _testing.host_heap_resource()
    for release in (
        lambda: cache.deallocate(cache.allocate(8), 8),
        lambda: nbrmm.Buffer(8, mr=heap),  # another resource: the queue is global
        lambda: nbrmm.Buffer(8, mr=cache).close(),
        lambda: nbrmm.Buffer(0, mr=cache).resize(600),
        lambda: nbrmm.Buffer(0, mr=cache).reserve(600),
    ):
        nbrmm.Buffer(64, mr=cache)  # created and destroyed: queued
        assert _nbrmm._deferred_frees() == (1, 64)
        release()
        assert _nbrmm._deferred_frees()[0] <= 1  # the release's own buffer may be queued
        _nbrmm._flush_deferred_frees()
        assert _testing.live_bytes(cache) == 0


def test_close_frees_at_once(cache):
    buf = nbrmm.Buffer(256, mr=cache)
    buf.close()
    assert _nbrmm._deferred_frees() == (0, 0)
    assert _testing.live_bytes(cache) == 0
    with nbrmm.Buffer(256, mr=cache):
        pass
    assert _nbrmm._deferred_frees() == (0, 0)
    assert _testing.live_bytes(cache) == 0


def test_only_caching_resources_defer():
    heap = _testing.host_heap_resource()
    nbrmm.Buffer(256, mr=heap)
    assert _nbrmm._deferred_frees() == (0, 0)


def test_only_the_default_stream_defers(cache):
    nbrmm.Buffer(256, mr=cache, stream=ForeignStream(0x1234))
    assert _nbrmm._deferred_frees() == (0, 0)
    assert _testing.live_bytes(cache) == 0
    # The legacy default stream, however spelled, defers.
    nbrmm.Buffer(256, mr=cache, stream=ForeignStream(1))
    assert _nbrmm._deferred_frees() == (1, 256)


def test_large_blocks_are_freed_at_once(cache):
    nbrmm.Buffer(BUDGET + 1, mr=cache)
    assert _nbrmm._deferred_frees() == (0, 0)
    assert _testing.live_bytes(cache) == 0
    nbrmm.Buffer(BUDGET, mr=cache)  # exactly the budget may wait
    assert _nbrmm._deferred_frees() == (1, BUDGET)


def test_queue_is_bounded(cache):
    live = [nbrmm.Buffer(256, mr=cache) for _ in range(CAPACITY + 1)]
    del live[CAPACITY:]
    # CAPACITY - 1 more fit; the last one finds the queue full: it is freed at once,
    # together with the whole queue.
    for _ in range(CAPACITY - 1):
        live.pop()
    assert _nbrmm._deferred_frees() == (CAPACITY, CAPACITY * 256)
    live.pop()
    assert _nbrmm._deferred_frees() == (0, 0)
    assert _testing.live_bytes(cache) == 0
    assert not live


def test_byte_budget(cache):
    big = [nbrmm.Buffer(BUDGET // 2, mr=cache) for _ in range(3)]
    big.pop()
    big.pop()
    assert _nbrmm._deferred_frees() == (2, BUDGET)
    big.pop()  # over the budget: freed at once, with the queue
    assert _nbrmm._deferred_frees() == (0, 0)
    assert _testing.live_bytes(cache) == 0


def test_freed_block_is_available_to_the_next_allocation():
    limited = _testing.host_cache_resource(limit=768 * 1024)
    buf = nbrmm.Buffer(768 * 1024, mr=limited)
    with pytest.raises(MemoryError):
        nbrmm.Buffer(256, mr=limited)
    del buf
    assert _nbrmm._deferred_frees() == (1, 768 * 1024)
    # The queue is emptied before allocating, so the limit is not hit.
    again = nbrmm.Buffer(768 * 1024, mr=limited)
    assert again.size == 768 * 1024


def test_resource_death_empties_the_queue():
    cache = _testing.host_cache_resource()
    nbrmm.Buffer(256, mr=cache)
    assert _nbrmm._deferred_frees() == (1, 256)
    del cache  # the queue may hold the last C++ copy of the resource: freed with it
    assert _nbrmm._deferred_frees() == (0, 0)


def test_subclasses_and_device_buffer_defer(cache):
    class Mine(nbrmm.Buffer):
        pass

    Mine(256, mr=cache)
    assert _nbrmm._deferred_frees() == (1, 256)
    nbrmm.DeviceBuffer(size=256, mr=cache)  # its allocation freed Mine's block first
    assert _nbrmm._deferred_frees() == (1, 256)
    assert _testing.live_bytes(cache) == 256


def test_threads_lose_nothing(cache):
    def work(seed):
        for k in range(3000):
            b = nbrmm.Buffer(1 + (seed * 7919 + k * 31) % 4096, mr=cache)
            if k % 5 == 0:
                b.close()
            del b

    assert run_threads(work, 6) == []
    _nbrmm._flush_deferred_frees()
    assert _testing.live_bytes(cache) == 0


def test_exit_with_queued_frees():
    proc = run_python(
        """
        import atexit
        import nbrmm
        from nbrmm import _nbrmm
        from extensions import testing as _testing

        cache = _testing.host_cache_resource()
        keep = nbrmm.Buffer(256, mr=cache)
        nbrmm.Buffer(512, mr=cache)
        assert _nbrmm._deferred_frees() == (1, 512)

        # Registered after nbrmm's own handlers, so it runs before them.
        atexit.register(lambda: print("at exit", _nbrmm._deferred_frees()))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "at exit (1, 512)\n"
    assert proc.stderr == ""


def test_stop_frees_the_queue_and_ends_deferral():
    proc = run_python(
        """
        import nbrmm
        from nbrmm import _nbrmm
        from nbrmm._nbrmm import _stop_deferring_frees
        from extensions import testing as _testing

        cache = _testing.host_cache_resource()
        nbrmm.Buffer(512, mr=cache)
        assert _nbrmm._deferred_frees() == (1, 512)
        _stop_deferring_frees()
        assert _nbrmm._deferred_frees() == (0, 0)
        assert _testing.live_bytes(cache) == 0
        assert _nbrmm._defer_frees(True) is False  # stays off for good
        nbrmm.Buffer(512, mr=cache)
        assert _nbrmm._deferred_frees() == (0, 0)
        assert _testing.live_bytes(cache) == 0
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


class DeferredFrees(RuleBasedStateMachine):
    """Whatever the order of creations, closes and deaths, every byte is accounted for:
    live in a buffer, waiting in the queue, or back in the resource."""

    def __init__(self):
        super().__init__()
        _nbrmm._flush_deferred_frees()
        self.cache = _testing.host_cache_resource()
        self.buffers = []

    @rule(n=st.integers(0, 3 * BUDGET // 4), stream=st.sampled_from([None, 0x99]))
    def create(self, n, stream):
        kwargs = {} if stream is None else {"stream": ForeignStream(stream)}
        self.buffers.append(nbrmm.Buffer(n, mr=self.cache, **kwargs))

    @precondition(lambda self: self.buffers)
    @rule(i=st.integers(0, 100))
    def destroy(self, i):
        del self.buffers[i % len(self.buffers)]

    @precondition(lambda self: self.buffers)
    @rule(i=st.integers(0, 100))
    def close(self, i):
        self.buffers.pop(i % len(self.buffers)).close()

    @rule()
    def flush(self):
        _nbrmm._flush_deferred_frees()
        assert _nbrmm._deferred_frees() == (0, 0)

    @invariant()
    def accounted(self):
        count, nbytes = _nbrmm._deferred_frees()
        assert 0 <= count <= CAPACITY
        assert 0 <= nbytes <= BUDGET
        in_buffers = sum(rounded(b.size) for b in self.buffers)
        # Queued blocks are still in use by the resource's count.
        assert _testing.live_bytes(self.cache) >= in_buffers
        assert _testing.live_bytes(self.cache) - in_buffers <= count * 256 + nbytes

    def teardown(self):
        self.buffers.clear()
        _nbrmm._flush_deferred_frees()
        assert _testing.live_bytes(self.cache) == 0


test_deferred_frees_state_machine = DeferredFrees.TestCase


# ------------------------------------------------------------------------------------
# On the GPU: librmm's caching resources, adaptors, the per-device map
# ------------------------------------------------------------------------------------

MiB = 1 << 20

CACHING = {
    "pool": lambda: nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource(), 16 * MiB),
    "arena": lambda: nbrmm.mr.ArenaMemoryResource(nbrmm.mr.CudaMemoryResource(), 64 * MiB),
    "fixed_size": lambda: nbrmm.mr.FixedSizeMemoryResource(nbrmm.mr.CudaMemoryResource(), MiB, 4),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CACHING))
def test_librmm_caching_resources_defer(name):
    mr = CACHING[name]()
    buf = nbrmm.Buffer(256, mr=mr)
    buf.copy_from_host(bytes(range(256)))
    del buf
    assert _nbrmm._deferred_frees() == (1, 256)
    again = nbrmm.Buffer(256, mr=mr)  # the queue is freed first
    assert _nbrmm._deferred_frees() == (0, 0)
    again.copy_from_host(b"\xff" * 256)
    assert again.tobytes() == b"\xff" * 256
    del again
    assert _nbrmm._deferred_frees() == (1, 256)
    del mr  # the resource object's death frees the queue (and the resource)
    assert _nbrmm._deferred_frees() == (0, 0)


OTHERS = {
    "cuda": lambda: nbrmm.mr.CudaMemoryResource(),
    "async": lambda: nbrmm.mr.CudaAsyncMemoryResource(),
    "managed": lambda: nbrmm.mr.ManagedMemoryResource(),
    "binning": lambda: nbrmm.mr.BinningMemoryResource(CACHING["pool"](), 8, 12),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(OTHERS))
def test_other_resources_free_at_once(name):
    mr = OTHERS[name]()
    nbrmm.Buffer(256, mr=mr)
    assert _nbrmm._deferred_frees() == (0, 0)


@pytest.mark.gpu
def test_adaptors_over_a_pool_see_every_free_at_once():
    pool = CACHING["pool"]()
    stats = nbrmm.mr.StatisticsResourceAdaptor(pool)
    tracking = nbrmm.mr.TrackingResourceAdaptor(pool)
    for mr in (stats, tracking):
        buf = nbrmm.Buffer(256, mr=mr)
        del buf
        assert _nbrmm._deferred_frees() == (0, 0)
    assert stats.allocation_counts.current_bytes == 0
    assert tracking.get_allocated_bytes() == 0


@pytest.mark.gpu
def test_other_streams_free_at_once():
    arena = CACHING["arena"]()
    stream = nbrmm.Stream()
    nbrmm.Buffer(256, mr=arena, stream=stream)
    assert _nbrmm._deferred_frees() == (0, 0)
    nbrmm.Buffer(256, mr=arena, stream=nbrmm.DEFAULT_STREAM)
    assert _nbrmm._deferred_frees() == (1, 256)


@pytest.mark.gpu
def test_pool_at_its_maximum_allocates_a_queued_block_again():
    pool = nbrmm.mr.PoolMemoryResource(
        nbrmm.mr.CudaMemoryResource(), initial_pool_size=MiB, maximum_pool_size=MiB
    )
    buf = nbrmm.Buffer(768 * 1024, mr=pool)
    with pytest.raises(MemoryError):
        nbrmm.Buffer(768 * 1024, mr=pool)
    del buf
    assert _nbrmm._deferred_frees() == (1, 768 * 1024)
    again = nbrmm.Buffer(768 * 1024, mr=pool)
    assert again.size == 768 * 1024


@pytest.mark.gpu
def test_current_resource_defers_and_replacing_it_frees_the_queue():
    pool = CACHING["pool"]()
    nbrmm.mr.set_current_device_resource(pool)
    nbrmm.Buffer(256)
    assert _nbrmm._deferred_frees() == (1, 256)
    nbrmm.mr.set_current_device_resource(nbrmm.mr.CudaMemoryResource())
    assert _nbrmm._deferred_frees() == (0, 0)


@pytest.mark.gpu
def test_cupy_memory_from_a_caching_resource_defers():
    cupy = pytest.importorskip("cupy")
    import nbrmm.allocators.cupy as hook

    arena = CACHING["arena"]()
    with cupy.cuda.using_allocator(hook.cupy_allocator(mr=arena)):
        a = cupy.arange(64, dtype=cupy.uint32)
        assert int(a.sum()) == 64 * 63 // 2
        _nbrmm._flush_deferred_frees()  # the sum's temporary result
        del a
        assert _nbrmm._deferred_frees() == (1, 256)
        b = cupy.zeros(64, dtype=cupy.uint32)  # frees the queue first
        assert _nbrmm._deferred_frees() == (0, 0)
        assert int(b.sum()) == 0
        del b
    nbrmm.mr.set_current_device_resource(arena)  # frees the queue
    assert _nbrmm._deferred_frees() == (0, 0)
    with cupy.cuda.using_allocator(hook.rmm_cupy_allocator):
        c = cupy.ones(16, dtype=cupy.uint8)
        del c
        assert _nbrmm._deferred_frees() == (1, 16)
    nbrmm.mr.set_current_device_resource(nbrmm.mr.CudaMemoryResource())
    assert _nbrmm._deferred_frees() == (0, 0)


@pytest.mark.gpu
def test_cupy_memory_on_another_stream_frees_at_once():
    cupy = pytest.importorskip("cupy")
    import nbrmm.allocators.cupy as hook

    arena = CACHING["arena"]()
    with cupy.cuda.Stream(non_blocking=True), cupy.cuda.using_allocator(
        hook.cupy_allocator(mr=arena)
    ):
        a = cupy.empty(256, dtype=cupy.uint8)
        del a
        assert _nbrmm._deferred_frees() == (0, 0)


def test_deferral_can_be_switched_off_for_measurement(cache):
    nbrmm.Buffer(256, mr=cache)
    assert _nbrmm._deferred_frees() == (1, 256)
    assert _nbrmm._defer_frees(False) is True  # switching off frees the queue
    assert _nbrmm._deferred_frees() == (0, 0)
    try:
        nbrmm.Buffer(256, mr=cache)
        assert _nbrmm._deferred_frees() == (0, 0)
        assert _testing.live_bytes(cache) == 0
    finally:
        assert _nbrmm._defer_frees(True) is False
    nbrmm.Buffer(256, mr=cache)
    assert _nbrmm._deferred_frees() == (1, 256)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_drops_the_queue_without_freeing():
    proc = run_python(
        """
        import os
        import nbrmm
        from nbrmm import _nbrmm
        from extensions import testing as _testing

        cache = _testing.host_cache_resource()
        nbrmm.Buffer(512, mr=cache)
        assert _nbrmm._deferred_frees() == (1, 512)
        pid = os.fork()
        if pid == 0:
            # The child's copy of the queue is gone and nothing was freed in the child.
            ok = _nbrmm._deferred_frees() == (0, 0) and _testing.live_bytes(cache) == 512
            nbrmm.Buffer(256, mr=cache)  # deferral still works in the child
            ok = ok and _nbrmm._deferred_frees() == (1, 256)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, status
        assert _nbrmm._deferred_frees() == (1, 512)  # the parent's queue is untouched
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"
