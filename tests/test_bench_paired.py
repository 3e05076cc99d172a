"""benchmarks/bench_paired.py: the interleaving of subject and reference batches."""

import importlib.util
import pathlib
import statistics

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def paired(monkeypatch_module):
    monkeypatch_module.syspath_prepend(str(BENCHMARKS))  # for its `support` import
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
