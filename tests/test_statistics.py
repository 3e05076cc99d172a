"""nbrmm.statistics on the current device resource (librmm's per-device map).

CPU tests run over a malloc-backed resource set as the current device resource, so the
allocations go through the same C++ paths as on a GPU.
"""

import threading

import pytest

import nbrmm
import nbrmm.mr
import nbrmm.statistics as st
from helpers import POOL_SIZE, HostHeap
from nbrmm.statistics import ProfilerRecords, Statistics

ON_GPU = nbrmm.get_device_count() > 0


def stats(cur_b, cur_n, peak_b, peak_n, tot_b, tot_n):
    return Statistics(cur_b, cur_n, peak_b, peak_n, tot_b, tot_n)


@pytest.fixture
def heap():
    """A host heap whose resource is the current device resource during the test."""
    h = HostHeap()
    h.mr = h.resource()
    nbrmm.mr.set_current_device_resource(h.mr)
    return h


# --------------------------------------------------------------------------------------
# enable / get / push / pop / disable
# --------------------------------------------------------------------------------------


def test_without_statistics_everything_is_a_no_op(heap):
    assert st.get_statistics() is None
    assert st.push_statistics() is None
    assert st.pop_statistics() is None
    assert st.disable_statistics() is None
    assert nbrmm.mr.get_current_device_resource() is heap.mr


def test_enable_wraps_the_current_resource_and_disable_restores_it(heap):
    adaptor = st.enable_statistics()
    assert isinstance(adaptor, nbrmm.mr.StatisticsResourceAdaptor)
    assert adaptor.upstream_mr is heap.mr
    assert nbrmm.mr.get_current_device_resource() is adaptor
    # Idempotent: enabling again does not wrap twice.
    assert st.enable_statistics() is adaptor
    assert nbrmm.mr.get_current_device_resource() is adaptor

    buf = nbrmm.Buffer(1000)
    assert st.get_statistics() == stats(1000, 1, 1000, 1, 1000, 1)
    assert heap.bytes_in_use == 1000
    del buf
    final = st.disable_statistics()
    assert final == stats(0, 0, 1000, 1, 1000, 1)
    assert nbrmm.mr.get_current_device_resource() is heap.mr
    assert st.get_statistics() is None


def test_enable_with_mr_wraps_that_resource(heap):
    other = HostHeap().resource()
    adaptor = st.enable_statistics(mr=other)
    assert adaptor.upstream_mr is other
    assert nbrmm.mr.get_current_device_resource() is adaptor
    # An adaptor given as mr is made current as it is.
    again = nbrmm.mr.StatisticsResourceAdaptor(heap.mr)
    assert st.enable_statistics(again) is again
    assert nbrmm.mr.get_current_device_resource() is again


def test_bad_mr_arguments_name_the_parameter(heap):
    for fn in (st.get_statistics, st.push_statistics, st.pop_statistics, st.enable_statistics):
        with pytest.raises(TypeError, match="mr"):
            fn(mr="current")
    with pytest.raises(TypeError, match="mr"):
        with st.statistics(mr=42):
            pass
    with pytest.raises(TypeError, match="records"):
        st.profiler(records={})
    with pytest.raises(TypeError, match="name"):
        st.profiler(name=3)


def test_nested_push_pop_counts_exactly(heap):
    st.enable_statistics()
    a = nbrmm.Buffer(1000)
    assert st.push_statistics() == stats(1000, 1, 1000, 1, 1000, 1)
    assert st.get_statistics() == stats(0, 0, 0, 0, 0, 0)
    b = nbrmm.Buffer(500)
    c = nbrmm.Buffer(300)
    del b
    assert st.get_statistics() == stats(300, 1, 800, 2, 800, 2)

    assert st.push_statistics() == stats(300, 1, 800, 2, 800, 2)
    d = nbrmm.Buffer(50)
    e = nbrmm.Buffer(700)
    del d, e
    assert st.pop_statistics() == stats(0, 0, 750, 2, 750, 2)
    # The inner level's peak counts on top of the 300 bytes in use when it began.
    assert st.get_statistics() == stats(300, 1, 1050, 3, 1550, 4)

    assert st.pop_statistics() == stats(300, 1, 1050, 3, 1550, 4)
    assert st.get_statistics() == stats(1300, 2, 2050, 4, 2550, 5)
    del a, c
    assert st.get_statistics() == stats(0, 0, 2050, 4, 2550, 5)
    assert heap.bytes_in_use == 0
    with pytest.raises(IndexError):
        st.pop_statistics()


