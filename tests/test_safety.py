"""What plain Python may do to nbrmm, tried as an attacker would, on host memory.

Each section is one class of failure that must not happen (a crash, aliased or freed memory
handed out, a hang, a leak) with the rule that replaces it: a clear exception, or the call
works.
"""

import gc
import random
import sys
import threading
import weakref

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbrmm
import nbrmm.mr as mr
from extensions import testing
from helpers import HostHeap, run_python

ON_GPU = nbrmm.get_device_count() > 0
host_heap = testing.host_heap_resource


def collect():
    for _ in range(3):
        gc.collect()


# --------------------------------------------------------------------------------------
# 1. Views never outlive the memory they show
# --------------------------------------------------------------------------------------

EXPORTS = {
    "memoryview": memoryview,
    "numpy.frombuffer": lambda b: np.frombuffer(b, dtype=np.uint8),
    "numpy.from_dlpack": np.from_dlpack,
}


@pytest.mark.parametrize("export", sorted(EXPORTS))
def test_close_refuses_while_exported(export):
    buf = nbrmm.Buffer(1 << 16, mr=host_heap())
    view = EXPORTS[export](buf)
    with pytest.raises(BufferError, match="close: the buffer has 1 live export"):
        buf.close()
    with pytest.raises(BufferError):
        with buf:
            pass
    assert not buf.closed
    view[0] = 7  # the memory is still the buffer's
    assert memoryview(buf)[0] == 7
    del view
    collect()
    buf.close()
    assert buf.closed


@pytest.mark.parametrize("export", sorted(EXPORTS))
def test_moving_resizes_refuse_while_exported(export):
    buf = nbrmm.Buffer(4096, mr=host_heap())
    view = EXPORTS[export](buf)
    ptr = buf.ptr
    with pytest.raises(BufferError, match="reserve"):
        buf.reserve(1 << 20)
    with pytest.raises(BufferError, match="resize"):
        buf.resize(8192)
    buf.resize(0)  # within the capacity: the memory stays where it is
    with pytest.raises(BufferError, match="shrink_to_fit"):
        buf.shrink_to_fit()
    assert buf.ptr == ptr and buf.capacity() == 4096
    del view
    collect()
    buf.shrink_to_fit()  # no contents to copy: works without a GPU
    assert buf.capacity() == 0


def test_small_buffers_never_show_another_buffers_bytes():
    # The old failure: a view of a closed small buffer read the next buffer's memory.
    heap = HostHeap()
    pool = mr.PoolMemoryResource(heap.resource(), initial_pool_size=1 << 16)
    pool = mr.AlignedResourceAdaptor(pool, 256)  # and through an adaptor
    views = []
    for i in range(32):
        buf = nbrmm.Buffer(256, mr=host_heap())
        view = memoryview(buf)
        view[:] = bytes([i]) * 256
        with pytest.raises(BufferError):
            buf.close()
        views.append((view, buf))
    assert all(v.tobytes() == bytes([i]) * 256 for i, (v, _) in enumerate(views))


def test_collected_buffer_keeps_its_memory_for_its_views():
    buf = nbrmm.Buffer(64, mr=host_heap())
    view = memoryview(buf)
    view[:] = b"x" * 64
    cycle = [buf]
    cycle.append(cycle)
    ref = weakref.ref(buf)
    del buf, cycle
    collect()
    assert view.tobytes() == b"x" * 64  # the view keeps the buffer (and its memory)
    del view
    collect()
    assert ref() is None


def test_dlpack_export_counts_until_the_consumer_lets_go():
    buf = nbrmm.Buffer(128, mr=host_heap())
    cap = buf.__dlpack__()
    with pytest.raises(BufferError):
        buf.close()
    arr = np.from_dlpack(type("T", (), {"__dlpack__": lambda s, **k: cap,
                                        "__dlpack_device__": lambda s: buf.__dlpack_device__()})())
    del cap
    collect()
    with pytest.raises(BufferError):
        buf.close()  # the array now holds the export
    del arr
    collect()
    buf.close()


@pytest.mark.parametrize("stream", [2**64, -2, -2**63 - 1, 10**30])
def test_dlpack_stream_outside_the_handles_is_refused_and_exports_nothing(stream):
    buf = nbrmm.Buffer(128, mr=host_heap())
    with pytest.raises(ValueError) as info:
        buf.__dlpack__(stream=stream)
    assert str(info.value) == (f"stream: {stream} is not a stream handle (an int from 0 to "
                               "2**64 - 1, or -1 for no synchronization)")
    buf.close()  # no export was counted


def test_unconsumed_dlpack_capsule_releases_its_export():
    buf = nbrmm.Buffer(128, mr=host_heap())
    buf.__dlpack__()  # dropped at once
    collect()
    buf.close()


def test_copy_source_buffer_cannot_be_closed_meanwhile():
    # A copy reads the source without the GIL; a Python upstream runs in the middle of it.
    src = nbrmm.Buffer(64, mr=host_heap())
    seen = []

    def alloc(n, s):
        try:
            src.close()
        except BufferError as e:
            seen.append(str(e))
        raise MemoryError("stop here")

    dst_mr = mr.CallbackMemoryResource(alloc, lambda p, n, s: None)
    with pytest.raises(MemoryError, match="stop here"):
        src.copy(mr=dst_mr)
    assert seen == ["close: the buffer is in use by a copy or resize still running (on another "
                    "thread, or the call this code runs inside)"]
    assert not src.closed


