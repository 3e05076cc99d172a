"""Python's own costs in the same run, to read the others against: creating an object,
and calling an empty function (the timing loop calls each benchmark through one)."""

import pytest
from support import record

pytestmark = pytest.mark.benchmark(min_time=2e-5, max_time=0.1, min_rounds=10, disable_gc=True)


def bench_object(benchmark):
    record(benchmark, "reference", "python", resource="object()")
    benchmark(object)


def bench_empty_call(benchmark):
    record(benchmark, "reference", "python", resource="lambda: None")
    benchmark(lambda: None)
