"""benchmark-analysis/paired_runs.py: the interleaved targets summed over several runs."""

import gzip
import importlib
import json
import pathlib
import sys

import pytest
from report import parse_md_table

ANALYSIS = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runs():
    sys.path.insert(0, str(ANALYSIS))
    try:
        yield importlib.import_module("paired_runs")
    finally:
        sys.path.remove(str(ANALYSIS))
        sys.modules.pop("paired_runs", None)
        sys.modules.pop("report", None)


def paired(target, per_call_ns, ops=100, impl="nbrmm", **info):
    return {
        "name": f"bench_paired_{target}",
        "extra_info": {"case": "paired", "impl": impl, "target": target, "ops": ops, **info},
        "stats": {"median": per_call_ns * ops * 1e-9},
    }


def run(*benchmarks, commit="abcdef0123", when="2026-12-03T20:00:00"):
    return {"commit_info": {"id": commit}, "datetime": when, "benchmarks": list(benchmarks)}


def cupy(ns, cupy_ns, rmm_ns):
    return paired("cupy_empty", ns, resource="arena", size=256,
                  reference_ns={"cupy": cupy_ns, "rmm": rmm_ns})


def buffer(kind, ns, floor, impl="nbrmm", rmm=None):
    refs = {"floor": floor} if rmm is None else {"floor": floor, "rmm": rmm}
    return paired("buffer_overhead", ns, impl=impl, resource=kind, size=256, reference_ns=refs)


def cells(markdown, first, second):
    """The cells after the first two of the table row that starts ``first | second``."""
    for c in parse_md_table(markdown):
        if c[:2] == [first, second]:
            return c[2:]
    raise AssertionError(f"no row {first!r} / {second!r} in:\n{markdown}")


SUBJECT = "`cupy.empty(256)`, nbrmm hook over arena"


RMM_BUFFER = "rmm's `DeviceBuffer(size=256)`, each over the C++ floor"


def test_every_run_gives_one_row_per_target(runs):
    rows = runs.rows_of_run(run(cupy(2000, 2200, 5000), buffer("arena", 450, 250, rmm=650),
                                buffer("arena", 900, 250, impl="rmm"),
                                {"name": "not paired", "extra_info": {"case": "buffer"},
                                 "stats": {"median": 1e-6}}))
    assert [(r["reference"], r["measure"], r["limit"]) for r in rows] == [
        ("CuPy's MemoryPool", "ratio", 1.1),
        ("rmm's rmm_cupy_allocator", "ratio", None),  # compared, without a target
        ("C++ floor", "difference", None),
        (RMM_BUFFER, "overhead ratio", 0.75),  # 200 ns over the floor, rmm's 400 ns
    ]  # rmm's DeviceBuffer as a subject has no figure of nbrmm's: no row
    assert rows[0]["value"] == pytest.approx(2000 / 2200)
    assert rows[1]["subject_ns"] == pytest.approx(2000)
    assert rows[2]["value"] == pytest.approx(200)
    assert rows[3]["value"] == pytest.approx(0.5) and rows[3]["reference_ns"] == 650
    assert {r["commit"] for r in rows} == {"abcdef0"}
    assert runs.rows_of_run(run(cupy(1, 1, 1)), commit="f00")[0]["commit"] == "f00"