# --------------------------------------------------------------------------------------
# 2. Sizes never wrap around
# --------------------------------------------------------------------------------------

HUGE = [2**64 - 1, 2**64 - 256, 2**63, 2**63 - 1, 2**63 - 255, 2**62]


def resource_kinds(heap):
    up = heap.resource()
    kinds = {
        "callback": up,
        "host_heap": host_heap(),
        "pool": mr.PoolMemoryResource(up, initial_pool_size=1 << 20),
        "pool_capped": mr.PoolMemoryResource(up, 1 << 16, maximum_pool_size=1 << 20),
        "fixed_size": mr.FixedSizeMemoryResource(up, 4096, 1),
        "binning": mr.BinningMemoryResource(up, 8, 12),
        "limiting": mr.LimitingResourceAdaptor(up, 1 << 20),
        "statistics": mr.StatisticsResourceAdaptor(up),
        "tracking": mr.TrackingResourceAdaptor(up),
        "aligned": mr.AlignedResourceAdaptor(up, 4096),
        "thread_safe": mr.ThreadSafeResourceAdaptor(up),
        "failure_callback": mr.FailureCallbackResourceAdaptor(up, lambda n: False),
    }
    return kinds


@pytest.mark.parametrize("size", HUGE)
def test_huge_sizes_raise_for_every_resource(size):
    heap = HostHeap()
    kinds = resource_kinds(heap)
    before = heap.bytes_in_use  # the pools' first chunks
    for name, res in kinds.items():
        with pytest.raises(MemoryError):
            nbrmm.Buffer(size, mr=res)
        with pytest.raises(MemoryError):
            res.allocate(size)
        assert heap.bytes_in_use == before, name  # nothing was handed out
    # Counters saw nothing either.
    stats = mr.StatisticsResourceAdaptor(heap.resource())
    limit = mr.LimitingResourceAdaptor(stats, 1 << 20)
    with pytest.raises(MemoryError):
        nbrmm.Buffer(size, mr=limit)
    assert limit.get_allocated_bytes() == 0
    assert stats.allocation_counts.current_bytes == 0
    assert stats.allocation_counts.peak_bytes == 0


@given(size=st.integers(0, 2**64 + 10), alignment=st.sampled_from([1, 256, 4096, 2**20]))
def test_sizes_at_the_edges_are_served_or_refused(size, alignment):
    # Whatever the size: a buffer of exactly that size, aligned, or an exception.
    heap = HostHeap()
    res = mr.PoolMemoryResource(heap.resource(), initial_pool_size=1 << 16)
    try:
        buf = nbrmm.Buffer(size, mr=res, alignment=alignment)
    except (MemoryError, ValueError):
        return
    assert buf.size == size
    assert buf.ptr % alignment == 0 if size else True
    buf.close()


def test_limit_and_statistics_count_what_was_asked():
    heap = HostHeap()
    stats = mr.StatisticsResourceAdaptor(heap.resource())
    limit = mr.LimitingResourceAdaptor(stats, 4096)
    with pytest.raises(MemoryError):
        nbrmm.Buffer(4097, mr=limit)
    buf = nbrmm.Buffer(4096, mr=limit)
    assert limit.get_allocated_bytes() == 4096
    assert stats.allocation_counts.current_bytes == 4096
    buf.close()
    assert stats.allocation_counts.current_bytes == 0


@pytest.mark.parametrize(
    ("make", "exc"),
    [
        (lambda up: mr.PoolMemoryResource(up, 2**64 - 256), MemoryError),
        (lambda up: mr.PoolMemoryResource(up, 1 << 16, 2**64 - 1), ValueError),
        (lambda up: mr.PoolMemoryResource(up, 2**64), ValueError),
        (lambda up: mr.FixedSizeMemoryResource(up, 2**63, 2), ValueError),
        (lambda up: mr.FixedSizeMemoryResource(up, 2**64 - 1), ValueError),
        (lambda up: mr.FixedSizeMemoryResource(up, 4096, 2**62), ValueError),
        (lambda up: mr.BinningMemoryResource(up, 0, 31), ValueError),
        (lambda up: mr.AlignedResourceAdaptor(up, 2**41), ValueError),
    ],
)
def test_construction_sizes_are_checked(make, exc):
    heap = HostHeap()
    with pytest.raises(exc):
        make(heap.resource())
    assert heap.bytes_in_use == 0


def test_add_bin_sizes_are_checked():
    heap = HostHeap()
    binning = mr.BinningMemoryResource(heap.resource())
    with pytest.raises(ValueError, match="allocation_size"):
        binning.add_bin(2**63)  # 128 blocks of it would wrap around
    with pytest.raises(ValueError, match="allocation_size"):
        binning.add_bin(0)
    assert heap.bytes_in_use == 0


# --------------------------------------------------------------------------------------
# 3. Alignment is honoured or refused
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "exc"),
    [(0, ValueError), (3, ValueError), (255, ValueError), (-1, ValueError),
     (2**41, ValueError), (2**64, ValueError), (1.5, TypeError), ("256", TypeError),
     (None, TypeError), (True, TypeError)],
)
def test_bad_alignments_name_the_argument(bad, exc):
    heap = HostHeap()
    res = heap.resource()
    with pytest.raises(exc, match="alignment"):
        nbrmm.Buffer(100, mr=res, alignment=bad)
    with pytest.raises(exc, match="alignment"):
        res.allocate(100, alignment=bad)
    assert heap.calls == []


