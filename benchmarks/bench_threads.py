"""Allocation throughput from 1, 4 and 8 Python threads: each thread creates and destroys
``OPS_PER_THREAD`` buffers of 256 bytes per timed call, all on the default stream.

``extra_info["ops"]`` is the number of buffers per timed call (threads x
``OPS_PER_THREAD``); the report divides by it.
"""

import pytest
from support import (
    OTHER_LIBRARIES,
    ThreadTeam,
    buffer_maker,
    checked,
    other_buffer_maker,
    over_impls,
    record,
)

SIZE = 256
THREADS = (1, 4, 8)
OPS_PER_THREAD = 400
KINDS = [
    pytest.param("host", id="host"),
    pytest.param("pool", id="pool", marks=pytest.mark.gpu),
    pytest.param("arena", id="arena", marks=pytest.mark.gpu),
    pytest.param("async", id="async", marks=pytest.mark.gpu),
]

pytestmark = pytest.mark.benchmark(disable_gc=True)


def run(benchmark, make, threads, setup=None):
    def work():
        for _ in range(OPS_PER_THREAD):
            make()

    with ThreadTeam(threads, work, setup) as team:
        benchmark.pedantic(team, rounds=10, warmup_rounds=1)


@over_impls
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("kind", KINDS)
def bench_threads(benchmark, kind, threads, impl, resources):
    make = buffer_maker(impl, SIZE, resources.get(impl, kind))
    record(
        benchmark,
        "threads",
        impl.__name__,
        resource=kind,
        size=SIZE,
        threads=threads,
        ops=threads * OPS_PER_THREAD,
    )
    run(benchmark, make, threads)


@pytest.mark.gpu
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("library", OTHER_LIBRARIES)
def bench_threads_other_library(benchmark, library, threads):
    make, keep = other_buffer_maker(library, SIZE)
    checked(make)
    record(
        benchmark,
        "threads",
        library,
        resource=OTHER_LIBRARIES[library],
        size=SIZE,
        threads=threads,
        ops=threads * OPS_PER_THREAD,
    )
    # cuda.core calls the driver directly: its context must be current in each thread.
    setup = keep[0].set_current if library == "cuda.core" else None
    run(benchmark, make, threads, setup)
    del keep
