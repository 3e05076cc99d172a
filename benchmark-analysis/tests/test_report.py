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
        # interleaved: 100 buffers in 45 µs (450 ns each) beside a 230 ns floor: 220 ns over
        bench("p-buf-n", 45_000, case="paired", impl="nbrmm", target="buffer_overhead",
              resource="arena", size=256, ops=100, reference_ns={"floor": 230.0}),
        bench("p-host-n", 300_000, case="paired", impl="nbrmm", target="buffer_overhead",
              resource="host", size=256, ops=100, reference_ns={"floor": 2000.0}),
        bench("p-buf-r", 90_000, case="paired", impl="rmm", target="buffer_overhead",
              resource="arena", size=256, ops=100, reference_ns={"floor": 240.0}),
        # cupy.empty: 2,000 ns beside CuPy's 1,900 ns (1.05x, missed) and rmm's 5,000 (0.40x)
        bench("p-cupy", 200_000, case="paired", impl="nbrmm", target="cupy_empty",
              resource="arena", size=256, ops=100, reference_ns={"cupy": 1900.0, "rmm": 5000.0}),
        # torch.empty: 4,000 ns beside the caching allocator's 4,400 ns
        bench("p-torch", 400_000, case="paired", impl="nbrmm", target="torch_empty",
              resource="arena", size=256, ops=100, reference_ns={"torch": 4400.0}),
        # the hook as torch's allocator: 4,600 ns beside 4,400 ns and the floor's 4,300 ns
        bench("p-torch-hook", 460_000, case="paired", impl="nbrmm", target="torch_empty_hook",
              resource="arena", size=256, ops=100,
              reference_ns={"torch": 4400.0, "pluggable_floor": 4300.0}),
        # cuda.core through nbrmm's arena: 900 ns beside cuda.core's own 1,000 ns (0.90x)
        bench("p-cuda-core", 90_000, case="paired", impl="nbrmm", target="cuda_core_allocate",
              resource="arena", size=256, ops=100,
              reference_ns={"cuda.core": 1000.0, "floor": 200.0}),
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


def test_targets_say_met_or_by_how_much_missed(run_report):
    md, _ = run_report(synthetic())
    pool = row(md, "Buffer(256 B, mr=pool) − C++ floor ≤ 250 ns")
    assert pool[1:] == ["200 ns", "5,900 ns", "met"]
    arena = row(md, "Buffer(256 B, mr=arena) − C++ floor ≤ 250 ns")
    assert arena[1:] == ["463 ns", "571 ns", "**missed** by 213 ns"]
    assert row(md, "Buffer(256 B, mr=async) − C++ floor ≤ 250 ns")[-1] == "not measured"
    assert row(md, "get_current_device_resource() ≤ 0.5× rmm's")[-1] == "met (0.34×)"


def test_interleaved_targets_per_call(run_report):
    md, _ = run_report(synthetic())
    nb = row(md, "nbrmm `Buffer(256 B, mr=arena)`")
    assert nb[1:] == ["450 ns", "C++ floor", "230 ns", "220 ns", "1.96×", "− floor ≤ 250 ns", "met"]
    # the host kind (Python callables) has no target
    assert row(md, "nbrmm `Buffer(256 B, mr=host)`")[-2:] == ["—", "—"]
    rm = row(md, "rmm `DeviceBuffer(256 B, mr=arena)`")
    assert rm[1:5] == ["900 ns", "C++ floor", "240 ns", "660 ns"] and rm[-1] == "—"
    cupy = rows(md, "`cupy.empty(256)`, nbrmm hook over arena")
    assert [c[2:] for c in cupy] == [
        ["CuPy's MemoryPool", "1,900 ns", "100 ns", "1.05×", "≤ 1.0×", "**missed**: 1.053×"],
        ["rmm's rmm_cupy_allocator", "5,000 ns", "-3,000 ns", "0.40×", "≤ 0.4×", "met"],
    ]
    torch = row(md, "`torch.empty(256)`, nbrmm hook in a MemPool over arena")
    assert torch[2:] == ["torch's caching allocator", "4,400 ns", "-400 ns", "0.91×", "≤ 1.0×", "met"]
    hook = rows(md, "`torch.empty(256)`, nbrmm hook as torch's allocator, over arena")
    assert [c[2:] for c in hook] == [
        ["torch's caching allocator", "4,400 ns", "200 ns", "1.05×", "≤ 1.0×", "**missed**: 1.045×"],
        ["the hook over a host heap: torch's pluggable-allocator floor", "4,300 ns", "300 ns",
         "1.07×", "—", "—"],
    ]
    cuda_core = rows(md, "cuda.core `allocate(256)` + `close()`, nbrmm arena as its resource")
    assert [c[2:] for c in cuda_core] == [
        ["cuda.core's default device memory resource", "1,000 ns", "-100 ns", "0.90×", "≤ 1.0×",
         "met"],
        ["librmm's C++ allocate+deallocate on the arena", "200 ns", "700 ns", "4.50×", "—", "—"],
    ]
    # In the order of the report: targets, interleaved targets, then the tables.
    assert md.index("## Targets") < md.index("## Targets, timed interleaved") < md.index(
        "## Buffer create"
    )


def test_commit_given_on_the_command_line_replaces_the_recorded_one(report, tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(synthetic()))
    assert report.main([str(path), "--out", str(tmp_path), "--commit", "fedcba987654"]) == 0
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert row(md, "commit")[1] == "fedcba987654"


def test_missed_get_current_target_reports_the_gap(run_report):
    md, _ = run_report(synthetic(get_nbrmm_ns=200.0))
    verdict = row(md, "get_current_device_resource() ≤ 0.5× rmm's")[-1]
    # 200 / 292 = 0.68x; 0.5x of rmm's 292 ns is 146 ns, 54 ns less than nbrmm's
    assert verdict == "**missed**: 0.68×, 0.18× over; 54 ns slower than the 146 ns needed"


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
    assert row(md, "`get_current_device_resource()`") == [
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
    md, _ = run_report({"benchmarks": []}, png=True)
    assert "# nbrmm benchmarks" in md
    assert row(md, "get_current_device_resource() ≤ 0.5× rmm's")[-1] == "not measured"


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
            "nbrmm and (bench_buffer and host or bench_get_current_device_resource"
            " or bench_paired_buffer and host) or bench_object",
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
    paired = by_name["bench_paired_buffer[host-nbrmm]"]
    assert paired["extra_info"]["ops"] > 1 and paired["extra_info"]["reference_ns"]["floor"] > 0
    assert paired["stats"]["rounds"] > 100

    assert report.main([str(out), "--out", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    time_cell = re.compile(r"^[\d,.]+ (ns|µs|ms)$")
    assert time_cell.match(row(md, "host, 256 B")[2])
    assert time_cell.match(row(md, "`get_current_device_resource()`")[1])
    assert time_cell.match(row(md, "`object()`")[1])
    assert time_cell.match(row(md, "nbrmm `Buffer(256 B, mr=host)`")[1])