@pytest.mark.parametrize("alignment", [1, 2, 64, 256, 512, 4096, 2**16, 2**21])
def test_alignment_is_honoured_by_every_resource(alignment):
    heap = HostHeap()
    for name, res in resource_kinds(heap).items():
        if name == "fixed_size" and alignment > 2048:
            continue  # the block (4096 bytes) cannot hold the larger block alignment needs
        if name in ("pool_capped", "limiting") and alignment > 2**16:
            continue  # capped at 1 MiB: the larger block does not fit
        bufs = [nbrmm.Buffer(n, mr=res, alignment=alignment) for n in (1, 100, 1000)]
        assert all(b.ptr % alignment == 0 for b in bufs), name
        assert all(b.alignment == alignment for b in bufs), name
        ptrs = [res.allocate(n, alignment=alignment) for n in (1, 300)]
        assert all(p % alignment == 0 for p in ptrs), name
        with pytest.raises(ValueError, match="alignment"):
            res.deallocate(ptrs[0], 1, alignment=alignment * 2)
        for p, n in zip(ptrs, (1, 300)):
            res.deallocate(p, n, alignment=alignment)
        for b in bufs:
            b.close()


def test_python_upstream_must_honour_librmms_contract():
    returns = iter([0x1001, True, -256, 0, "0x100", 2**64])
    freed = []
    res = mr.CallbackMemoryResource(lambda n, s: next(returns), lambda p, n, s: freed.append(p))
    with pytest.raises(ValueError, match="not aligned to 256 bytes"):
        nbrmm.Buffer(10, mr=res)
    assert freed == [0x1001]  # the misaligned memory was given back
    with pytest.raises(TypeError, match="allocate_func must return the pointer as an int, got bool"):
        nbrmm.Buffer(10, mr=res)
    with pytest.raises(ValueError, match="not a pointer value"):
        nbrmm.Buffer(10, mr=res)
    with pytest.raises(ValueError, match="null pointer"):
        nbrmm.Buffer(10, mr=res)
    with pytest.raises(TypeError, match="got str"):
        nbrmm.Buffer(10, mr=res)
    with pytest.raises(ValueError, match="not a pointer value"):
        nbrmm.Buffer(10, mr=res)


def test_python_subclass_must_honour_the_contract_too():
    class Sloppy(mr.DeviceMemoryResource):
        def allocate(self, nbytes, stream):
            return 0x10

        def deallocate(self, ptr, nbytes, stream):
            pass

    with pytest.raises(ValueError, match=r"Sloppy.allocate\(\) returned 0x10"):
        nbrmm.Buffer(1, mr=Sloppy())


# --------------------------------------------------------------------------------------
# Raw allocations: no double free, no free to the wrong resource
# --------------------------------------------------------------------------------------


def test_raw_deallocate_checks_every_pointer():
    heap = HostHeap()
    a, b = heap.resource(), heap.resource()
    p = a.allocate(100)
    with pytest.raises(ValueError, match="another resource"):
        b.deallocate(p, 100)
    with pytest.raises(ValueError, match="nbytes"):
        a.deallocate(p, 101)
    with pytest.raises(ValueError, match="not an outstanding allocation"):
        a.deallocate(p + 256, 100)
    a.deallocate(p, 100)
    with pytest.raises(ValueError, match="already freed"):
        a.deallocate(p, 100)
    assert heap.bytes_in_use == 0
    a.deallocate(0, 0)  # what allocate(0) returned


def test_a_double_free_never_aliases_pool_memory():
    pool = mr.PoolMemoryResource(HostHeap().resource(), initial_pool_size=1 << 16)
    p = pool.allocate(256)
    pool.deallocate(p, 256)
    with pytest.raises(ValueError):
        pool.deallocate(p, 256)
    q, r = pool.allocate(256), pool.allocate(256)
    assert q != r


def test_raw_allocations_keep_their_resource_alive():
    heap = HostHeap()
    res = heap.resource()
    ref = weakref.ref(res)
    p = res.allocate(64)
    assert nbrmm._nbrmm._raw_outstanding(res) == 1
    del res
    collect()
    assert ref() is not None
    ref().deallocate(p, 64)
    collect()
    assert ref() is None and heap.bytes_in_use == 0



NAMING_RUNS_PYTHON = """
import sys, threading
sys.path.insert(0, {tests!r})
import nbrmm
from helpers import HostHeap
heap = HostHeap()
a, c = heap.resource(), heap.resource()
events, armed = [], [False]

class Key:  # a class-dict key that Python compares with "__module__" when the name is read
    def __hash__(self):
        return hash("__module__")
    def __eq__(self, other):
        if armed[0] and other == "__module__":
            armed[0] = False
            q = c.allocate(32)
            c.deallocate(q, 32)
            t = threading.Thread(target=lambda: [c.deallocate(c.allocate(48), 48) for _ in range(100)])
            t.start(); t.join()
            b.deallocate(p, 64)  # its owner frees it meanwhile
            events.append("ran")
        return False

X = type("X", (nbrmm.mr.CallbackMemoryResource,), {{Key(): 1, "__module__": "m"}})
h2 = HostHeap()
b = X(h2.allocate, h2.deallocate)
p = b.allocate(64)
armed[0] = True
try:
    a.deallocate(p, 64)
except ValueError as e:
    print(e)
print(events, nbrmm._nbrmm._raw_outstanding(b), nbrmm._nbrmm._raw_outstanding(c), h2.bytes_in_use)
"""


