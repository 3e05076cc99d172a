"""benchmark-analysis/report.py: markdown tables, ratios and targets from a pytest-benchmark JSON."""

import importlib.util
import json
import pathlib
import platform
import re
import subprocess
import sys

import pytest

import nbrmm
from report import parse_md_table

REPORT = pathlib.Path(__file__).resolve().parents[1] / "report.py"
MiB = 1 << 20


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("nbrmm_bench_report", REPORT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def bench(name, median_ns, **info):
    return {
        "name": name,
        "group": None,
        "extra_info": info,
        "stats": {"median": median_ns * 1e-9, "iqr": 1e-9, "rounds": 100},
    }


def synthetic(get_nbrmm_ns=100.0):
    """A run on a made-up machine: every section of the report has data."""
    buffers = [
        # pool: nbrmm 200 ns over the floor (met); rmm 5,900 ns over it
        bench(
            "b-pool-n",
            600,
            case="buffer",
            impl="nbrmm",
            resource="pool",
            size=256,
            floor_ns=400,
            device_buffer_ns=480,
        ),
        bench("b-pool-r", 6300, case="buffer", impl="rmm", resource="pool", size=256, floor_ns=400),
        bench(
            "b-pool-c", 2000, case="buffer", impl="cupy", resource="pool", size=256, floor_ns=400
        ),
        # arena: 463 ns over the floor, the target is missed by 213 ns
        bench(
            "b-arena-n", 700, case="buffer", impl="nbrmm", resource="arena", size=256, floor_ns=237
        ),
        bench(
            "b-arena-r", 808, case="buffer", impl="rmm", resource="arena", size=256, floor_ns=237
        ),
        bench("b-zero-n", 150, case="buffer", impl="nbrmm", resource="pool", size=0, floor_ns=30),
    ]
    others = [
        bench(
            "a-pool-n", 500, case="allocate", impl="nbrmm", resource="pool", size=MiB, floor_ns=450
        ),
        bench(
            "a-pool-t", 1000, case="allocate", impl="torch", resource="pool", size=MiB, floor_ns=450
        ),
        bench("get-n", get_nbrmm_ns, case="get_current", impl="nbrmm", resource="pool"),
        bench("get-r", 292, case="get_current", impl="rmm", resource="pool"),
        bench("set-n", 300, case="set_current", impl="nbrmm", resource="pool"),
        # 1 MiB in 100 µs: 10.49 GB/s; the raw copy made 20 GB/s, rmm 5.24 GB/s
        bench(
            "c-n", 100_000, case="copy", impl="nbrmm", direction="h2d", size=MiB, floor_gbps=20.0
        ),
        bench("c-r", 200_000, case="copy", impl="rmm", direction="h2d", size=MiB, floor_gbps=20.0),
        # 4 threads x 400 buffers in 3.2 ms: 2,000 ns per buffer; 1 thread: 1,000 ns
        bench("t1-n", 400_000, case="threads", impl="nbrmm", resource="pool", threads=1, ops=400),
        bench(
            "t4-n", 3_200_000, case="threads", impl="nbrmm", resource="pool", threads=4, ops=1600
        ),
        bench("t4-r", 6_400_000, case="threads", impl="rmm", resource="pool", threads=4, ops=1600),
        # interleaved: 100 buffers in 45 µs (450 ns each) beside a 230 ns floor (220 ns
        # over it) and rmm's 900 ns (670 ns over it): 0.33x rmm's overhead
        bench("p-buf-n", 45_000, case="paired", impl="nbrmm", target="buffer_overhead",
              resource="arena", size=256, ops=100,
              reference_ns={"floor": 230.0, "rmm": 900.0}),
        # over a pool: 200 ns over the floor beside rmm's 250 ns: 0.80x, missed
        bench("p-pool-n", 60_000, case="paired", impl="nbrmm", target="buffer_overhead",
              resource="pool", size=256, ops=100,
              reference_ns={"floor": 400.0, "rmm": 650.0}),
        bench("p-host-n", 300_000, case="paired", impl="nbrmm", target="buffer_overhead",
              resource="host", size=256, ops=100, reference_ns={"floor": 2000.0}),
        # an earlier run's layout: rmm's DeviceBuffer as a subject of its own
        bench("p-buf-r", 90_000, case="paired", impl="rmm", target="buffer_overhead",
              resource="arena", size=256, ops=100, reference_ns={"floor": 240.0}),
        # get_current_device_resource: 100 ns beside rmm's 292 ns
        bench("p-get", 10_000, case="paired", impl="nbrmm", target="get_current",
              resource="pool", ops=100, reference_ns={"rmm": 292.0}),
        # cupy.empty: 2,000 ns beside CuPy's 1,900 ns (1.05x, met) and rmm's 5,000 (0.40x)
        bench("p-cupy", 200_000, case="paired", impl="nbrmm", target="cupy_empty",
              resource="arena", size=256, ops=100, reference_ns={"cupy": 1900.0, "rmm": 5000.0}),
        # torch.empty in a MemPool: 4,000 ns beside the caching allocator's 4,400 ns
        bench("p-torch", 400_000, case="paired", impl="nbrmm", target="torch_empty",
              resource="arena", size=256, ops=100, reference_ns={"torch": 4400.0}),
        # the hook as torch's allocator: 5,000 ns beside 4,400 ns (1.14x, missed) and the
        # floor's 4,300 ns
        bench("p-torch-hook", 500_000, case="paired", impl="nbrmm", target="torch_empty_hook",
              resource="arena", size=256, ops=100,
              reference_ns={"torch": 4400.0, "pluggable_floor": 4300.0}),
        # cuda.core through nbrmm's arena: 1,200 ns beside cuda.core's own 1,000 ns (1.20x)
        bench("p-cuda-core", 120_000, case="paired", impl="nbrmm", target="cuda_core_allocate",
              resource="arena", size=256, ops=100,
              reference_ns={"cuda.core": 1000.0, "floor": 200.0}),
        # W1: 1.5 s per pipeline beside rmm's 1.6 s (0.94x)
        bench("p-dask", 1.5e9, case="paired", impl="nbrmm", target="dask_cupy",
              resource="pool", ops=1, reference_ns={"rmm": 1.6e9}),
        *workloads(),
        bench("bench_object", 62, case="reference", impl="python", resource="object()"),
        bench("bench_unlabelled", 1234),
    ]
    return {
        "machine_info": {
            "python_version": "3.12.3",
            "cpu": {"brand_raw": "Test CPU", "count": 16},
            "nbrmm": {
                "python": "3.12.3",
                "gpu": "NVIDIA H200 (143771 MiB)",
                "driver": "580.159",
                "cuda_driver_api": 13000,
                "cuda_runtime": 13000,
                "versions": {"nbrmm": "0.1.0", "rmm-cu13": "26.10.0", "torch": None},
            },
        },
        "commit_info": {"id": "0123456789abcdef", "dirty": False},
        "datetime": "2026-12-02T12:00:00+00:00",
        "benchmarks": buffers + others,
    }


GiB = 1 << 30


def variant(peak_gib, wall_s=(1.0,), pool_gib=None):
    return {"wall_s": list(wall_s), "first_s": [2.0], "peak_used_bytes": int(peak_gib * GiB),
            "pool_peak_bytes": None if pool_gib is None else int(pool_gib * GiB),
            "pools": {}, "stage_peaks": {}, "loss": [0.5], "processes": 1}


def workloads(shared_gib=2.1, shared_s=1.04, hook_s=1.01):
    """W2 and W3 as bench_workloads.py records them (medians: the subject's runs)."""
    w2 = {
        "cupy": variant(1.9, pool_gib=1.8),
        "torch": variant(2.0, pool_gib=2.0),
        "two_pools": variant(3.9, wall_s=(1.0, 1.0, 1.2), pool_gib=3.8),
        "shared": variant(shared_gib, wall_s=(shared_s,) * 3, pool_gib=2.05),
    }
    w3 = {"torch": variant(2.0, wall_s=(0.5, 0.5)), "torch_nbrmm": variant(2.0, (0.5, 0.5))}
    return [
        bench("w2", shared_s * 1e9, case="workload", workload="W2", impl="nbrmm", ops=1,
              reference_ns={"two_pools": 1.0e9}, variants=w2),
        bench("w3", hook_s * 0.5e9, case="workload", workload="W3", impl="nbrmm", ops=1,
              reference_ns={"torch": 0.5e9}, variants=w3),
    ]


@pytest.fixture
def run_report(report, tmp_path, monkeypatch):
    def run(doc, png=False):
        if not png:  # drawing is slow: only where a test looks at the plot
            monkeypatch.setattr(report, "render_png", lambda results, path: False)
        path = tmp_path / "bench.json"
        path.write_text(json.dumps(doc))
        out = tmp_path / "out"
        assert report.main([str(path), "--out", str(out)]) == 0
        return (out / "report.md").read_text(encoding="utf-8"), out

    return run


def rows(markdown, first_cell):
    """The cells of every table row whose first cell is ``first_cell``."""
    return [cells for cells in parse_md_table(markdown) if cells[0] == first_cell]


def row(markdown, first_cell):
    """The cells of the first table row whose first cell is ``first_cell``."""
    found = rows(markdown, first_cell)
    if not found:
        raise AssertionError(f"no row {first_cell!r} in:\n{markdown}")
    return found[0]


def test_machine_and_versions(run_report):
    md, _ = run_report(synthetic())
    assert row(md, "GPU")[1] == "NVIDIA H200 (143771 MiB)"
    assert row(md, "driver")[1] == "580.159"
    assert row(md, "CUDA driver API / runtime")[1] == "13.0 / 13.0"
    assert row(md, "commit")[1] == "0123456789ab"
    assert row(md, "rmm-cu13")[1] == "26.10.0"
    assert row(md, "torch")[1] == "not installed"


def test_buffer_rows_with_floor_and_ratios(run_report):
    md, _ = run_report(synthetic())
    header = row(md, "resource, size")
    assert header == [
        "resource, size",
        "C++ floor",
        "C++ device_buffer",
        "nbrmm",
        "nbrmm − floor",
        "nbrmm ÷ floor",
        "rmm",
        "rmm − floor",
        "nbrmm ÷ rmm",
        "cupy",
        "nbrmm ÷ cupy",
    ]
    cells = dict(zip(header, row(md, "pool, 256 B"), strict=True))
    assert cells["C++ floor"] == "400 ns"
    assert cells["C++ device_buffer"] == "480 ns"
    assert cells["nbrmm"] == "600 ns"
    assert cells["nbrmm − floor"] == "200 ns"
    assert cells["nbrmm ÷ floor"] == "1.50×"
    assert cells["rmm"] == "6,300 ns"
    assert cells["rmm − floor"] == "5,900 ns"
    assert cells["nbrmm ÷ rmm"] == "0.10×"
    assert cells["cupy"] == "2,000 ns"
    assert cells["nbrmm ÷ cupy"] == "0.30×"
    # rows are ordered by resource, then size; a missing library shows a dash
    arena = dict(zip(header, row(md, "arena, 256 B"), strict=True))
    assert arena["cupy"] == "—" and arena["nbrmm ÷ cupy"] == "—"
    assert arena["C++ device_buffer"] == "—"
    assert md.index("| pool, 0 B") < md.index("| pool, 256 B") < md.index("| arena, 256 B")


def test_workloads_lead_with_their_targets(run_report):
    md, _ = run_report(synthetic())
    figures = [c for c in parse_md_table(md) if c[0] in ("W1", "W2", "W3")]
    assert [c[1:] for c in figures] == [
        ["Dask + CuPy pipeline, wall time", "1,500.0 ms",
         "dask-cuda's rmm_pool_size over rmm 26.10", "1,600.0 ms", "0.94×", "≤ 0.95×", "met"],
        # the ideal is the larger stage alone: torch's 2.0 GiB; 2.1 / 2.0 = 1.05
        ["CuPy then PyTorch, peak device memory in use", "2.10 GiB",
         "each stage alone (the larger)", "2.00 GiB", "1.05×", "≤ 1.1×", "met"],
        ["CuPy then PyTorch, peak held by the pools", "2.05 GiB",
         "each stage alone (the larger)", "2.00 GiB", "1.02×", "—", "—"],
        ["CuPy then PyTorch on two caching pools, peak device memory in use", "3.90 GiB",
         "each stage alone (the larger)", "2.00 GiB", "1.95×", "—", "—"],
        ["CuPy then PyTorch, wall time", "1,040.0 ms", "CuPy's and torch's caching pools",
         "1,000.0 ms", "1.04×", "≤ 1.05×", "met"],
        ["PyTorch training, wall time", "505.0 ms", "torch's caching allocator", "500.0 ms",
         "1.01×", "≤ 1.03×", "met"],
        ["PyTorch training, peak device memory in use", "2.00 GiB",
         "torch's caching allocator", "2.00 GiB", "1.00×", "—", "—"],
    ]
    # First the workloads, then the guards, then the tables.
    assert md.index("## Targets: workloads") < md.index("## Targets: guards") < md.index(
        "## Buffer create")


def test_missed_workload_targets_say_by_how_much(run_report):
    doc = synthetic()
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["extra_info"].get("case") != "workload"]
    doc["benchmarks"] += workloads(shared_gib=2.4, shared_s=1.1, hook_s=1.04)
    md, _ = run_report(doc)
    memory = row(md, "W2")  # the first W2 row: peak memory, 2.4 / 2.0 GiB
    assert memory[5:] == ["1.20×", "≤ 1.1×", "**missed**: 1.200×"]
    times = {c[1]: c[5:] for c in parse_md_table(md) if c[0] in ("W2", "W3")}
    assert times["CuPy then PyTorch, wall time"] == ["1.10×", "≤ 1.05×", "**missed**: 1.100×"]
    assert times["PyTorch training, wall time"] == ["1.04×", "≤ 1.03×", "**missed**: 1.040×"]


