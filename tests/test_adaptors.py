"""Adaptors over a host-memory upstream: what each one adds, tested for real on the CPU."""

import csv
import gc
import os
import threading
import time

import pytest

import nbrmm
import nbrmm.mr
from extensions import testing
from helpers import POOL_SIZE, HostHeap, read_host, write_host
from nbrmm.statistics import Statistics


def stats(cur_b, cur_n, peak_b, peak_n, tot_b, tot_n):
    return Statistics(cur_b, cur_n, peak_b, peak_n, tot_b, tot_n)


# --------------------------------------------------------------------------------------
# StatisticsResourceAdaptor
# --------------------------------------------------------------------------------------


def test_statistics_counts_exactly():
    heap = HostHeap()
    mr = nbrmm.mr.StatisticsResourceAdaptor(heap.resource())
    assert mr.allocation_counts == stats(0, 0, 0, 0, 0, 0)
    a = mr.allocate(100)
    b = mr.allocate(300)
    assert mr.allocation_counts == stats(400, 2, 400, 2, 400, 2)
    mr.deallocate(a, 100)
    assert mr.allocation_counts == stats(300, 1, 400, 2, 400, 2)
    c = mr.allocate(50)
    assert mr.allocation_counts == stats(350, 2, 400, 2, 450, 3)
    mr.deallocate(b, 300)
    mr.deallocate(c, 50)
    assert mr.allocation_counts == stats(0, 0, 400, 2, 450, 3)
    assert heap.bytes_in_use == 0
    assert isinstance(mr.allocation_counts, Statistics)


def test_statistics_push_and_pop_frames():
    heap = HostHeap()
    mr = nbrmm.mr.StatisticsResourceAdaptor(heap.resource())
    outer = mr.allocate(1000)
    before = mr.push_counters()
    assert before == stats(1000, 1, 1000, 1, 1000, 1)
    assert mr.allocation_counts == stats(0, 0, 0, 0, 0, 0)
    inner = mr.allocate(24)
    assert mr.allocation_counts == stats(24, 1, 24, 1, 24, 1)
    mr.push_counters()
    tiny = mr.allocate(8)
    mr.deallocate(tiny, 8)
    assert mr.pop_counters() == stats(0, 0, 8, 1, 8, 1)
    # The popped frame's counts were added to this one, its peak on top of the current.
    assert mr.allocation_counts == stats(24, 1, 32, 2, 32, 2)
    popped = mr.pop_counters()
    assert popped == stats(24, 1, 32, 2, 32, 2)
    assert mr.allocation_counts == stats(1024, 2, 1032, 3, 1032, 3)
    mr.deallocate(inner, 24)
    mr.deallocate(outer, 1000)
    assert mr.allocation_counts == stats(0, 0, 1032, 3, 1032, 3)
    with pytest.raises(IndexError):
        mr.pop_counters()
    assert mr.allocation_counts == stats(0, 0, 1032, 3, 1032, 3)


def test_statistics_counts_buffers_and_failures_do_not_count():
    heap = HostHeap()
    mr = nbrmm.mr.StatisticsResourceAdaptor(heap.resource())
    buf = nbrmm.Buffer(64, mr=mr)
    assert mr.allocation_counts.current_bytes == 64
    del buf
    assert mr.allocation_counts.current_bytes == 0

    def no_memory(n, s):
        raise MemoryError("host heap exhausted")

    failing = nbrmm.mr.StatisticsResourceAdaptor(
        nbrmm.mr.CallbackMemoryResource(no_memory, lambda p, n, s: None)
    )
    with pytest.raises(MemoryError, match="exhausted"):
        failing.allocate(10)
    assert failing.allocation_counts == stats(0, 0, 0, 0, 0, 0)