def test_naming_another_resource_may_run_python_without_harm():
    # Wording "allocated by another resource (its class)" reads the class's name, which
    # can run Python that allocates and frees (here and on another thread), even the
    # pointer in question: it runs once nbrmm's records are consistent again.
    tests = str(__import__("pathlib").Path(__file__).parent)
    out = run_python(NAMING_RUNS_PYTHON.format(tests=tests), timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "was allocated by another resource (m.X)" in lines[0], out.stdout
    assert lines[1] == "['ran'] 0 0 0", out.stdout


def test_raw_records_stay_exact_over_many_allocations_and_frees():
    # Records are reused once freed: after hundreds of them, each pointer still belongs
    # to its own resource, with its own size, exactly once.
    heap_a, heap_b = HostHeap(), HostHeap()
    a, b = heap_a.resource(), heap_b.resource()
    live = {}
    for round_ in range(3):
        for i in range(150):
            res, n = (a, 64 + i) if i % 3 else (b, 32 + i)
            live[res.allocate(n)] = (res, n)
        for ptr in list(live)[round_::2]:
            res, n = live.pop(ptr)
            other = b if res is a else a
            with pytest.raises(ValueError, match="another resource"):
                other.deallocate(ptr, n)
            with pytest.raises(ValueError, match="nbytes"):
                res.deallocate(ptr, n + 1)
            res.deallocate(ptr, n)
            with pytest.raises(ValueError, match="already freed"):
                res.deallocate(ptr, n)
        assert nbrmm._nbrmm._raw_outstanding(a) == sum(r is a for r, _ in live.values())
        assert nbrmm._nbrmm._raw_outstanding(b) == sum(r is b for r, _ in live.values())
    for ptr, (res, n) in live.items():
        res.deallocate(ptr, n)
    assert nbrmm._nbrmm._raw_outstanding(a) == nbrmm._nbrmm._raw_outstanding(b) == 0
    assert heap_a.bytes_in_use == heap_b.bytes_in_use == 0


def test_raw_records_stay_exact_as_their_table_grows_and_shrinks():
    # Thousands outstanding at once (the records' table grows several times), then freed
    # in a random order with allocations in between (it shrinks again): every record
    # left is found with its own size, and each pointer is freed exactly once.
    rng = random.Random(7)
    heap = HostHeap()
    res, other = heap.resource(), testing.host_heap_resource()
    live = {}
    for _ in range(3000):
        n = rng.randrange(1, 1024)
        live[res.allocate(n)] = n
    assert nbrmm._nbrmm._raw_outstanding(res) == 3000
    order = list(live)
    rng.shuffle(order)
    for k, ptr in enumerate(order):
        n = live.pop(ptr)
        res.deallocate(ptr, n)
        if k % 3 == 0:
            q = other.allocate(48)  # (another resource's record among them)
            other.deallocate(q, 48)
        if k % 250 == 0:
            with pytest.raises(ValueError, match="already freed"):
                res.deallocate(ptr, n)
            for p in rng.sample(sorted(live), min(20, len(live))):
                with pytest.raises(ValueError, match="nbytes"):
                    res.deallocate(p, live[p] + 1)
            assert nbrmm._nbrmm._raw_outstanding(res) == len(live)
    assert nbrmm._nbrmm._raw_outstanding(res) == nbrmm._nbrmm._raw_outstanding(other) == 0
    assert heap.bytes_in_use == 0
    for ptr in order[:50]:
        with pytest.raises(ValueError, match="not an outstanding allocation"):
            res.deallocate(ptr, 1)


def test_a_raw_record_at_a_reused_address_gives_way_to_the_new_allocation():
    # Memory given back behind nbrmm's back (here: an allocator that hands out one block
    # over and over) comes out again at an address nbrmm still has a record of. The new
    # allocation takes that place; the old record's resource is let go, and the address
    # is freed once, by its new owner. Both ways a record is made are covered: with no
    # freed record to reuse (200 outstanding take them all), and with one.
    heap = HostHeap()
    block = heap.allocate(64, None)
    freed = []

    def same_block(nbytes, stream):
        return block

    def note_free(ptr, nbytes, stream):
        freed.append(ptr)

    many = heap.resource()
    for spare_records in (False, True):
        filler = [many.allocate(8) for _ in range(200)]
        if spare_records:
            for p in filler:
                many.deallocate(p, 8)
            filler = []
        first = mr.CallbackMemoryResource(same_block, note_free)
        second = mr.CallbackMemoryResource(same_block, note_free)
        assert first.allocate(64) == block and second.allocate(64) == block
        assert nbrmm._nbrmm._raw_outstanding(first) == 0
        assert nbrmm._nbrmm._raw_outstanding(second) == 1
        gone = weakref.ref(first)
        del first
        gc.collect()
        assert gone() is None  # the stale record held it no longer
        second.deallocate(block, 64)
        assert freed == [block]
        with pytest.raises(ValueError, match="not an outstanding allocation"):
            second.deallocate(block, 64)
        freed.clear()
        for p in filler:
            many.deallocate(p, 8)
    heap.deallocate(block, 64, None)
    assert heap.bytes_in_use == 0

# --------------------------------------------------------------------------------------
# 4. A resource never becomes its own upstream
# --------------------------------------------------------------------------------------


def test_binning_resource_cannot_be_its_own_bin():
    heap = HostHeap()
    b = mr.BinningMemoryResource(heap.resource())
    with pytest.raises(ValueError, match="its own upstream"):
        b.add_bin(1024, b)
    with pytest.raises(ValueError, match="its own upstream"):
        b.add_bin(1024, mr.StatisticsResourceAdaptor(b))
    with pytest.raises(ValueError, match="its own upstream"):
        b.add_bin(1024, mr.LimitingResourceAdaptor(mr.TrackingResourceAdaptor(b), 1 << 20))
    other = mr.BinningMemoryResource(heap.resource())
    other.add_bin(1024, mr.StatisticsResourceAdaptor(b))
    with pytest.raises(ValueError, match="its own upstream"):
        b.add_bin(2048, other)  # b -> other -> stats -> b
    assert b.bin_mrs == []
    buf = nbrmm.Buffer(100, mr=b)  # the resource still works
    buf.close()


# --------------------------------------------------------------------------------------
# 5. Re-entrant calls raise instead of deadlocking
# --------------------------------------------------------------------------------------


def reentrant_upstream(target):
    """A Python upstream whose allocate allocates from `target()` first."""
    heap = HostHeap()
    errors = []

    def alloc(n, s):
        try:
            nbrmm.Buffer(16, mr=target())
        except RuntimeError as e:
            errors.append(str(e))
            raise
        return heap.allocate(n, s)

    return mr.CallbackMemoryResource(alloc, heap.deallocate), heap, errors


@pytest.mark.parametrize(
    "wrap",
    [
        lambda up: mr.PoolMemoryResource(up, initial_pool_size=0),
        lambda up: mr.ThreadSafeResourceAdaptor(up),
        lambda up: mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(up, 0)),
        lambda up: mr.BinningMemoryResource(up),
    ],
    ids=["pool", "thread_safe", "statistics_over_pool", "binning"],
)
def test_reentrant_upstream_raises_instead_of_deadlocking(wrap):
    holder = {}
    up, heap, errors = reentrant_upstream(lambda: holder["mr"])
    holder["mr"] = res = wrap(up)
    with pytest.raises(RuntimeError, match="inside a Python callback"):
        nbrmm.Buffer(100, mr=res)
    assert errors and "may deadlock" in errors[0]
    nbrmm.mr.set_current_device_resource(res)
    with pytest.raises(RuntimeError):
        nbrmm.Buffer(100)  # through the current resource too