def test_workloads_not_measured(run_report):
    doc = synthetic()
    doc["benchmarks"] = [b for b in doc["benchmarks"]
                         if b["extra_info"].get("case") != "workload"
                         and b["extra_info"].get("target") != "dask_cupy"]
    md, _ = run_report(doc)
    assert row(md, "W1-W3")[1] == "not measured"
    # A W2 run without the alone variants: no ideal, so no verdict.
    doc["benchmarks"] += workloads()
    del doc["benchmarks"][-2]["extra_info"]["variants"]["cupy"]
    del doc["benchmarks"][-2]["extra_info"]["variants"]["torch"]
    md, _ = run_report(doc)
    assert row(md, "W2")[4:] == ["—", "—", "≤ 1.1×", "not measured"]


def test_guards_timed_interleaved(run_report):
    md, _ = run_report(synthetic())
    # arena: 220 ns over the floor, rmm's 670 ns over it: 0.33x
    nb = rows(md, "nbrmm `Buffer(256 B, mr=arena)`")
    assert [c[1:] for c in nb] == [
        ["450 ns", "C++ floor", "230 ns", "220 ns", "1.96×", "—", "—"],
        ["450 ns", "rmm's `DeviceBuffer(size=256)`, each over the C++ floor", "900 ns",
         "-450 ns", "0.33×", "≤ 0.75×", "met"],
    ]
    pool = rows(md, "nbrmm `Buffer(256 B, mr=pool)`")[1]
    assert pool[-3:] == ["0.80×", "≤ 0.75×", "**missed**: 0.800×"]
    # the host kind (Python callables) has no target, and without rmm no guard figure
    assert [c[-2:] for c in rows(md, "nbrmm `Buffer(256 B, mr=host)`")] == [["—", "—"]]
    rm = row(md, "rmm `DeviceBuffer(256 B, mr=arena)`")
    assert rm[1:5] == ["900 ns", "C++ floor", "240 ns", "660 ns"] and rm[-1] == "—"
    get = row(md, "`get_current_device_resource()`")
    assert get[2:] == ["rmm's get_current_device_resource()", "292 ns", "-192 ns", "0.34×",
                       "≤ 0.5×", "met"]
    cupy = rows(md, "`cupy.empty(256)`, nbrmm hook over arena")
    assert [c[2:] for c in cupy] == [
        ["CuPy's MemoryPool", "1,900 ns", "100 ns", "1.05×", "≤ 1.1×", "met"],
        ["rmm's rmm_cupy_allocator", "5,000 ns", "-3,000 ns", "0.40×", "—", "—"],
    ]
    torch = row(md, "`torch.empty(256)`, nbrmm hook in a MemPool over arena")
    assert torch[2:] == ["torch's caching allocator", "4,400 ns", "-400 ns", "0.91×", "—", "—"]
    hook = rows(md, "`torch.empty(256)`, nbrmm hook as torch's allocator, over arena")
    assert [c[2:] for c in hook] == [
        ["torch's caching allocator", "4,400 ns", "600 ns", "1.14×", "≤ 1.12×",
         "**missed**: 1.136×"],
        ["the hook over a host heap: torch's pluggable-allocator floor", "4,300 ns", "700 ns",
         "1.16×", "—", "—"],
    ]
    cuda_core = rows(md, "cuda.core `allocate(256)` + `close()`, nbrmm arena as its resource")
    assert [c[2:] for c in cuda_core] == [
        ["cuda.core's default device memory resource", "1,000 ns", "200 ns", "1.20×", "≤ 1.25×",
         "met"],
        ["librmm's C++ allocate+deallocate on the arena", "200 ns", "1,000 ns", "6.00×", "—",
         "—"],
    ]
    # a reference that was not measured is left out; W1 is a workload, not a guard
    assert "in Python that allocates nothing" not in md
    assert "nbrmm's plugin over a pool" not in md


