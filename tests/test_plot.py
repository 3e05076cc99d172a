"""nbrmm.plot: parsing logging adaptor logs and drawing the memory timeline."""

import os
import subprocess
import sys

import pytest

import nbrmm
import nbrmm.mr
import nbrmm.statistics as st
from helpers import HostHeap
from nbrmm.plot import (
    LogEvent,
    main,
    memory_timeline,
    plot_log,
    read_log,
    read_profile,
    write_profile,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"


def write(path, text):
    path.write_text(text)
    return path


def record_workload(tmp_path):
    """A real log (and profiler records) from a workload over host memory."""
    heap = HostHeap()
    nbrmm.mr.set_current_device_resource(heap.resource())
    records = st.ProfilerRecords()
    nbrmm.enable_logging(tmp_path / "work.csv")
    st.enable_statistics()
    keep = []
    for step in range(5):
        with st.profiler(records=records, name=f"phase {step % 2}"):
            keep.append(nbrmm.Buffer((step + 1) * 100_000))
            tmp = [nbrmm.Buffer(50_000 * (i + 1)) for i in range(step + 2)]
            del tmp
    with st.profiler(records=records, name="free all"):
        del keep
    st.disable_statistics()
    (log,) = nbrmm.get_log_filenames().values()
    nbrmm.disable_logging()
    return log, records, heap


# --------------------------------------------------------------------------------------
# Parsing (no matplotlib needed)
# --------------------------------------------------------------------------------------


def test_read_log_parses_every_column(tmp_path):
    log = write(
        tmp_path / "a.csv",
        HEADER
        + "7,23:59:59.500000,allocate,0x7f0000000100,4096,0x55aa\n"
        + "8,23:59:59.750000,allocate failure,(nil),99,0\n"
        + "\n"
        + "7,00:00:00.250000,free,0x7f0000000100,4096,0x55aa\n",
    )
    events = read_log(log)
    assert events == [
        LogEvent("7", 0.0, "allocate", 0x7F0000000100, 4096, "0x55aa"),
        LogEvent("8", 0.25, "allocate failure", 0, 99, "0"),
        # Past midnight the clock keeps counting up.
        LogEvent("7", 0.75, "free", 0x7F0000000100, 4096, "0x55aa"),
    ]


def test_memory_timeline_counts_bytes_in_use(tmp_path):
    events = [
        LogEvent("1", 0.0, "allocate", 0x10, 100, "0"),
        LogEvent("1", 0.1, "allocate", 0x20, 50, "0"),
        LogEvent("1", 0.2, "free", 0x10, 100, "0"),
        LogEvent("1", 0.3, "free", 0x999, 7, "0"),  # allocated before the log began
        LogEvent("1", 0.4, "allocate failure", 0, 1 << 40, "0"),
        LogEvent("1", 0.5, "allocate", 0x10, 500, "0"),
        LogEvent("1", 0.6, "free", 0x20, 50, "0"),
    ]
    tl = memory_timeline(events)
    assert tl.times == [0.0, 0.1, 0.2, 0.5, 0.6]
    assert tl.bytes_in_use == [100, 150, 50, 550, 500]
    assert (tl.peak_bytes, tl.peak_time) == (550, 0.5)
    assert (tl.allocations, tl.frees, tl.unmatched_frees) == (3, 2, 1)
    assert tl.failures == [(0.4, 1 << 40)]
    empty = memory_timeline([])
    assert (empty.peak_bytes, empty.times) == (0, [])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("a,b,c\n1,2,3\n", "lacks Time, Action, Pointer, Size"),
        (HEADER + "1,10:00:00.0,allocate,0x10\n", ":2: expected 6 columns"),
        (HEADER + "1,10:00:00.0,grab,0x10,5,0\n", ":2: unknown action 'grab'"),
        (HEADER + "1,ten o'clock,allocate,0x10,5,0\n", ":2: cannot parse the time"),
        (HEADER + "1,10:00:00.0,allocate,0xzz,5,0\n", ":2: cannot parse the pointer"),
        (HEADER + "1,10:00:00.0,allocate,0x10,five,0\n", ":2: cannot parse the size"),
    ],
)
def test_read_log_errors_name_the_file_and_line(tmp_path, text, message):
    log = write(tmp_path / "bad.csv", text)
    with pytest.raises(ValueError, match=message) as info:
        read_log(log)
    assert str(log) in str(info.value)


def test_profile_round_trip(tmp_path):
    records = st.ProfilerRecords()
    records.add("a", st.Statistics(0, 0, 10, 1, 30, 2))
    records.add("b", st.Statistics(0, 0, 5, 1, 5, 1))
    write_profile(records, tmp_path / "p.json")
    assert read_profile(tmp_path / "p.json") == {
        "a": {"num_calls": 1, "memory_total": 30, "memory_peak": 10},
        "b": {"num_calls": 1, "memory_total": 5, "memory_peak": 5},
    }
    write(tmp_path / "not.json", "[1, 2]")
    with pytest.raises(ValueError, match="not a profile"):
        read_profile(tmp_path / "not.json")


