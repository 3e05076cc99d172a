"""Allocation logging on the current device resource, and librmm's debug logger."""

import os
import threading
from collections import Counter

import pytest

import nbrmm
import nbrmm.mr
from helpers import POOL_SIZE, HostHeap
from nbrmm.plot import memory_timeline, read_log


@pytest.fixture
def heap():
    """A host heap whose resource is the current device resource during the test."""
    h = HostHeap()
    h.mr = h.resource()
    nbrmm.mr.set_current_device_resource(h.mr)
    return h


def heap_calls(heap):
    """The heap's calls as the log names them (it says "free" for "deallocate")."""
    return [("free" if a == "deallocate" else a, n, p) for a, n, p in heap.calls]


def device():
    return nbrmm.get_current_device()


def expected_path(tmp_path, name="alloc.csv"):
    stem, ext = os.path.splitext(name)
    return str(tmp_path / f"{stem}.dev{device()}{ext}")


def test_exported_like_rmm():
    for name in ("enable_logging", "disable_logging", "get_log_filenames"):
        assert getattr(nbrmm, name) is getattr(nbrmm.mr, name)
    for name in (
        "flush_logger",
        "get_flush_level",
        "get_logging_level",
        "set_flush_level",
        "set_logging_level",
        "should_log",
        "level_enum",
    ):
        assert name in nbrmm.__all__


def test_enable_wraps_the_current_resource_and_disable_restores_it(heap, tmp_path):
    assert nbrmm.get_log_filenames() == {device(): None}
    nbrmm.enable_logging(tmp_path / "alloc.csv")
    adaptor = nbrmm.mr.get_current_device_resource()
    assert isinstance(adaptor, nbrmm.mr.LoggingResourceAdaptor)
    assert adaptor.upstream_mr is heap.mr
    assert nbrmm.get_log_filenames() == {device(): expected_path(tmp_path)}
    # Enabling again changes nothing (the same adaptor, the same file).
    nbrmm.enable_logging(tmp_path / "other.csv")
    assert nbrmm.mr.get_current_device_resource() is adaptor
    assert not (tmp_path / f"other.dev{device()}.csv").exists()

    nbrmm.disable_logging()
    assert nbrmm.mr.get_current_device_resource() is heap.mr
    assert nbrmm.get_log_filenames() == {device(): None}
    nbrmm.disable_logging()  # nothing to do
    assert nbrmm.mr.get_current_device_resource() is heap.mr


def test_log_has_every_allocation_and_free_with_sizes_and_pointers(heap, tmp_path):
    nbrmm.enable_logging(str(tmp_path / "alloc.csv"))
    mr = nbrmm.mr.get_current_device_resource()
    bufs = [nbrmm.Buffer(n) for n in (100, 2000, 30000, 0, 7)]
    del bufs[1]
    p = mr.allocate(4096)
    bufs.append(nbrmm.Buffer(123, mr=mr))
    mr.deallocate(p, 4096)
    del bufs
    nbrmm.disable_logging()

    events = read_log(expected_path(tmp_path))
    logged = [(e.action, e.size, e.pointer) for e in events]
    assert logged == heap_calls(heap)
    assert [e.action for e in events].count("allocate") == 6  # Buffer(0) allocates nothing
    assert all(e.thread == events[0].thread for e in events)
    times = [e.time for e in events]
    assert times[0] == 0.0 and times == sorted(times)

    timeline = memory_timeline(events)
    assert timeline.allocations == 6 and timeline.frees == 6
    assert timeline.bytes_in_use[-1] == 0
    assert timeline.peak_bytes == 100 + 30000 + 7 + 4096 + 123
    assert timeline.unmatched_frees == 0 and timeline.failures == []


def test_log_records_failed_allocations(tmp_path):
    def no_memory(nbytes, stream):
        raise MemoryError("no memory")

    nbrmm.mr.set_current_device_resource(
        nbrmm.mr.CallbackMemoryResource(no_memory, lambda p, n, s: None)
    )
    nbrmm.enable_logging(tmp_path / "alloc.csv")
    with pytest.raises(MemoryError):
        nbrmm.Buffer(1 << 40)
    nbrmm.disable_logging()
    (event,) = read_log(expected_path(tmp_path))
    assert (event.action, event.pointer, event.size) == ("allocate failure", 0, 1 << 40)
    assert memory_timeline([event]).failures == [(0.0, 1 << 40)]


def test_log_from_threads_is_complete(heap, tmp_path):
    nbrmm.enable_logging(tmp_path / "alloc.csv")
    threads, rounds = 6, 100
    barrier = threading.Barrier(threads)

    def work(i):
        barrier.wait()
        for k in range(rounds):
            buf = nbrmm.Buffer(16 * (i + 1) + k)
            del buf

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    nbrmm.disable_logging()
    events = read_log(expected_path(tmp_path))
    assert len(events) == 2 * threads * rounds
    assert Counter((e.action, e.size, e.pointer) for e in events) == Counter(heap_calls(heap))
    assert len({e.thread for e in events}) == threads
    assert memory_timeline(events).bytes_in_use[-1] == 0