def test_statistics_adaptors_nest():
    heap = HostHeap()
    inner = nbrmm.mr.StatisticsResourceAdaptor(heap.resource())
    outer = nbrmm.mr.StatisticsResourceAdaptor(inner)
    ptr = outer.allocate(128)
    assert outer.allocation_counts.current_bytes == 128
    assert inner.allocation_counts.current_bytes == 128
    with pytest.raises(ValueError, match="another resource"):
        inner.deallocate(ptr, 128)  # a pointer goes back to the resource that allocated it
    assert inner.allocation_counts.current_bytes == 128
    outer.deallocate(ptr, 128)
    assert inner.allocation_counts.current_bytes == 0
    assert outer.allocation_counts.current_bytes == 0


# --------------------------------------------------------------------------------------
# LoggingResourceAdaptor
# --------------------------------------------------------------------------------------


def read_log(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def dev_name(path, ext=".csv"):
    base = str(path)[: -len(ext)] if ext else str(path)
    return os.path.abspath(f"{base}.dev{nbrmm.get_current_device()}{ext}")


def test_logging_writes_csv_rows(tmp_path):
    heap = HostHeap()
    mr = nbrmm.mr.LoggingResourceAdaptor(heap.resource(), tmp_path / "alloc.csv")
    assert mr.get_file_name() == dev_name(tmp_path / "alloc.csv")
    a = mr.allocate(100)
    b = mr.allocate(7, nbrmm.PER_THREAD_DEFAULT_STREAM)
    mr.deallocate(a, 100)
    mr.deallocate(b, 7, nbrmm.PER_THREAD_DEFAULT_STREAM)
    mr.flush()
    rows = read_log(mr.get_file_name())
    assert rows[0] == ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]
    body = [(r[2], int(r[3], 16), int(r[4]), r[5]) for r in rows[1:]]
    assert body == [
        ("allocate", a, 100, "0"),
        ("allocate", b, 7, "0x2"),
        ("free", a, 100, "0"),
        ("free", b, 7, "0x2"),
    ]
    assert all(len(r) == 6 for r in rows)


def test_logging_records_failures(tmp_path):
    def no_memory(n, s):
        raise MemoryError("nothing left")

    up = nbrmm.mr.CallbackMemoryResource(no_memory, lambda p, n, s: None)
    mr = nbrmm.mr.LoggingResourceAdaptor(up, str(tmp_path / "fail.log"))
    with pytest.raises(MemoryError, match="nothing left"):
        mr.allocate(12345)
    mr.flush()
    rows = read_log(mr.get_file_name())
    assert [r[2:5] for r in rows[1:]] == [["allocate failure", rows[1][3], "12345"]]
    assert rows[1][3] in ("(nil)", "0x0")  # the null pointer, as printf's %p writes it


def test_logging_file_name_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RMM_LOG_FILE", str(tmp_path / "env.txt"))
    mr = nbrmm.mr.LoggingResourceAdaptor(HostHeap().resource())
    assert mr.get_file_name() == dev_name(tmp_path / "env.txt", ".txt")
    assert os.path.exists(mr.get_file_name())
    monkeypatch.delenv("RMM_LOG_FILE")
    with pytest.raises(ValueError, match="RMM_LOG_FILE"):
        nbrmm.mr.LoggingResourceAdaptor(HostHeap().resource())


