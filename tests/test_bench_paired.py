"""benchmarks/bench_paired.py: the interleaving of subject and reference batches."""

import importlib.util
import pathlib
import statistics

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def paired(monkeypatch_module, request):
    monkeypatch_module.syspath_prepend(str(BENCHMARKS))  # for its `support` import
    if not request.config.pluginmanager.hasplugin("benchmark"):
        # Run without pytest-benchmark (-p no:benchmark, as under xdist): its marker, which
        # the module applies, is unknown to --strict-markers then.
        request.config.addinivalue_line("markers", "benchmark: pytest-benchmark's options")
    spec = importlib.util.spec_from_file_location("nbrmm_bench_paired", BENCHMARKS / "bench_paired.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


class FakeBenchmark:
    """pytest-benchmark's fixture as Interleaved uses it: setup before every round."""

    def __init__(self):
        self.extra_info = {}
        self.rounds = None

    def pedantic(self, target, setup, rounds, warmup_rounds):
        self.rounds = (warmup_rounds, rounds)
        for _ in range(warmup_rounds + rounds):
            setup()
            target()


def test_references_run_before_every_timed_batch(paired):
    calls = []
    ticks = iter(range(10**6))
    fake = FakeBenchmark()
    runs = paired.Interleaved(
        fake,
        {"a": lambda: calls.append("a") or next(ticks), "b": lambda: calls.append("b") or 5.0},
        before_subject=lambda: calls.append("enter"),
    )
    runs.run(lambda: calls.append("s"), ops=3)
    total = sum(fake.rounds)
    assert calls == ["a", "b", "enter", "s"] * total
    assert fake.extra_info["ops"] == 3
    assert fake.extra_info["reference_ns"] == {"a": statistics.median(range(total)), "b": 5.0}


def test_timed_is_ns_per_call(paired, monkeypatch):
    clock = iter([1_000, 8_000])
    monkeypatch.setattr(paired.time, "perf_counter_ns", lambda: next(clock))
    calls = []
    assert paired._timed(lambda: calls.append(1), ops=7) == 1_000.0
    assert calls == [1]


def test_benchmark_entry_names_the_test_and_summarises_rounds(paired):
    import support  # on sys.path through the `paired` fixture

    nodeid = "benchmarks/bench_paired.py::bench_paired_torch_empty_hook"
    entry = support.benchmark_entry(nodeid, "g", [3.0, 1.0, 2.0, 6.0], {"case": "paired"})
    assert entry["fullname"] == nodeid
    assert entry["name"] == "bench_paired_torch_empty_hook"
    stats = entry["stats"]
    assert (stats["min"], stats["max"], stats["median"], stats["rounds"]) == (1.0, 6.0, 2.5, 4)
    assert stats["mean"] == 3.0 and stats["total"] == 12.0
    assert entry["extra_info"] == {"case": "paired"} and entry["group"] == "g"


@pytest.fixture(scope="module")
def workloads(paired):  # after `paired`, for the benchmarks folder on sys.path
    spec = importlib.util.spec_from_file_location("nbrmm_bench_workloads",
                                                  BENCHMARKS / "bench_workloads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_workload_variants_take_turns_and_keep_their_largest_peaks(workloads, monkeypatch):
    calls = []

    def fake_worker(variant, env=None):
        calls.append(variant)
        n = len(calls)
        return {"variant": variant, "wall_s": [n, n + 0.5], "first_s": 9.0,
                "peak_used_bytes": 100 * n, "pool_peak_bytes": 10 * n,
                "pools": {"p": n}, "stage_peaks": {"s": n}, "loss": 0.25,
                "config": {"rows": 4}}

    monkeypatch.setattr(workloads, "run_worker", fake_worker)
    variants, config = workloads.run_interleaved(2, ("a", "b", "c"), once=("a",))
    assert calls == ["a", "b", "c", "b", "c"]  # round by round; "a" in the first only
    assert config == {"rows": 4}
    b = variants["b"]
    assert b["wall_s"] == [2, 2.5, 4, 4.5] and b["processes"] == 2
    assert (b["peak_used_bytes"], b["pool_peak_bytes"], b["pools"], b["stage_peaks"]) == (
        400, 40, {"p": 4}, {"s": 4})
    entry = workloads.entry("bench_workloads.py::bench_w", "W9", "c", ("b",), variants, config)
    assert entry["name"] == "bench_w[W9]" and entry["stats"]["median"] == 4.25  # c: 3, 3.5, 5, 5.5
    assert entry["extra_info"]["reference_ns"] == {"b": 3.25e9}
    assert entry["extra_info"]["case"] == "workload" and entry["extra_info"]["workload"] == "W9"


def test_a_failing_workload_worker_says_why(workloads, monkeypatch):
    monkeypatch.setattr(workloads, "WORKER", BENCHMARKS / "no_such_worker.py")
    with pytest.raises(RuntimeError, match="workload worker 'host' failed"):
        workloads.run_worker("host")