def test_log_file_name_from_environment(heap, tmp_path, monkeypatch):
    monkeypatch.delenv("RMM_LOG_FILE", raising=False)
    with pytest.raises(ValueError, match="RMM_LOG_FILE"):
        nbrmm.enable_logging()
    assert nbrmm.mr.get_current_device_resource() is heap.mr
    monkeypatch.setenv("RMM_LOG_FILE", str(tmp_path / "env.csv"))
    nbrmm.enable_logging()
    assert nbrmm.get_log_filenames() == {device(): expected_path(tmp_path, "env.csv")}
    nbrmm.disable_logging()
    assert nbrmm.mr.get_current_device_resource() is heap.mr


@pytest.mark.parametrize(("name", "message"), [
    ("\ud800.csv", r"^log_file_name: '.*\\ud800\.dev-?\d+\.csv' is not UTF-8 text"),
    ("a\x00b.csv", "^log_file_name: a file name cannot hold a NUL$"),
])
def test_log_file_names_that_cannot_be_written_are_refused(heap, tmp_path, name, message):
    """A name with lone surrogates (undecodable bytes, as os.listdir gives them) or a NUL
    (which would cut the name short) is refused, not written under another name."""
    with pytest.raises(ValueError, match=message):
        nbrmm.mr.LoggingResourceAdaptor(heap.mr, log_file_name=str(tmp_path / name))
    assert list(tmp_path.iterdir()) == []


def test_log_file_name_from_an_undecodable_environment(heap, tmp_path, monkeypatch):
    monkeypatch.setenv("RMM_LOG_FILE", os.fsdecode(os.fsencode(str(tmp_path)) + b"/x\xff.csv"))
    with pytest.raises(ValueError, match=r"^log_file_name \(from RMM_LOG_FILE\): .* is not UTF-8"):
        nbrmm.mr.LoggingResourceAdaptor(heap.mr)


def test_a_spoofed_class_is_no_level():
    class Spoof:
        __class__ = property(lambda self: nbrmm.level_enum)  # type: ignore[assignment]

    for call in (nbrmm.should_log, nbrmm.set_logging_level, nbrmm.set_flush_level):
        with pytest.raises(TypeError, match="^level: must be an instance of level_enum, got "):
            call(Spoof())
    with pytest.raises(TypeError, match="^flags:"):
        nbrmm.Stream(flags=Spoof())


def test_enable_failure_changes_nothing(heap, tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError):
        nbrmm.enable_logging(tmp_path / "a-file" / "alloc.csv")
    assert nbrmm.mr.get_current_device_resource() is heap.mr
    with pytest.raises(TypeError, match="log_file_name"):
        nbrmm.enable_logging(42)
    assert nbrmm.mr.get_current_device_resource() is heap.mr


def test_enable_with_mr(heap, tmp_path):
    other = HostHeap()
    other_mr = other.resource()
    nbrmm.enable_logging(tmp_path / "alloc.csv", mr=other_mr)
    adaptor = nbrmm.mr.get_current_device_resource()
    assert adaptor.upstream_mr is other_mr
    buf = nbrmm.Buffer(64)
    assert other.bytes_in_use == 64 and heap.bytes_in_use == 0
    del buf
    nbrmm.disable_logging()
    assert nbrmm.mr.get_current_device_resource() is other_mr
    assert [(e.action, e.size) for e in read_log(expected_path(tmp_path))] == [
        ("allocate", 64),
        ("free", 64),
    ]
    # An adaptor given as mr is made current as it is.
    mine = nbrmm.mr.LoggingResourceAdaptor(heap.mr, tmp_path / "mine.csv")
    nbrmm.enable_logging(mr=mine)
    assert nbrmm.mr.get_current_device_resource() is mine
    with pytest.raises(TypeError, match="mr"):
        nbrmm.enable_logging(tmp_path / "x.csv", mr="cuda")


def test_statistics_over_logging_restore_in_order(heap, tmp_path):
    import nbrmm.statistics as st

    nbrmm.enable_logging(tmp_path / "alloc.csv")
    logging_mr = nbrmm.mr.get_current_device_resource()
    stats_mr = st.enable_statistics()
    assert stats_mr.upstream_mr is logging_mr
    buf = nbrmm.Buffer(1000)
    assert st.get_statistics().current_bytes == 1000
    del buf
    st.disable_statistics()
    assert nbrmm.mr.get_current_device_resource() is logging_mr
    nbrmm.disable_logging()
    assert nbrmm.mr.get_current_device_resource() is heap.mr
    assert [e.size for e in read_log(expected_path(tmp_path))] == [1000, 1000]