def test_logging_relative_name_without_extension(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mr = nbrmm.mr.LoggingResourceAdaptor(HostHeap().resource(), "plain")
    assert mr.get_file_name() == str(tmp_path / f"plain.dev{nbrmm.get_current_device()}")


def test_logging_bad_arguments(tmp_path):
    heap = HostHeap()
    with pytest.raises(TypeError, match="log_file_name"):
        nbrmm.mr.LoggingResourceAdaptor(heap.resource(), 42)
    with pytest.raises(TypeError, match="log_file_name"):
        nbrmm.mr.LoggingResourceAdaptor(heap.resource(), b"bytes.csv")
    with pytest.raises(ValueError, match="log_file_name"):
        nbrmm.mr.LoggingResourceAdaptor(heap.resource(), "")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(OSError, match="log_file_name"):
        nbrmm.mr.LoggingResourceAdaptor(heap.resource(), tmp_path / "a_file" / "x.csv")
    with pytest.raises(TypeError, match="upstream_mr"):
        nbrmm.mr.LoggingResourceAdaptor("mr", tmp_path / "x.csv")
    assert heap.calls == []


def test_logging_truncates_an_existing_file(tmp_path):
    target = tmp_path / f"old.dev{nbrmm.get_current_device()}.csv"
    target.write_text("stale line\n" * 10)
    mr = nbrmm.mr.LoggingResourceAdaptor(HostHeap().resource(), tmp_path / "old.csv")
    mr.flush()
    assert read_log(mr.get_file_name()) == [
        ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]
    ]


def test_logging_data_passes_through(tmp_path):
    heap = HostHeap()
    mr = nbrmm.mr.LoggingResourceAdaptor(heap.resource(), tmp_path / "d.csv")
    ptr = mr.allocate(16)
    write_host(ptr, b"0123456789abcdef")
    assert read_host(ptr, 16) == b"0123456789abcdef"
    assert heap.live == {ptr: 16}
    mr.deallocate(ptr, 16)
    assert heap.bytes_in_use == 0


# --------------------------------------------------------------------------------------
# LimitingResourceAdaptor
# --------------------------------------------------------------------------------------


def test_limiting_refuses_over_the_limit_and_changes_nothing():
    heap = HostHeap()
    mr = nbrmm.mr.LimitingResourceAdaptor(heap.resource(), 1024)
    assert mr.get_allocation_limit() == 1024
    a = mr.allocate(500)
    assert mr.get_allocated_bytes() == 512  # counted in multiples of 256
    calls = len(heap.calls)
    with pytest.raises(nbrmm.OutOfMemory):
        mr.allocate(600)  # 512 + 768 > 1024
    assert mr.get_allocated_bytes() == 512
    assert len(heap.calls) == calls  # the upstream was not asked
    b = mr.allocate(512)  # exactly up to the limit
    assert mr.get_allocated_bytes() == 1024
    with pytest.raises(MemoryError):
        mr.allocate(1)
    mr.deallocate(a, 500)
    assert mr.get_allocated_bytes() == 512
    c = mr.allocate(300)  # usable again after a free
    assert heap.live[c] == 300
    mr.deallocate(b, 512)
    mr.deallocate(c, 300)
    assert mr.get_allocated_bytes() == 0
    assert heap.bytes_in_use == 0


def test_limiting_undoes_its_count_when_the_upstream_fails():
    def no_memory(n, s):
        raise MemoryError("upstream is empty")

    mr = nbrmm.mr.LimitingResourceAdaptor(
        nbrmm.mr.CallbackMemoryResource(no_memory, lambda p, n, s: None), "1MiB"
    )
    assert mr.get_allocation_limit() == 1 << 20
    with pytest.raises(MemoryError, match="upstream is empty"):
        mr.allocate(100)
    assert mr.get_allocated_bytes() == 0


def test_limiting_bad_arguments():
    with pytest.raises(ValueError, match="allocation_limit"):
        nbrmm.mr.LimitingResourceAdaptor(HostHeap().resource(), -1)
    with pytest.raises(TypeError, match="allocation_limit"):
        nbrmm.mr.LimitingResourceAdaptor(HostHeap().resource(), None)
    with pytest.raises(TypeError, match="upstream_mr"):
        nbrmm.mr.LimitingResourceAdaptor(1024, 1024)


# --------------------------------------------------------------------------------------
# TrackingResourceAdaptor
# --------------------------------------------------------------------------------------