def test_statistics_follow_the_current_resource(heap):
    first = st.enable_statistics()
    keep = nbrmm.Buffer(100)
    second_heap = HostHeap()
    second = nbrmm.mr.StatisticsResourceAdaptor(second_heap.resource())

    nbrmm.mr.set_current_device_resource(second)
    other = nbrmm.Buffer(7)
    assert st.get_statistics() == stats(7, 1, 7, 1, 7, 1)
    assert st.get_statistics(mr=first) == stats(100, 1, 100, 1, 100, 1)
    st.push_statistics(mr=first)
    assert st.get_statistics(mr=first) == stats(0, 0, 0, 0, 0, 0)
    assert st.get_statistics() == stats(7, 1, 7, 1, 7, 1)
    assert st.pop_statistics(mr=first) == stats(0, 0, 0, 0, 0, 0)

    # A resource that does not collect statistics: nothing to read, whatever was before.
    nbrmm.mr.set_current_device_resource(heap.mr)
    assert st.get_statistics() is None
    nbrmm.Buffer(5)
    nbrmm.mr.set_current_device_resource(first)
    assert st.get_statistics() == stats(100, 1, 100, 1, 100, 1)
    del keep, other
    assert st.get_statistics() == stats(0, 0, 100, 1, 100, 1)
    assert st.get_statistics(mr=second) == stats(0, 0, 7, 1, 7, 1)
    assert st.get_statistics(mr=heap.mr) is None


def test_statistics_of_a_resource_read_back_from_the_map(heap):
    # The object read back from librmm's map is the one set, so the same counters.
    adaptor = nbrmm.mr.StatisticsResourceAdaptor(heap.mr)
    nbrmm.mr.set_per_device_resource(nbrmm.get_current_device(), adaptor)
    buf = nbrmm.Buffer(64)
    assert st.get_statistics(mr=nbrmm.mr.get_current_device_resource()) == stats(
        64, 1, 64, 1, 64, 1
    )
    del buf


# --------------------------------------------------------------------------------------
# The statistics() context manager
# --------------------------------------------------------------------------------------


def test_context_wraps_and_restores_the_very_same_resource(heap):
    with st.statistics() as adaptor:
        assert isinstance(adaptor, nbrmm.mr.StatisticsResourceAdaptor)
        assert nbrmm.mr.get_current_device_resource() is adaptor
        assert adaptor.upstream_mr is heap.mr
        buf = nbrmm.Buffer(256)
        assert st.get_statistics() == stats(256, 1, 256, 1, 256, 1)
        del buf
    assert nbrmm.mr.get_current_device_resource() is heap.mr
    assert adaptor.allocation_counts == stats(0, 0, 256, 1, 256, 1)


def test_context_restores_after_an_exception(heap):
    with pytest.raises(KeyError):
        with st.statistics():
            nbrmm.Buffer(8)
            raise KeyError("boom")
    assert nbrmm.mr.get_current_device_resource() is heap.mr


def test_nested_contexts_push_and_pop(heap):
    with st.statistics() as outer:
        a = nbrmm.Buffer(10)
        with st.statistics() as inner:
            assert inner is outer
            b = nbrmm.Buffer(20)
            assert st.get_statistics() == stats(20, 1, 20, 1, 20, 1)
            with st.statistics():
                nbrmm.Buffer(40)  # freed at once
                assert st.get_statistics() == stats(0, 0, 40, 1, 40, 1)
            assert st.get_statistics() == stats(20, 1, 60, 2, 60, 2)
        assert st.get_statistics() == stats(30, 2, 70, 3, 70, 3)
        del a, b
    assert nbrmm.mr.get_current_device_resource() is heap.mr


def test_context_on_an_enabled_adaptor_keeps_it(heap):
    adaptor = st.enable_statistics()
    keep = nbrmm.Buffer(1)
    with st.statistics() as inside:
        assert inside is adaptor
        assert st.get_statistics() == stats(0, 0, 0, 0, 0, 0)
    assert nbrmm.mr.get_current_device_resource() is adaptor
    assert st.get_statistics() == stats(1, 1, 1, 1, 1, 1)
    del keep