def test_python_subclass_calling_its_base_allocate_raises():
    class Recursive(mr.DeviceMemoryResource):
        def allocate(self, nbytes, stream):
            return super().allocate(nbytes, stream)

        def deallocate(self, ptr, nbytes, stream):
            pass

    with pytest.raises(RuntimeError, match="inside a Python callback"):
        nbrmm.Buffer(8, mr=Recursive())


def test_callback_may_use_an_independent_resource():
    other = HostHeap().resource()
    heap = HostHeap()

    def alloc(n, s):
        tmp = nbrmm.Buffer(16, mr=other)  # independent: allowed
        tmp.close()
        return heap.allocate(n, s)

    pool = mr.PoolMemoryResource(mr.CallbackMemoryResource(alloc, heap.deallocate), 0)
    buf = nbrmm.Buffer(100, mr=pool)
    buf.close()


def test_buffer_freed_inside_a_callback_of_its_resource_waits_for_it_to_return():
    heap = HostHeap()
    holder = {}

    def alloc(n, s):
        holder.pop("victim", None)  # drops a buffer of the pool this callback serves
        return heap.allocate(n, s)

    pool = mr.PoolMemoryResource(mr.CallbackMemoryResource(alloc, heap.deallocate), 0)
    stats = mr.StatisticsResourceAdaptor(pool)
    holder["victim"] = nbrmm.Buffer(300, mr=stats)
    big = nbrmm.Buffer(1 << 20, mr=stats)  # grows the pool: the callback runs
    assert "victim" not in holder
    # The victim's free would have entered the pool while it was growing: it waited.
    assert stats.allocation_counts.current_bytes == 300 + (1 << 20)
    big.close()  # the next free outside any callback performs it first
    assert stats.allocation_counts.current_bytes == 0
    again = nbrmm.Buffer(300, mr=stats)  # and an allocation would have, too
    assert stats.allocation_counts.current_bytes == 300
    again.close()


def test_failure_callback_may_free_memory_of_its_upstream():
    # The usual spill: the adaptor's callback frees buffers of the resource below it.
    heap = HostHeap()
    limit = mr.LimitingResourceAdaptor(heap.resource(), 4096)
    spill = [nbrmm.Buffer(4096, mr=limit)]
    calls = []

    def on_failure(n):
        calls.append(n)
        return bool(spill and spill.pop().close() is None)

    res = mr.FailureCallbackResourceAdaptor(limit, on_failure)
    buf = nbrmm.Buffer(2048, mr=res)
    assert calls == [2048] and buf.size == 2048


# --------------------------------------------------------------------------------------
# 6. Interpreter exit with threads still allocating
# --------------------------------------------------------------------------------------