def test_tracking_records_outstanding_allocations():
    heap = HostHeap()
    mr = nbrmm.mr.TrackingResourceAdaptor(heap.resource())
    assert mr.get_allocated_bytes() == 0
    a = mr.allocate(100)
    b = mr.allocate(2000)
    assert mr.get_allocated_bytes() == 2100
    report = mr.get_outstanding_allocations_str()
    assert f"{a:#x}: 100 B" in report and f"{b:#x}: 2000 B" in report
    assert "callstack" not in report
    mr.log_outstanding_allocations()
    mr.deallocate(a, 100)
    assert mr.get_allocated_bytes() == 2000
    assert f"{a:#x}" not in mr.get_outstanding_allocations_str()
    mr.deallocate(b, 2000)
    assert mr.get_allocated_bytes() == 0
    assert heap.bytes_in_use == 0


def test_tracking_captures_stacks_on_request():
    mr = nbrmm.mr.TrackingResourceAdaptor(HostHeap().resource(), capture_stacks=True)
    p = mr.allocate(10)
    assert "callstack" in mr.get_outstanding_allocations_str()
    mr.deallocate(p, 10)
    with pytest.raises(TypeError, match="capture_stacks"):
        nbrmm.mr.TrackingResourceAdaptor(HostHeap().resource(), capture_stacks="yes")


# --------------------------------------------------------------------------------------
# FailureCallbackResourceAdaptor (over a limiting adaptor: its refusals are out-of-memory)
# --------------------------------------------------------------------------------------


def test_failure_callback_retries_while_it_returns_true():
    heap = HostHeap()
    limit = nbrmm.mr.LimitingResourceAdaptor(heap.resource(), 1024)
    held = [limit.allocate(1024)]
    calls = []

    def make_room(nbytes):
        calls.append(nbytes)
        if held:
            limit.deallocate(held.pop(), 1024)  # free memory, then ask for a retry
            return True
        return False

    mr = nbrmm.mr.FailureCallbackResourceAdaptor(limit, make_room)
    assert mr.callback is make_room
    p = mr.allocate(512)
    assert calls == [512]  # one failure, one retry that succeeded
    assert heap.live[p] == 512
    with pytest.raises(nbrmm.OutOfMemory):
        mr.allocate(1024)
    assert calls == [512, 1024]  # called with the size; False lets the error through
    mr.deallocate(p, 512)
    assert limit.get_allocated_bytes() == 0


def test_failure_callback_is_called_again_for_each_failed_retry():
    limit = nbrmm.mr.LimitingResourceAdaptor(HostHeap().resource(), 256)
    calls = []

    def give_up_after_three(nbytes):
        calls.append(nbytes)
        return len(calls) < 3

    mr = nbrmm.mr.FailureCallbackResourceAdaptor(limit, give_up_after_three)
    with pytest.raises(MemoryError):
        mr.allocate(1000)
    assert calls == [1000, 1000, 1000]


def test_failure_callback_exceptions_reach_the_caller():
    limit = nbrmm.mr.LimitingResourceAdaptor(HostHeap().resource(), 0)

    def broken(nbytes):
        raise KeyError(f"spill failed for {nbytes}")

    mr = nbrmm.mr.FailureCallbackResourceAdaptor(limit, broken)
    with pytest.raises(KeyError, match="spill failed for 64"):
        mr.allocate(64)
    with pytest.raises(KeyError):
        nbrmm.Buffer(64, mr=mr)


def test_failure_callback_result_is_taken_as_truth_value():
    limit = nbrmm.mr.LimitingResourceAdaptor(HostHeap().resource(), 256)
    answers = [1, [], None]  # truthy: retry; then falsy: give up
    mr = nbrmm.mr.FailureCallbackResourceAdaptor(limit, lambda n: answers.pop(0))
    with pytest.raises(MemoryError):
        mr.allocate(512)
    assert answers == [None]