def test_summary_counts_the_runs_that_met_each_target(runs, tmp_path, capsys):
    paths = []
    for i, (ns, cupy_ns) in enumerate([(2000, 2000), (2300, 2000), (2200, 2000.5)]):
        path = tmp_path / f"run{i}.json.gz"
        doc = run(cupy(ns, cupy_ns, 5000), buffer("pool", 400, 200, rmm=500))
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
        paths.append(str(path))
    csv_path = tmp_path / "runs.csv"
    assert runs.main([*paths, "--commit", "1234567", "--csv", str(csv_path)]) == 0
    md = capsys.readouterr().out
    # 1.0, 1.15 and 1.09973: two at or under 1.1
    assert cells(md, SUBJECT, "CuPy's MemoryPool") == [
        "≤ 1.1×", "3", "1.100× (1.000× – 1.150×)", "—", "2 of 3", "1234567"]
    assert cells(md, SUBJECT, "rmm's rmm_cupy_allocator")[0] == "—"
    assert cells(md, SUBJECT, "rmm's rmm_cupy_allocator")[4] == "—"
    assert cells(md, "Buffer(256 B, mr=pool)", "C++ floor") == [
        "—", "3", "200 ns (200 ns – 200 ns)", "—", "—", "1234567"]
    assert cells(md, "Buffer(256 B, mr=pool)", RMM_BUFFER) == [
        "≤ 0.75×", "3", "0.667× (0.667× – 0.667×)", "—", "3 of 3", "1234567"]
    # Ratios are kept to five places, times to a tenth of a nanosecond.
    text = csv_path.read_text()
    assert ",2200.0,2000.5,1.09973,1.1" in text
    assert ",400.0,200.0,200.0," in text  # a difference, in nanoseconds, without a target
    # The CSV reads back to the same summary, and joins other runs.
    assert runs.main([str(csv_path)]) == 0
    assert capsys.readouterr().out == md
    more = tmp_path / "more.json"
    more.write_text(json.dumps(run(cupy(3000, 2000, 6000), commit="9999999aaa")))
    runs.main([str(csv_path), str(more)])
    both = capsys.readouterr().out
    assert cells(both, SUBJECT, "CuPy's MemoryPool")[1:] == [
        "4", "1.125× (1.000× – 1.500×)", "—", "2 of 4", "1234567, 9999999"]


def test_runs_recorded_under_earlier_targets_are_judged_by_todays(runs, tmp_path, capsys):
    # A CSV of runs recorded when a Buffer's target was 250 ns over the floor and CuPy's
    # hook had to be at most 1.0x CuPy's pool and 0.4x rmm's.
    path = tmp_path / "old.csv"
    path.write_text(
        ",".join(runs.FIELDS) + "\n"
        f'c0ffee0,2026-12-03,cupy_empty,"{SUBJECT}",CuPy\'s MemoryPool,ratio,2100.0,2000.0,'
        "1.05000,1.0\n"
        f'c0ffee0,2026-12-03,cupy_empty,"{SUBJECT}",rmm\'s rmm_cupy_allocator,ratio,2100.0,'
        "5000.0,0.42000,0.4\n"
        'c0ffee0,2026-12-03,buffer_overhead,"Buffer(256 B, mr=arena)",C++ floor,difference,'
        "500.0,200.0,300.0,250.0\n", encoding="utf-8")
    assert runs.main([str(path)]) == 0
    md = capsys.readouterr().out
    assert cells(md, SUBJECT, "CuPy's MemoryPool")[0::4] == ["≤ 1.1×", "1 of 1"]
    assert cells(md, SUBJECT, "rmm's rmm_cupy_allocator")[0::4] == ["—", "—"]
    assert cells(md, "Buffer(256 B, mr=arena)", "C++ floor")[0::4] == ["—", "—"]


@pytest.mark.parametrize(("n", "expected"), [
    (5, None), (6, (1, 6)), (9, (2, 8)), (20, (6, 15)), (78, (30, 49)), (100, (40, 61)),
    (2000, (956, 1045))])
def test_median_interval_is_the_binomial_order_statistics(runs, n, expected):
    # The published 95% intervals for the median: x(6)-x(15) of 20, x(40)-x(61) of 100;
    # of 2000 (past what a float can hold of 2**n), the normal approximation's
    # 1000 -/+ 1.96 * sqrt(2000) / 2 = 956.2 and 1043.8, to whole order statistics.
    values = [10.0 * i for i in range(n, 0, -1)]  # unsorted on purpose
    got = runs.median_interval(values)
    assert got == (None if expected is None else (10.0 * expected[0], 10.0 * expected[1]))


def test_summary_shows_the_median_interval_once_there_are_enough_runs(runs, capsys, tmp_path):
    ratios = [0.90, 0.95, 1.00, 1.05, 1.12, 1.15, 0.85, 0.80, 1.20]  # 9 runs: x(2)-x(8)
    paths = []
    for i, r in enumerate(ratios):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(run(cupy(r * 2000, 2000, 5000))))
        paths.append(str(path))
    assert runs.main(paths) == 0
    row = cells(capsys.readouterr().out, SUBJECT, "CuPy's MemoryPool")
    assert row[2:5] == ["1.000× (0.800× – 1.200×)", "0.850× – 1.150×", "6 of 9"]


def test_runs_without_targets_say_so(runs, tmp_path, capsys):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(run()))
    assert runs.main([str(path)]) == 0
    assert capsys.readouterr().out.strip() == "no interleaved targets in these runs"
