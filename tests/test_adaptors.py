"""Adaptors over a host-memory upstream: what each one adds, tested for real on the CPU."""

import csv
import os

import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap, read_host, write_host
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
    inner.deallocate(ptr, 128)  # freeing below the outer adaptor bypasses its counters
    assert inner.allocation_counts.current_bytes == 0
    assert outer.allocation_counts.current_bytes == 128


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