def test_failure_callback_not_called_for_other_errors():
    calls = []

    def boom(n, s):
        raise RuntimeError("not an out-of-memory error")

    up = nbrmm.mr.CallbackMemoryResource(boom, lambda p, n, s: None)
    mr = nbrmm.mr.FailureCallbackResourceAdaptor(up, lambda n: calls.append(n) or True)
    with pytest.raises(RuntimeError, match="not an out-of-memory"):
        mr.allocate(10)
    assert calls == []


def test_failure_callback_must_be_callable():
    with pytest.raises(TypeError, match="callback"):
        nbrmm.mr.FailureCallbackResourceAdaptor(HostHeap().resource(), "retry")
    with pytest.raises(TypeError, match="callback"):
        nbrmm.mr.FailureCallbackResourceAdaptor(HostHeap().resource(), None)


# --------------------------------------------------------------------------------------
# AlignedResourceAdaptor
# --------------------------------------------------------------------------------------


def test_aligned_returns_aligned_pointers():
    heap = HostHeap()
    mr = nbrmm.mr.AlignedResourceAdaptor(heap.resource(), 4096)
    assert (mr.alignment, mr.alignment_threshold) == (4096, 0)
    ptrs = []
    for n in (1, 100, 5000, 4096):
        p = mr.allocate(n)
        assert p % 4096 == 0
        write_host(p, b"a" * n)
        ptrs.append((p, n))
    # Each block was over-allocated by alignment - 256 bytes, which is enough because the
    # upstream (like every librmm resource) returns 256-byte aligned memory.
    assert all(q % 256 == 0 for q in heap.live)
    assert sorted(heap.live.values()) == sorted(
        (n + 4095) // 4096 * 4096 + 4096 - 256 for n in (1, 100, 5000, 4096)
    )
    for p, n in ptrs:
        mr.deallocate(p, n)
    assert heap.bytes_in_use == 0


def test_aligned_threshold_lets_small_allocations_through():
    heap = HostHeap()
    mr = nbrmm.mr.AlignedResourceAdaptor(heap.resource(), alignment=1 << 16, alignment_threshold="1KiB")
    small = mr.allocate(100)
    assert heap.live[small] == 100  # passed through unchanged
    big = mr.allocate(2048)
    assert big % (1 << 16) == 0 and big not in heap.live
    mr.deallocate(small, 100)
    mr.deallocate(big, 2048)
    assert heap.bytes_in_use == 0


def test_aligned_small_alignment_means_256():
    assert nbrmm.mr.AlignedResourceAdaptor(HostHeap().resource(), 64).alignment == 256
    assert nbrmm.mr.AlignedResourceAdaptor(HostHeap().resource()).alignment == 256


@pytest.mark.parametrize(
    ("kwargs", "exc", "param"),
    [
        ({"alignment": 100}, ValueError, "alignment"),
        ({"alignment": 0}, ValueError, "alignment"),
        ({"alignment": 1 << 50}, ValueError, "alignment"),
        ({"alignment": -4096}, ValueError, "alignment"),
        ({"alignment_threshold": -1}, ValueError, "alignment_threshold"),
        ({"alignment": 4096.0}, TypeError, "alignment"),
    ],
)
def test_aligned_bad_arguments(kwargs, exc, param):
    with pytest.raises(exc, match=param):
        nbrmm.mr.AlignedResourceAdaptor(HostHeap().resource(), **kwargs)


# --------------------------------------------------------------------------------------
# ThreadSafeResourceAdaptor
# --------------------------------------------------------------------------------------


class ReentryDetector:
    """A host upstream that notices when two threads are inside it at once."""

    def __init__(self):
        self.heap = HostHeap()
        self.inside = 0
        self.most_inside = 0

    def allocate(self, nbytes, stream):
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        time.sleep(0.0005)  # lets other threads run
        try:
            return self.heap.allocate(nbytes, stream)
        finally:
            self.inside -= 1

    def deallocate(self, ptr, nbytes, stream):
        self.heap.deallocate(ptr, nbytes, stream)