def test_commit_given_on_the_command_line_replaces_the_recorded_one(report, tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(synthetic()))
    assert report.main([str(path), "--out", str(tmp_path), "--commit", "fedcba987654"]) == 0
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert row(md, "commit")[1] == "fedcba987654"


def test_copy_bandwidth_and_ratios(run_report):
    md, _ = run_report(synthetic())
    cells = row(md, "host → device, 1 MiB")
    assert cells == ["host → device, 1 MiB", "20.0", "10.5", "0.52×", "5.2", "2.00×"]


def test_thread_throughput_per_buffer_and_scaling(run_report):
    md, _ = run_report(synthetic())
    assert row(md, "pool, 1")[1:4] == ["1,000 ns", "1.00", "1.00×"]
    assert row(md, "pool, 4") == ["pool, 4", "2,000 ns", "0.50", "0.50×", "4,000 ns", "0.50×"]


def test_current_resource_and_other_sections(run_report):
    md, _ = run_report(synthetic())
    # the table of the unpaired case (the guard's row, timed interleaved, comes first)
    assert rows(md, "`get_current_device_resource()`")[-1] == [
        "`get_current_device_resource()`",
        "100 ns",
        "292 ns",
        "0.34×",
    ]
    assert row(md, "`set_current_device_resource(mr)`") == [
        "`set_current_device_resource(mr)`",
        "300 ns",
    ]
    assert row(md, "`object()`")[1] == "62 ns"
    assert row(md, "bench_unlabelled")[1] == "1,234 ns"
    assert row(md, "pool, 1 MiB")[-2:] == ["1,000 ns", "0.50×"]  # nbrmm ÷ torch