def test_context_with_mr(heap):
    other = HostHeap()
    other_mr = other.resource()
    # A plain resource: wrapped and current during the block; the old current returns.
    with st.statistics(mr=other_mr) as adaptor:
        assert adaptor.upstream_mr is other_mr
        assert nbrmm.mr.get_current_device_resource() is adaptor
        buf = nbrmm.Buffer(33)
        assert other.bytes_in_use == 33
        del buf
    assert nbrmm.mr.get_current_device_resource() is heap.mr
    assert adaptor.allocation_counts == stats(0, 0, 33, 1, 33, 1)

    # A statistics adaptor that is not current: a level on its stack, current untouched.
    side = nbrmm.mr.StatisticsResourceAdaptor(other_mr)
    with st.statistics(mr=side) as same:
        assert same is side
        assert nbrmm.mr.get_current_device_resource() is heap.mr
        side.deallocate(side.allocate(12), 12)
        assert side.allocation_counts == stats(0, 0, 12, 1, 12, 1)
    assert side.allocation_counts == stats(0, 0, 12, 1, 12, 1)
    with pytest.raises(IndexError):
        side.pop_counters()  # the block popped its own level


def test_context_detects_a_changed_current_resource(heap):
    replacement = HostHeap().resource()
    with pytest.raises(ValueError, match="changed"):
        with st.statistics():
            nbrmm.mr.set_current_device_resource(replacement)
    # The replacement is left in place.
    assert nbrmm.mr.get_current_device_resource() is replacement

    adaptor = st.enable_statistics()
    with pytest.raises(ValueError, match="changed"):
        with st.statistics():
            nbrmm.mr.set_current_device_resource(heap.mr)
    # The level was still popped from the adaptor that the block pushed on.
    with pytest.raises(IndexError):
        adaptor.pop_counters()


# --------------------------------------------------------------------------------------
# Threads: one counter stack per adaptor, shared by every thread
# --------------------------------------------------------------------------------------


def test_counts_are_exact_under_threads(heap):
    threads, rounds = 8, 150
    sizes = [64 * (i + 1) for i in range(threads)]
    barrier = threading.Barrier(threads)
    errors = []

    def work(size):
        try:
            barrier.wait()
            for k in range(rounds):
                buf = nbrmm.Buffer(size + k % 3)
                del buf
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with st.statistics() as adaptor:
        keep = nbrmm.Buffer(5)
        pool = [threading.Thread(target=work, args=(s,)) for s in sizes]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert not errors
        counts = st.get_statistics()
        del keep
    expected_bytes = 5 + sum(rounds * s + sum(k % 3 for k in range(rounds)) for s in sizes)
    assert counts.total_count == threads * rounds + 1
    assert counts.total_bytes == expected_bytes
    assert counts.current_bytes == 5
    assert counts.current_count == 1
    assert 1 <= counts.peak_count - 1 <= threads
    assert adaptor.allocation_counts.current_bytes == 0
    assert heap.bytes_in_use == 0