def hammer(mr, threads=6, rounds=30):
    def work():
        for i in range(rounds):
            p = mr.allocate(64 + i)
            mr.deallocate(p, 64 + i)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def test_thread_safe_adaptor_serializes_the_upstream():
    bare = ReentryDetector()
    hammer(nbrmm.mr.CallbackMemoryResource(bare.allocate, bare.deallocate))
    assert bare.most_inside > 1  # without the adaptor, threads overlap in the upstream

    guarded = ReentryDetector()
    up = nbrmm.mr.CallbackMemoryResource(guarded.allocate, guarded.deallocate)
    hammer(nbrmm.mr.ThreadSafeResourceAdaptor(up))
    assert guarded.most_inside == 1
    assert guarded.heap.bytes_in_use == 0
    assert len(guarded.heap.calls) == 2 * 6 * 30


# --------------------------------------------------------------------------------------
# PrefetchResourceAdaptor
# --------------------------------------------------------------------------------------


def test_prefetch_passes_allocations_through():
    heap = HostHeap()
    mr = nbrmm.mr.PrefetchResourceAdaptor(heap.resource())
    p = mr.allocate(300)
    assert heap.live == {p: 300}
    mr.deallocate(p, 300)
    assert heap.bytes_in_use == 0


# --------------------------------------------------------------------------------------
# Every adaptor: upstream handling and arguments
# --------------------------------------------------------------------------------------


ADAPTORS = {
    "statistics": lambda up, tmp: nbrmm.mr.StatisticsResourceAdaptor(up),
    "logging": lambda up, tmp: nbrmm.mr.LoggingResourceAdaptor(up, tmp / "log.csv"),
    "limiting": lambda up, tmp: nbrmm.mr.LimitingResourceAdaptor(up, 1 << 20),
    "tracking": lambda up, tmp: nbrmm.mr.TrackingResourceAdaptor(up),
    "failure_callback": lambda up, tmp: nbrmm.mr.FailureCallbackResourceAdaptor(up, lambda n: False),
    "prefetch": lambda up, tmp: nbrmm.mr.PrefetchResourceAdaptor(up),
    "aligned": lambda up, tmp: nbrmm.mr.AlignedResourceAdaptor(up, 4096),
    "thread_safe": lambda up, tmp: nbrmm.mr.ThreadSafeResourceAdaptor(up),
    "pool": lambda up, tmp: nbrmm.mr.PoolMemoryResource(up, 1 << 16),
    "fixed_size": lambda up, tmp: nbrmm.mr.FixedSizeMemoryResource(up, 1024, 8),
    "binning": lambda up, tmp: nbrmm.mr.BinningMemoryResource(up, 8, 9),
}


@pytest.mark.parametrize("name", sorted(ADAPTORS))
def test_adaptor_keeps_the_very_upstream_object(name, tmp_path):
    heap = HostHeap()
    up = heap.resource()
    mr = ADAPTORS[name](up, tmp_path)
    assert isinstance(mr, nbrmm.mr.UpstreamResourceAdaptor)
    assert mr.upstream_mr is up and mr.get_upstream() is up
    assert mr.device == up.device == nbrmm.get_current_device()
    p = mr.allocate(200)
    write_host(p, b"z" * 200)
    assert read_host(p, 200) == b"z" * 200
    assert heap.bytes_in_use > 0
    mr.deallocate(p, 200)
    del mr
    assert heap.bytes_in_use == 0


@pytest.mark.parametrize("name", sorted(ADAPTORS))
def test_adaptor_rejects_a_non_resource_upstream(name, tmp_path):
    for bad in (None, "mr", HostHeap()):
        with pytest.raises(TypeError, match="upstream_mr"):
            ADAPTORS[name](bad, tmp_path)


