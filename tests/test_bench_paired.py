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