def test_the_counter_stack_is_shared_by_all_threads(heap):
    adaptor = st.enable_statistics()
    keep = nbrmm.Buffer(11)  # on the bottom level, below the one the other thread pushes
    pushed = threading.Event()
    allocated = threading.Event()
    popped = {}

    def pusher():
        st.push_statistics()
        pushed.set()
        allocated.wait(10)
        popped["a"] = st.pop_statistics()

    def allocator():
        pushed.wait(10)
        # This thread pushed nothing, yet it sees (and counts into) the level above.
        popped["seen"] = st.get_statistics()
        buf = nbrmm.Buffer(77)
        del buf
        allocated.set()

    ts = [threading.Thread(target=pusher), threading.Thread(target=allocator)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert popped["seen"] == stats(0, 0, 0, 0, 0, 0)
    assert popped["a"] == stats(0, 0, 77, 1, 77, 1)
    assert adaptor.allocation_counts == stats(11, 1, 88, 2, 88, 2)
    del keep


def test_push_pop_from_many_threads_keeps_the_stack_consistent(heap):
    adaptor = st.enable_statistics()
    threads, rounds = 6, 200
    barrier = threading.Barrier(threads)

    def work():
        barrier.wait()
        for _ in range(rounds):
            st.push_statistics()
            st.pop_statistics()

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    # Every push was matched by a pop: only the bottom level is left.
    with pytest.raises(IndexError):
        adaptor.pop_counters()


# --------------------------------------------------------------------------------------
# Profiler
# --------------------------------------------------------------------------------------


def test_profiler_decorator_records_by_function_name(heap):
    records = ProfilerRecords()

    @st.profiler(records=records)
    def step(n):
        a = nbrmm.Buffer(n)
        b = nbrmm.Buffer(n)
        del a, b
        return n

    assert step(10) == 10  # statistics not enabled: runs, records nothing
    assert records.records == {}

    st.enable_statistics()
    assert step(100) == 100
    assert step(300) == 300
    assert step.__name__ == "step"
    (name,) = records.records
    assert name.startswith(__file__ + ":")
    assert name.endswith("(test_profiler_decorator_records_by_function_name.<locals>.step)")
    assert records.records[name] == ProfilerRecords.MemoryRecord(2, 800, 600)
    # Profiling leaves the counters of the enclosing level correct.
    assert st.get_statistics() == stats(0, 0, 600, 2, 800, 4)


def test_profiler_context_records_by_name(heap):
    records = ProfilerRecords()
    st.enable_statistics()
    keep = []
    with st.profiler(records=records, name="load"):
        keep.append(nbrmm.Buffer(4096))
        with st.profiler(records=records, name="parse"):
            tmp = nbrmm.Buffer(1024)
            del tmp
    with st.profiler(records=records, name="parse"):
        nbrmm.Buffer(512)
    assert records.records == {
        "load": ProfilerRecords.MemoryRecord(1, 5120, 5120),
        "parse": ProfilerRecords.MemoryRecord(2, 1536, 1024),
    }
    with pytest.raises(ValueError, match="name"):
        with st.profiler(records=records):
            pass
    del keep


def test_profiler_named_decorator_reentrant_and_exception(heap):
    records = ProfilerRecords()
    st.enable_statistics()

    @st.profiler(records=records, name="rec")
    def rec(depth):
        buf = nbrmm.Buffer(10)
        if depth:
            rec(depth - 1)
        del buf

    rec(2)
    # Each level's peak holds its callees': 10, 20 and 30 bytes; totals 10 + 20 + 30.
    assert records.records["rec"] == ProfilerRecords.MemoryRecord(3, 60, 30)

    same = st.profiler(records=records, name="ctx")
    with same:
        with same:
            nbrmm.Buffer(3)
    assert records.records["ctx"] == ProfilerRecords.MemoryRecord(2, 6, 3)

    @st.profiler(records=records, name="fails")
    def fails():
        nbrmm.Buffer(9)
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        fails()
    assert records.records["fails"] == ProfilerRecords.MemoryRecord(1, 9, 9)
    assert st.get_statistics().total_bytes == 30 + 3 + 9  # each byte once


def test_profiler_default_records_and_mr(heap):
    st.default_profiler_records.clear()
    st.enable_statistics()

    @st.profiler()
    def work():
        nbrmm.Buffer(128)

    work()
    (record,) = st.default_profiler_records.records.values()
    assert record == ProfilerRecords.MemoryRecord(1, 128, 128)
    st.default_profiler_records.clear()

    # mr=: profile a statistics adaptor that is not the current resource.
    side = nbrmm.mr.StatisticsResourceAdaptor(HostHeap().resource())
    records = ProfilerRecords()
    with st.profiler(records=records, name="side", mr=side):
        side.deallocate(side.allocate(40), 40)
        nbrmm.Buffer(1)  # through the current resource: not counted on `side`
    assert records.records == {"side": ProfilerRecords.MemoryRecord(1, 40, 40)}


def test_profiler_records_report():
    records = ProfilerRecords()
    assert "No data" in records.report()
    records.add("small", stats(0, 0, 10, 1, 10, 1))
    records.add("big", stats(0, 0, 5000, 1, 6000, 2))
    records.add("small", stats(0, 0, 20, 1, 30, 1))
    records.add("many", stats(0, 0, 1, 1, 1, 1))
    for _ in range(4):
        records.add("many", stats(0, 0, 1, 1, 1, 1))
    assert records.records["small"] == ProfilerRecords.MemoryRecord(2, 40, 20)

    def order(report):
        return [line.split()[-1] for line in report.splitlines()[-3:]]

    assert order(records.report()) == ["big", "small", "many"]
    assert order(records.report(ordered_by="num_calls")) == ["many", "small", "big"]
    assert order(records.report(ordered_by="memory_total")) == ["big", "small", "many"]
    assert "     1           5,000           6,000  big" in records.report()
    assert str(records) == records.report()
    assert "big" in repr(records)
    with pytest.raises(ValueError, match="ordered_by"):
        records.report(ordered_by="size")
    # records is a snapshot: changing it changes nothing.
    records.records["big"].num_calls = 99
    assert records.records["big"].num_calls == 1


def test_profiler_records_add_from_threads():
    records = ProfilerRecords()

    def work():
        for _ in range(500):
            records.add("x", stats(0, 0, 3, 1, 5, 1))

    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert records.records["x"] == ProfilerRecords.MemoryRecord(4000, 20000, 3)


# --------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_statistics_on_cuda_memory_resource():
    cuda = nbrmm.mr.CudaMemoryResource()
    nbrmm.mr.set_current_device_resource(cuda)
    with st.statistics() as adaptor:
        a = nbrmm.Buffer(1 << 20)
        with st.statistics():
            b = nbrmm.Buffer(4096)
            assert st.get_statistics() == stats(4096, 1, 4096, 1, 4096, 1)
            del b
        assert st.get_statistics() == stats(1 << 20, 1, (1 << 20) + 4096, 2, (1 << 20) + 4096, 2)
        del a
    assert nbrmm.mr.get_current_device_resource() is cuda
    assert adaptor.allocation_counts.current_bytes == 0


@pytest.mark.gpu
def test_gpu_statistics_and_profiler_on_a_pool():
    pool = nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource(), initial_pool_size=POOL_SIZE)
    nbrmm.mr.set_current_device_resource(pool)
    records = ProfilerRecords()
    adaptor = st.enable_statistics()
    assert adaptor.upstream_mr is pool

    @st.profiler(records=records, name="gpu step")
    def step():
        bufs = [nbrmm.Buffer(1000 * (i + 1)) for i in range(4)]
        nbrmm.Stream().synchronize()
        del bufs

    step()
    step()
    assert records.records["gpu step"] == ProfilerRecords.MemoryRecord(2, 20000, 10000)
    assert st.disable_statistics() == stats(0, 0, 10000, 4, 20000, 8)
    assert nbrmm.mr.get_current_device_resource() is pool