def test_time_formatting(report):
    assert report.fmt_time(812.4) == "812 ns"
    assert report.fmt_time(12_345) == "12.3 µs"
    assert report.fmt_time(45_600_000) == "45.6 ms"
    assert report.fmt_time(None) == "—"


def test_png_is_written_when_matplotlib_imports(run_report):
    pytest.importorskip("matplotlib")
    _, out = run_report(synthetic(), png=True)
    png = (out / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 10_000


def test_markdown_without_matplotlib(run_report, monkeypatch):
    # An entry of None in sys.modules makes the import fail, as on a machine without it.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    md, out = run_report(synthetic(), png=True)
    assert "## Buffer create + destroy" in md
    assert not (out / "report.png").exists()


def test_empty_run(run_report):
    md, out = run_report({"benchmarks": []}, png=True)
    assert "# nbrmm benchmarks" in md
    assert row(md, "W1-W3")[1] == "not measured"
    assert not (out / "workloads.png").exists()


def test_workloads_png_is_written_when_workloads_were_measured(run_report):
    pytest.importorskip("matplotlib")
    _, out = run_report(synthetic(), png=True)
    png = (out / "workloads.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 10_000


def test_the_suite_json_feeds_the_report(report, tmp_path):
    # The real pipeline on the CPU: a few timed cases of the suite, then the report.
    root = REPORT.parents[1]
    out = tmp_path / "bench.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(root / "benchmarks"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "nbrmm and (bench_buffer and host or bench_get_current_device_resource)"
            " or bench_paired_buffer and host or bench_object",
            f"--benchmark-json={out}",
        ],
        cwd=root,
        check=True,
        capture_output=True,
    )
    doc = json.loads(out.read_text())
    machine = doc["machine_info"]["nbrmm"]
    assert machine["versions"]["nbrmm"] == nbrmm.__version__
    assert machine["python"] == platform.python_version()
    by_name = {b["name"]: b for b in doc["benchmarks"]}
    info = by_name["bench_buffer[host-256B-nbrmm]"]["extra_info"]
    assert info["case"] == "buffer" and info["impl"] == "nbrmm" and info["size"] == 256
    assert info["floor_kind"] == "allocate+deallocate" and info["floor_ns"] > 0
    assert by_name["bench_buffer[host-0B-nbrmm]"]["extra_info"]["floor_kind"] == "device_buffer"
    paired = by_name["bench_paired_buffer[host]"]
    assert paired["extra_info"]["ops"] > 1 and paired["extra_info"]["reference_ns"]["floor"] > 0
    assert paired["stats"]["rounds"] > 100

    assert report.main([str(out), "--out", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    time_cell = re.compile(r"^[\d,.]+ (ns|µs|ms)$")
    assert time_cell.match(row(md, "host, 256 B")[2])
    assert time_cell.match(row(md, "`get_current_device_resource()`")[1])
    assert time_cell.match(row(md, "`object()`")[1])
    assert time_cell.match(row(md, "nbrmm `Buffer(256 B, mr=host)`")[1])