@pytest.mark.parametrize("name", sorted(ADAPTORS))
def test_adaptor_made_by_cpp_comes_back_as_its_class(name, tmp_path):
    """A librmm adaptor that C++ made over an nbrmm resource and wrote into librmm's map
    comes back as its nbrmm class, its upstream as the very Python object, serving from
    the same state."""
    heap = HostHeap()
    up = heap.resource()
    testing.set_current_cpp(name, up, str(tmp_path / "log.csv"))
    got = nbrmm.mr.get_current_device_resource()
    assert type(got) is type(ADAPTORS[name](HostHeap().resource(), tmp_path))
    assert got.upstream_mr is up and got.device == up.device
    assert nbrmm.mr.get_current_device_resource() is got  # one wrapper while it lives
    p = got.allocate(100)
    assert heap.bytes_in_use > 0
    got.deallocate(p, 100)


@pytest.mark.parametrize("name", sorted(ADAPTORS))
def test_adaptor_handed_over_by_cpp_is_its_class(name, tmp_path):
    """``nbrmm::resource_to_python`` (the public C++ API) gives an adaptor made in C++ its
    nbrmm class; dropping the object frees what it holds."""
    heap = HostHeap()
    up = heap.resource()
    got = testing.make_cpp(name, up, str(tmp_path / "log.csv"))
    assert type(got) is type(ADAPTORS[name](HostHeap().resource(), tmp_path))
    assert got.upstream_mr is up
    buf = nbrmm.Buffer(300, mr=got)
    assert buf.mr is got and heap.bytes_in_use > 0
    del buf, got
    gc.collect()
    assert heap.bytes_in_use == 0


def test_wrapped_adaptors_share_counters_and_names(tmp_path):
    heap = HostHeap()
    stats = nbrmm.mr.StatisticsResourceAdaptor(heap.resource())
    testing.set_current_cpp("tracking", stats)  # C++ tracks over a Python-made adaptor
    got = nbrmm.mr.get_current_device_resource()
    assert type(got) is nbrmm.mr.TrackingResourceAdaptor and got.upstream_mr is stats
    p = got.allocate(1000)
    assert stats.allocation_counts.current_bytes == 1000
    assert got.get_allocated_bytes() == 1000
    got.deallocate(p, 1000)
    assert stats.allocation_counts.current_bytes == 0

    testing.set_current_cpp("logging", heap.resource(), str(tmp_path / "w.csv"))
    assert nbrmm.mr.get_current_device_resource().get_file_name() is None  # made by C++

    testing.set_current_cpp("failure_callback", heap.resource())
    assert nbrmm.mr.get_current_device_resource().callback is None  # a C++ function


def test_statistics_adaptor_set_by_cpp_comes_back_typed():
    from extensions import cpp_ext

    cpp_ext.set_current_owned(nbrmm.get_device_count() > 0)
    try:
        got = nbrmm.mr.get_current_device_resource()
        assert type(got) is nbrmm.mr.StatisticsResourceAdaptor
        assert isinstance(got.upstream_mr, nbrmm.mr.DeviceMemoryResource)
        before = got.allocation_counts.total_count
        buf = nbrmm.Buffer(300)  # from the C++ adaptor, through librmm's map
        assert got.allocation_counts.current_bytes == 300
        assert cpp_ext.owned_counts() == (300, 1, before + 1)
        del buf
        assert got.allocation_counts.current_bytes == 0
    finally:
        cpp_ext.reset_current()


# --------------------------------------------------------------------------------------
# GPU: every adaptor over device memory, counted by a statistics adaptor
# --------------------------------------------------------------------------------------