@pytest.mark.parametrize("text", [
    '{"records": {"a": 5}}',
    '{"records": {"a": {}}}',
    '{"records": {"a": {"num_calls": null, "memory_total": 1, "memory_peak": 1}}}',
    '{"records": {"a": {"num_calls": 1e400, "memory_total": 1, "memory_peak": 1}}}',
    '{"records": {"a": {"num_calls": -1, "memory_total": 1, "memory_peak": 1}}}',
    '{"records": {"a": {"num_calls": true, "memory_total": 1, "memory_peak": 1}}}',
])
def test_a_malformed_profile_is_named(tmp_path, text):
    path = write(tmp_path / "p.json", text)
    with pytest.raises(ValueError, match="record 'a' is not a profile record") as info:
        read_profile(path)
    assert str(path) in str(info.value)


def test_real_log_parses_back_exactly(tmp_path):
    log, _, heap = record_workload(tmp_path)
    events = read_log(log)
    assert [(e.action, e.size, e.pointer) for e in events] == [
        ("free" if a == "deallocate" else a, n, p) for a, n, p in heap.calls
    ]
    tl = memory_timeline(events)
    assert tl.bytes_in_use[-1] == 0
    # The peak, recomputed from the heap's own record of its calls.
    in_use, peak = 0, 0
    for action, n, _ in heap.calls:
        in_use += n if action == "allocate" else -n
        peak = max(peak, in_use)
    assert tl.peak_bytes == peak


def test_missing_matplotlib_is_a_clear_import_error(tmp_path, monkeypatch):
    log = write(tmp_path / "a.csv", HEADER + "1,10:00:00.0,allocate,0x10,5,0\n")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"matplotlib.*nbrmm\[plot\]"):
        plot_log(log, tmp_path / "a.png")
    assert main([str(log), "-o", str(tmp_path / "a.png")]) == 2
    assert not (tmp_path / "a.png").exists()


# --------------------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------------------


def assert_real_png(path, min_colors=20):
    matplotlib_image = pytest.importorskip("matplotlib.image")
    assert path.exists()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 20_000
    pixels = matplotlib_image.imread(str(path))
    height, width = pixels.shape[:2]
    assert width >= 800 and height >= 400
    colors = {tuple(p) for p in pixels[::4, ::4].reshape(-1, pixels.shape[2]).tolist()}
    assert len(colors) >= min_colors


def test_plot_from_a_real_log_with_profile(tmp_path):
    pytest.importorskip("matplotlib")
    log, records, _ = record_workload(tmp_path)
    out = tmp_path / "timeline.png"
    (tl,) = plot_log(log, out, profile=records)
    assert tl.allocations == 5 + sum(range(2, 7))
    assert_real_png(out)

    # The same from a saved profile, and without: the profile panel makes it taller.
    write_profile(records, tmp_path / "p.json")
    plot_log([log], tmp_path / "p.png", profile=tmp_path / "p.json", title="t")
    plot_log(log, tmp_path / "plain.png")
    mpimg = pytest.importorskip("matplotlib.image")
    assert mpimg.imread(str(tmp_path / "p.png")).shape[0] > mpimg.imread(
        str(tmp_path / "plain.png")
    ).shape[0]
    with pytest.raises(ValueError, match="logs"):
        plot_log([], tmp_path / "none.png")


def test_plot_command_line(tmp_path):
    pytest.importorskip("matplotlib")
    log, records, _ = record_workload(tmp_path)
    write_profile(records, tmp_path / "p.json")
    out = tmp_path / "cli.png"
    run = subprocess.run(
        [sys.executable, "-m", "nbrmm.plot", log, "-o", str(out)]
        + ["--profile", str(tmp_path / "p.json")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert f"wrote {out}" in run.stdout
    assert_real_png(out)

    bad = write(tmp_path / "bad.csv", "nope\n")
    run = subprocess.run(
        [sys.executable, "-m", "nbrmm.plot", str(bad)], capture_output=True, text=True
    )
    assert run.returncode == 1
    assert "not a logging adaptor log" in run.stderr


def test_readme_plot_script_two_phases(tmp_path):
    pytest.importorskip("matplotlib")
    script = os.path.join(ROOT, "scripts", "make-readme-plot.py")
    log = tmp_path / "readme.csv"
    run = subprocess.run(
        [sys.executable, script, "--record", str(log), "--host-memory"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert log.exists() and (tmp_path / "readme.profile.json").exists()
    assert set(read_profile(tmp_path / "readme.profile.json")) == {
        "load",
        "transform",
        "evict",
        "reduce",
        "release",
    }
    assert memory_timeline(read_log(log)).bytes_in_use[-1] == 0
    png = tmp_path / "readme.png"
    run = subprocess.run(
        [sys.executable, script, "--plot", str(log), "-o", str(png)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert_real_png(png)