# --------------------------------------------------------------------------------------
# librmm's debug logger
# --------------------------------------------------------------------------------------


def test_level_enum_is_rmm_like():
    names = [level.name for level in nbrmm.level_enum]
    assert names == ["trace", "debug", "info", "warn", "error", "critical", "off", "n_levels"]
    assert nbrmm.level_enum.trace < nbrmm.level_enum.warn < nbrmm.level_enum.off
    assert int(nbrmm.level_enum.info) == 2


def test_logging_level_round_trip():
    level, flush = nbrmm.get_logging_level(), nbrmm.get_flush_level()
    try:
        for new in nbrmm.level_enum:
            nbrmm.set_logging_level(new)
            assert nbrmm.get_logging_level() is new
            for msg in nbrmm.level_enum:
                if msg is not nbrmm.level_enum.off:
                    assert nbrmm.should_log(msg) == (msg >= new)
        nbrmm.set_flush_level(nbrmm.level_enum.warn)
        assert nbrmm.get_flush_level() is nbrmm.level_enum.warn
        nbrmm.set_flush_level(nbrmm.level_enum.trace)
        assert nbrmm.get_flush_level() is nbrmm.level_enum.trace
        nbrmm.flush_logger()
        with pytest.raises(TypeError):
            nbrmm.set_logging_level("info")
        with pytest.raises(TypeError):
            nbrmm.set_logging_level(99)
    finally:
        nbrmm.set_logging_level(level)
        nbrmm.set_flush_level(flush)
    assert nbrmm.get_logging_level() is level


# --------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_logging_on_cuda_memory_resource(tmp_path):
    cuda = nbrmm.mr.CudaMemoryResource()
    nbrmm.mr.set_current_device_resource(cuda)
    nbrmm.enable_logging(tmp_path / "gpu.csv")
    sizes = [1 << 20, 4096, 3 << 16]
    bufs = [nbrmm.Buffer(n) for n in sizes]
    pointers = [b.ptr for b in bufs]
    del bufs
    nbrmm.disable_logging()
    assert nbrmm.mr.get_current_device_resource() is cuda
    events = read_log(expected_path(tmp_path, "gpu.csv"))
    allocs = [(e.size, e.pointer) for e in events if e.action == "allocate"]
    assert allocs == list(zip(sizes, pointers))
    assert sorted(e.pointer for e in events if e.action == "free") == sorted(pointers)
    assert memory_timeline(events).peak_bytes == sum(sizes)


@pytest.mark.gpu
def test_gpu_logging_on_a_pool(tmp_path):
    pool = nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource(), initial_pool_size=POOL_SIZE)
    nbrmm.mr.set_current_device_resource(pool)
    nbrmm.enable_logging(tmp_path / "pool.csv")
    stream = nbrmm.Stream()
    for n in (1000, 20000, 300):
        buf = nbrmm.Buffer(n, stream=stream)
        del buf
    stream.synchronize()
    nbrmm.disable_logging()
    assert nbrmm.mr.get_current_device_resource() is pool
    events = read_log(expected_path(tmp_path, "pool.csv"))
    assert [(e.action, e.size) for e in events] == [
        (action, n) for n in (1000, 20000, 300) for action in ("allocate", "free")
    ]
    assert all(e.pointer != 0 for e in events)
    assert len({e.stream for e in events}) == 1 and events[0].stream not in ("", "0")


# --------------------------------------------------------------------------------------
# C++ sets the current resource (the separate test extension, through librmm's map)
# --------------------------------------------------------------------------------------


def test_logging_wraps_a_resource_that_cpp_set(tmp_path):
    from extensions import cpp_ext

    cpp_ext.set_current_owned(nbrmm.get_device_count() > 0)
    nbrmm.enable_logging(tmp_path / "cpp.csv")
    adaptor = nbrmm.mr.get_current_device_resource()
    assert isinstance(adaptor, nbrmm.mr.LoggingResourceAdaptor)
    wrapped = adaptor.upstream_mr
    assert isinstance(wrapped, nbrmm.mr.StatisticsResourceAdaptor)
    buf = cpp_ext.allocate_from_current(4096)  # C++ allocates through the logging adaptor
    ptr = buf.ptr
    assert cpp_ext.owned_counts() == (4096, 1, 1)  # ... and C++'s own adaptor below it
    del buf
    nbrmm.disable_logging()
    # C++'s own adaptor is back in the map exactly as C++ made it.
    assert cpp_ext.current_is_owned()
    assert nbrmm.mr.get_current_device_resource() == wrapped
    cpp_ext.allocate_from_current(1)  # C++'s adaptor serves again, unlogged
    assert cpp_ext.owned_counts() == (0, 0, 2)
    events = read_log(expected_path(tmp_path, "cpp.csv"))
    assert [(e.action, e.size, e.pointer) for e in events] == [
        ("allocate", 4096, ptr),
        ("free", 4096, ptr),
    ]