# --------------------------------------------------------------------------------------
# C++ sets the current resource (the separate test extension, through librmm's map)
# --------------------------------------------------------------------------------------


def test_statistics_follow_a_resource_that_cpp_set():
    from extensions import cpp_ext

    cpp_ext.set_current_owned(ON_GPU)  # C++'s own statistics adaptor becomes current
    assert isinstance(nbrmm.mr.get_current_device_resource(), nbrmm.mr.StatisticsResourceAdaptor)
    assert st.get_statistics() == stats(0, 0, 0, 0, 0, 0)
    a = nbrmm.Buffer(100)  # from Python
    b = cpp_ext.allocate_from_current(200)  # from C++
    assert st.get_statistics() == stats(300, 2, 300, 2, 300, 2)
    assert cpp_ext.owned_counts() == (300, 2, 2)

    # Python's push and pop act on C++'s adaptor.
    st.push_statistics()
    assert cpp_ext.owned_counts() == (0, 0, 0)
    c = cpp_ext.allocate_from_current(50)
    assert st.pop_statistics() == stats(50, 1, 50, 1, 50, 1)
    assert cpp_ext.owned_counts() == (350, 3, 3)

    # A block over it pushes a level; it ends cleanly although each read of the map
    # gives a new Python object for the C++ resource.
    with st.statistics() as level:
        assert level == nbrmm.mr.get_current_device_resource()
        d = cpp_ext.allocate_from_current(8)
        assert cpp_ext.owned_counts() == (8, 1, 1)
        del d
    assert cpp_ext.current_is_owned()
    del a, b, c
    assert st.get_statistics() == stats(0, 0, 358, 4, 358, 4)


def test_statistics_block_counts_cpp_allocations(heap):
    from extensions import cpp_ext

    with st.statistics() as adaptor:
        assert not cpp_ext.current_is_owned()
        buf = cpp_ext.allocate_from_current(1000)
        assert buf.mr is adaptor
        assert st.get_statistics() == stats(1000, 1, 1000, 1, 1000, 1)
        del buf
    assert nbrmm.mr.get_current_device_resource() is heap.mr
    assert adaptor.allocation_counts == stats(0, 0, 1000, 1, 1000, 1)


def test_statistics_block_detects_cpp_replacing_the_current_resource(heap):
    from extensions import cpp_ext

    with pytest.raises(ValueError, match="changed"):
        with st.statistics():
            cpp_ext.set_current_owned(ON_GPU)
    assert cpp_ext.current_is_owned()  # what C++ set is left in place


@pytest.mark.parametrize("name", ["nbrmm.statistics", "nbrmm.logger", "nbrmm.plot"])
def test_modules_list_documented_names(name):
    import importlib
    import inspect

    module = importlib.import_module(name)
    assert module.__doc__
    assert module.__all__ == sorted(module.__all__)
    for attr in module.__all__:
        obj = getattr(module, attr)
        if inspect.isclass(obj) or callable(obj):
            assert obj.__doc__, f"{name}.{attr} has no docstring"