EXIT_WITH_THREADS = """
import threading, time, sys
sys.path.insert(0, {tests!r})
import nbrmm, nbrmm.mr
from extensions import testing
from helpers import HostHeap
res = {make}
def work():
    while True:
        nbrmm.Buffer(100, mr=res)
for _ in range(2):
    threading.Thread(target=work, daemon=True).start()
time.sleep(0.05)
print("exiting")
"""


@pytest.mark.parametrize(
    "make",
    [
        "testing.host_heap_resource()",
        "HostHeap().resource()",
        "nbrmm.mr.PoolMemoryResource(HostHeap().resource(), 1 << 20)",
        "nbrmm.mr.StatisticsResourceAdaptor(testing.host_cache_resource())",
    ],
    ids=["cpp_heap", "python_heap", "pool_over_python", "statistics_over_cache"],
)
def test_exit_with_threads_allocating_is_clean(make):
    tests = str(__import__("pathlib").Path(__file__).parent)
    for _ in range(5):
        out = run_python(EXIT_WITH_THREADS.format(tests=tests, make=make), timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "exiting"
        assert "terminate called" not in out.stderr and "nanobind: leaked" not in out.stderr


EXIT_WITH_FOREIGN_STREAMS = """
import threading, time, sys
sys.path.insert(0, {tests!r})
import nbrmm
from extensions import testing
res = testing.host_heap_resource()
class Foreign:  # a stream of another library: reading it runs Python
    def __cuda_stream__(self):
        time.sleep(0)  # hands the GIL over, and takes it back
        return (0, 0)
def work():
    stream = Foreign()
    while True:
        try:
            nbrmm.Buffer(100, mr=res, stream=stream)
            res.deallocate(res.allocate(64, stream), 64, stream)
        except RuntimeError:  # the interpreter is shutting down
            pass
for _ in range(3):
    threading.Thread(target=work, daemon=True).start()
time.sleep(0.05)
print("exiting")
"""


def test_exit_with_threads_reading_foreign_streams_is_clean():
    # Reading another library's stream runs Python from inside nbrmm's C++: exit waits for
    # such reads and refuses new ones on other threads, so that CPython never ends a
    # thread inside them (which aborted the process).
    tests = str(__import__("pathlib").Path(__file__).parent)
    for _ in range(6):
        out = run_python(EXIT_WITH_FOREIGN_STREAMS.format(tests=tests), timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "exiting"
        assert "terminate called" not in out.stderr and "FATAL" not in out.stderr
        assert "nanobind: leaked" not in out.stderr


# --------------------------------------------------------------------------------------
# 7. Exceptions from Python callbacks reach the caller as themselves
# --------------------------------------------------------------------------------------


class Boom(Exception):
    pass


RAISES = [
    (lambda: Boom("custom"), Boom),
    (lambda: ValueError("value"), ValueError),
    (KeyboardInterrupt, KeyboardInterrupt),
    (lambda: SystemExit(3), SystemExit),
    (lambda: RuntimeError("runtime"), RuntimeError),
]

WRAPS = {
    "direct": lambda up: up,
    "pool": lambda up: mr.PoolMemoryResource(up, initial_pool_size=0),
    "pool_initial": None,  # the pool's own constructor takes the first chunk
    "arena_free": lambda up: mr.BinningMemoryResource(up, 8, 10),
    "statistics": lambda up: mr.StatisticsResourceAdaptor(up),
    "limiting": lambda up: mr.LimitingResourceAdaptor(up, 1 << 30),
    "tracking": lambda up: mr.TrackingResourceAdaptor(up),
    "thread_safe": lambda up: mr.ThreadSafeResourceAdaptor(up),
    "aligned": lambda up: mr.AlignedResourceAdaptor(up, 4096),
    "fixed_size": lambda up: mr.FixedSizeMemoryResource(up, 4096, 2),
    "failure_callback": lambda up: mr.FailureCallbackResourceAdaptor(up, lambda n: False),
    "pool_over_statistics": lambda up: mr.PoolMemoryResource(mr.StatisticsResourceAdaptor(up), 0),
}


def raising_upstream(exc):
    def alloc(n, s):
        raise exc

    return mr.CallbackMemoryResource(alloc, lambda p, n, s: None)


@pytest.mark.parametrize("wrap", sorted(WRAPS))
@pytest.mark.parametrize(("make", "cls"), RAISES, ids=[c.__name__ for _, c in RAISES])
def test_callback_exceptions_reach_the_caller_unchanged(wrap, make, cls, capfd):
    exc = make()
    up = raising_upstream(exc)
    try:
        if WRAPS[wrap] is None:
            mr.PoolMemoryResource(up, initial_pool_size=1 << 20)
        elif wrap == "fixed_size":
            WRAPS[wrap](up)  # its constructor takes the first chunk
        else:
            nbrmm.Buffer(1000, mr=WRAPS[wrap](up))
    except BaseException as caught:
        assert caught is exc  # the very object, with its traceback
        assert caught.__traceback__ is not None
        assert "alloc" in [f.name for f in __import__("traceback").extract_tb(caught.__traceback__)]
    else:
        pytest.fail("no exception")
    out, err = capfd.readouterr()
    assert err == ""  # one report: the exception, nothing on stderr


@pytest.mark.parametrize("wrap", sorted(w for w in WRAPS if w != "pool_initial"))
def test_memory_error_is_out_of_memory_to_every_adaptor(wrap):
    exc = MemoryError("host heap exhausted")
    up = raising_upstream(exc)
    make = WRAPS[wrap]
    with pytest.raises(MemoryError) as info:
        res = make(up)
        nbrmm.Buffer(1000, mr=res)
    caught = info.value
    # The MemoryError itself, or librmm's out-of-memory error caused by it.
    assert caught is exc or (isinstance(caught, nbrmm.OutOfMemory) and caught.__cause__ is exc)
    assert "/" not in str(caught) and not str(caught).endswith("\n")


def test_pool_turns_the_upstreams_memory_error_into_its_own():
    exc = MemoryError("no more")
    pool = mr.PoolMemoryResource(raising_upstream(exc), initial_pool_size=0)
    with pytest.raises(nbrmm.OutOfMemory) as info:
        nbrmm.Buffer(256, mr=pool)
    assert info.value.__cause__ is exc
    assert str(info.value).startswith("Maximum pool size exceeded")
    assert "MemoryError: no more" in str(info.value)


def test_failure_callback_retries_after_a_python_memory_error():
    heap = HostHeap()
    state = {"full": True}

    def alloc(n, s):
        if state["full"]:
            raise MemoryError("full")
        return heap.allocate(n, s)

    def on_failure(nbytes):
        state["full"] = False  # "spill", then retry
        return True

    calls = []
    res = mr.FailureCallbackResourceAdaptor(
        mr.CallbackMemoryResource(alloc, heap.deallocate),
        lambda n: calls.append(n) or on_failure(n),
    )
    buf = nbrmm.Buffer(512, mr=res)
    assert calls == [512] and heap.bytes_in_use == 512
    buf.close()


@pytest.mark.parametrize(("make", "cls"), RAISES, ids=[c.__name__ for _, c in RAISES])
def test_failure_callback_exception_reaches_the_caller(make, cls):
    exc = make()

    def on_failure(n):
        raise exc

    res = mr.FailureCallbackResourceAdaptor(raising_upstream(MemoryError()), on_failure)
    with pytest.raises(cls) as info:
        nbrmm.Buffer(64, mr=res)
    assert info.value is exc


def test_messages_carry_no_build_paths():
    res = mr.LimitingResourceAdaptor(HostHeap().resource(), 10)
    with pytest.raises(nbrmm.OutOfMemory) as info:
        nbrmm.Buffer(4096, mr=res)
    text = str(info.value)
    assert "/__w/" not in text and ".cpp" not in text and "std::" not in text
    assert text == text.strip()


# --------------------------------------------------------------------------------------
# 8. Cycles through C++ are visible to the garbage collector
# --------------------------------------------------------------------------------------


def test_failure_adaptor_referring_to_itself_is_collected_after_a_buffer():
    holder = {}

    def spill(n):
        return holder["mr"] is None

    res = mr.FailureCallbackResourceAdaptor(HostHeap().resource(), spill)
    holder["mr"] = res
    nbrmm.Buffer(64, mr=res).close()  # once one Buffer was allocated from it
    buf = nbrmm.Buffer(64, mr=res)
    holder["buf"] = buf
    refs = [weakref.ref(res), weakref.ref(spill)]
    del res, spill, holder, buf
    collect()
    assert [r() for r in refs] == [None, None]


def test_callback_closing_over_an_adaptor_of_its_own_resource_is_collected():
    heap = HostHeap()
    box = {}

    def alloc(n, s):
        box["stats"].allocation_counts  # noqa: B018 - refers to the adaptor
        return heap.allocate(n, s)

    up = mr.CallbackMemoryResource(alloc, heap.deallocate)
    box["stats"] = mr.StatisticsResourceAdaptor(mr.LimitingResourceAdaptor(up, 1 << 20))
    buf = nbrmm.Buffer(128, mr=box["stats"])
    box["buf"] = buf
    refs = [weakref.ref(up), weakref.ref(box["stats"]), weakref.ref(alloc)]
    del up, alloc, box, buf
    collect()
    assert [r() for r in refs] == [None, None, None]
    assert heap.bytes_in_use == 0


def test_pool_over_a_callback_cycle_is_collected():
    heap = HostHeap()

    class Owner:
        pass

    owner = Owner()
    owner.up = mr.CallbackMemoryResource(lambda n, s, o=owner: heap.allocate(n, s), heap.deallocate)
    owner.pool = mr.PoolMemoryResource(owner.up, initial_pool_size=1 << 16)
    owner.bufs = [nbrmm.Buffer(100, mr=owner.pool) for _ in range(3)]
    ref = weakref.ref(owner)
    del owner
    collect()
    assert ref() is None
    assert heap.bytes_in_use == 0


LEAK_SCENARIOS = {
    "module_level_callbacks_and_adaptor": """
        def alloc(n, s):
            return heap.allocate(n, s)
        def free(p, n, s):
            heap.deallocate(p, n, s)
        cb = nbrmm.mr.CallbackMemoryResource(alloc, free)
        stats = nbrmm.mr.StatisticsResourceAdaptor(cb)
        buf = nbrmm.Buffer(100, mr=stats)
    """,
    "pool_at_module_level": """
        pool = nbrmm.mr.PoolMemoryResource(heap.resource(), 1 << 16)
        bufs = [nbrmm.Buffer(n, mr=pool) for n in (1, 100, 1000)]
    """,
    "global_failure_adaptor": """
        def spill(n):
            return adaptor is None
        adaptor = nbrmm.mr.FailureCallbackResourceAdaptor(heap.resource(), spill)
        buf = nbrmm.Buffer(64, mr=adaptor)
    """,
    "current_resource_with_callbacks": """
        def alloc(n, s):
            return heap.allocate(n, s)
        nbrmm.mr.set_current_device_resource(
            nbrmm.mr.TrackingResourceAdaptor(nbrmm.mr.CallbackMemoryResource(alloc, heap.deallocate)))
        buf = nbrmm.Buffer(10)
    """,
    "binning_with_bins_at_module_level": """
        b = nbrmm.mr.BinningMemoryResource(heap.resource())
        b.add_bin(512, nbrmm.mr.StatisticsResourceAdaptor(heap.resource()))
        buf = nbrmm.Buffer(100, mr=b)
    """,
    "raw_allocation_left_outstanding": """
        res = heap.resource()
        ptr = res.allocate(100)
    """,
    "exported_buffer_at_exit": """
        buf = nbrmm.Buffer(64, mr=testing.host_heap_resource())
        view = memoryview(buf)
    """,
}


@pytest.mark.parametrize("name", sorted(LEAK_SCENARIOS))
def test_exit_reports_no_leak(name):
    import textwrap

    tests = str(__import__("pathlib").Path(__file__).parent)
    code = (
        f"import sys\nsys.path.insert(0, {tests!r})\nimport nbrmm, nbrmm.mr\n"
        "from extensions import testing\nfrom helpers import HostHeap\nheap = HostHeap()\n"
        + textwrap.dedent(LEAK_SCENARIOS[name])
        + "\nprint('done')\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"
    assert "leaked" not in out.stderr, out.stderr


def test_pytest_session_parametrized_with_streams_leaks_nothing(tmp_path):
    (tmp_path / "test_streams.py").write_text(
        "import pytest, nbrmm\n"
        "@pytest.mark.parametrize('s', [nbrmm.DEFAULT_STREAM, nbrmm.LEGACY_DEFAULT_STREAM,"
        " nbrmm.PER_THREAD_DEFAULT_STREAM])\n"
        "def test_s(s):\n    assert s.handle in (0, 1, 2)\n"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "leaked" not in out.stdout + out.stderr


# --------------------------------------------------------------------------------------
# 9. A failed construction leaves nothing behind
# --------------------------------------------------------------------------------------


@pytest.mark.skipif(ON_GPU, reason="the copy fails only without a GPU")
def test_failed_device_buffer_construction_leaks_nothing():
    heap = HostHeap()
    res = heap.resource()
    before = sys.getrefcount(res)
    for _ in range(5):
        with pytest.raises(nbrmm.CudaError, match="no usable CUDA driver or GPU"):
            nbrmm.DeviceBuffer(ptr=1234, size=8, mr=res)
    collect()
    assert heap.bytes_in_use == 0
    assert sys.getrefcount(res) == before


def test_failed_construction_with_bad_arguments_touches_nothing():
    heap = HostHeap()
    res = heap.resource()
    for kwargs in ({"stream": None}, {"stream": "s"}, {"alignment": 3}, {"mr": 42}):
        with pytest.raises((TypeError, ValueError)):
            nbrmm.Buffer(100, **({"mr": res} | kwargs))
    assert heap.calls == []


# --------------------------------------------------------------------------------------
# 10. Without a GPU, what needs one says so
# --------------------------------------------------------------------------------------


@pytest.mark.skipif(ON_GPU, reason="checks the behaviour without a GPU")
@pytest.mark.parametrize(
    "call",
    [
        lambda: mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size="1GiB"),
        lambda: mr.CudaAsyncMemoryResource(),
        lambda: mr.experimental.CudaAsyncManagedMemoryResource(),
        lambda: mr.SystemMemoryResource(),
        lambda: mr.SamHeadroomMemoryResource(1 << 20),
        lambda: nbrmm.Buffer(10, mr=mr.CudaMemoryResource()),
        lambda: nbrmm.Buffer(10, mr=mr.ManagedMemoryResource()),
        lambda: mr.CudaMemoryResource().allocate(10),
        lambda: nbrmm.Stream(),
        lambda: nbrmm.to_device(b"abc", mr=HostHeap().resource()),
    ],
)
def test_no_gpu_raises_cuda_unavailable(call):
    with pytest.raises(nbrmm.CudaUnavailableError, match="no usable CUDA driver or GPU") as info:
        call()
    assert isinstance(info.value, nbrmm.CudaError) and isinstance(info.value, MemoryError)
    assert "/__w/" not in str(info.value)


def test_threads_racing_close_and_copy_never_crash():
    buf = nbrmm.Buffer(1 << 12, mr=host_heap())
    stop = threading.Event()
    errors = []

    def closer():
        while not stop.is_set():
            try:
                buf.close()
            except BufferError:
                pass

    def user():
        for _ in range(200):
            try:
                view = memoryview(buf)
                view[0]
                del view
            except (ValueError, BufferError) as e:
                errors.append(type(e))

    t = threading.Thread(target=closer)
    t.start()
    try:
        user()
    finally:
        stop.set()
        t.join()
    assert buf.closed