GPU_ADAPTORS = dict(ADAPTORS)
GPU_ADAPTORS["pool"] = lambda up, tmp: nbrmm.mr.PoolMemoryResource(up, POOL_SIZE, POOL_SIZE)
GPU_ADAPTORS["arena"] = lambda up, tmp: nbrmm.mr.ArenaMemoryResource(up, 4 * POOL_SIZE)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_ADAPTORS))
def test_gpu_adaptor_over_device_memory(name, tmp_path):
    base = (nbrmm.mr.ManagedMemoryResource() if name == "prefetch"
            else nbrmm.mr.CudaMemoryResource())
    below = nbrmm.mr.StatisticsResourceAdaptor(base)
    mr = GPU_ADAPTORS[name](below, tmp_path)
    above = nbrmm.mr.StatisticsResourceAdaptor(mr)
    payload = bytes(range(200)) * 5
    buf = nbrmm.Buffer(len(payload), mr=above)
    buf.copy_from_host(payload)
    assert buf.tobytes() == payload
    assert above.allocation_counts.current_bytes == len(payload)
    assert below.allocation_counts.current_bytes >= len(payload)
    del buf
    assert above.allocation_counts == stats(0, 0, 1000, 1, 1000, 1)
    del above, mr
    gc.collect()
    assert below.allocation_counts.current_bytes == 0


@pytest.mark.gpu
def test_gpu_limiting_over_device_memory():
    mr = nbrmm.mr.LimitingResourceAdaptor(nbrmm.mr.CudaMemoryResource(), POOL_SIZE)
    buf = nbrmm.Buffer(POOL_SIZE, mr=mr)
    with pytest.raises(nbrmm.OutOfMemory):
        nbrmm.Buffer(1, mr=mr)
    assert mr.get_allocated_bytes() == POOL_SIZE
    del buf
    small = nbrmm.Buffer(10, mr=mr)
    assert mr.get_allocated_bytes() == 256
    del small


@pytest.mark.gpu
def test_gpu_aligned_over_device_memory():
    mr = nbrmm.mr.AlignedResourceAdaptor(nbrmm.mr.CudaMemoryResource(), 1 << 16)
    bufs = [nbrmm.Buffer(n, mr=mr) for n in (1, 1000, 70000)]
    assert all(b.ptr % (1 << 16) == 0 for b in bufs)
    bufs[2].copy_from_host(b"q" * 70000)
    assert bufs[2].tobytes() == b"q" * 70000


@pytest.mark.gpu
def test_gpu_failure_callback_can_free_device_memory():
    limit = nbrmm.mr.LimitingResourceAdaptor(nbrmm.mr.CudaMemoryResource(), POOL_SIZE)
    cache = [nbrmm.Buffer(POOL_SIZE, mr=limit)]
    calls = []

    def spill(nbytes):
        calls.append(nbytes)
        return bool(cache and cache.pop() is not None)

    mr = nbrmm.mr.FailureCallbackResourceAdaptor(limit, spill)
    buf = nbrmm.Buffer(POOL_SIZE // 2, mr=mr)
    assert calls == [POOL_SIZE // 2] and cache == []
    del buf


@pytest.mark.gpu
def test_gpu_logging_records_device_pointers(tmp_path):
    mr = nbrmm.mr.LoggingResourceAdaptor(nbrmm.mr.CudaMemoryResource(), tmp_path / "gpu.csv")
    assert mr.get_file_name().endswith(f"gpu.dev{nbrmm.get_current_device()}.csv")
    stream = nbrmm.Stream()
    buf = nbrmm.Buffer(4096, mr=mr, stream=stream)
    ptr = buf.ptr
    del buf
    stream.synchronize()
    mr.flush()
    rows = read_log(mr.get_file_name())
    assert [(r[2], int(r[3], 16), int(r[4]), int(r[5], 16)) for r in rows[1:]] == [
        ("allocate", ptr, 4096, stream.handle),
        ("free", ptr, 4096, stream.handle),
    ]


@pytest.mark.gpu
def test_gpu_thread_safe_adaptor_under_threads():
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    mr = nbrmm.mr.ThreadSafeResourceAdaptor(stats)
    hammer(mr, threads=4, rounds=20)
    assert stats.allocation_counts.total_count == 80
    assert stats.allocation_counts.current_bytes == 0
