"""The speed targets, timed interleaved: each subject beside its references, batch by batch.

On a shared machine the speed of the CPU can change by up to 2× for tens of milliseconds
at a time, so two cases timed one after the other may see different machines. Here every
round times a batch of ``BATCH`` calls of the subject (pytest-benchmark's statistics), and
right before it, in pytest-benchmark's untimed ``setup``, a batch of each reference. The
medians of the subject and of its references therefore come from the same moments.

Per call, ``report.py`` divides the batch times by ``ops`` (``extra_info``), which also
records the reference medians (``reference_ns``, ns per call) and the target (``target``):

``buffer_overhead``
    ``Buffer(256, mr=arena)`` (and rmm's ``DeviceBuffer``) minus librmm's C++
    allocate+deallocate round trip on the same resource.
``cupy_empty``
    ``cupy.empty(256, dtype=uint8)`` through nbrmm's hook over an arena, beside CuPy's own
    ``MemoryPool`` and rmm's ``rmm_cupy_allocator`` over rmm's arena.
``torch_empty``
    ``torch.empty(256, dtype=uint8, device="cuda")`` through nbrmm's hook behind a
    ``torch.cuda.MemPool``, beside torch's caching allocator.
"""

import contextlib
import statistics
import time

import pytest
from support import import_impl, make_resource, record, resource_params, size_id

import nbrmm
from nbrmm._nbrmm import _testing

#: Calls per timed batch, and rounds (batches) per case.
BATCH = 100
ROUNDS = 2000
WARMUP_ROUNDS = 50
NBYTES = 256


def _timed(batch, ops=BATCH):
    """ns per call over one run of ``batch`` (``ops`` calls)."""
    start = time.perf_counter_ns()
    batch()
    return (time.perf_counter_ns() - start) / ops


class Interleaved:
    """Times ``batch`` (``ops`` calls of the subject, written out in one loop as timeit
    does) with pytest-benchmark; before each run, times every reference
    (``{name: () -> ns per call}``) and keeps the samples."""

    def __init__(self, benchmark, references, before_subject=None):
        self.benchmark = benchmark
        self.references = references
        self.before_subject = before_subject
        self.samples = {name: [] for name in references}

    def _setup(self):
        for name, reference in self.references.items():
            self.samples[name].append(reference())
        if self.before_subject is not None:
            self.before_subject()

    def run(self, batch, ops=BATCH):
        self.benchmark.extra_info["ops"] = ops
        self.benchmark.pedantic(
            batch,
            setup=self._setup,
            rounds=ROUNDS,
            warmup_rounds=WARMUP_ROUNDS,
        )
        self.benchmark.extra_info["reference_ns"] = {
            name: statistics.median(values) for name, values in self.samples.items()
        }


pytestmark = pytest.mark.benchmark(disable_gc=True)


@pytest.mark.parametrize("impl", ["nbrmm", "rmm"])
@pytest.mark.parametrize("kind", resource_params(("host", "arena")))
def bench_paired_buffer(benchmark, kind, impl):
    """A buffer of 256 bytes created and destroyed, beside librmm's C++ round trip."""
    lib = import_impl(impl)
    mr = make_resource(lib, kind)
    floor_mr = mr if lib is nbrmm else make_resource(nbrmm, kind)
    if lib is nbrmm:
        Buffer = nbrmm.Buffer

        def batch():
            for _ in range(BATCH):
                Buffer(NBYTES, mr=mr)
    else:
        DeviceBuffer = lib.DeviceBuffer

        def batch():
            for _ in range(BATCH):
                DeviceBuffer(size=NBYTES, mr=mr)

    record(benchmark, "paired", impl, target="buffer_overhead", resource=kind, size=NBYTES)
    benchmark.group = f"paired buffer {kind} {size_id(NBYTES)}"
    batch()
    floor = {"floor": lambda: _testing.allocate_round_trip_ns(floor_mr, NBYTES, BATCH)}
    Interleaved(benchmark, floor).run(batch)


@pytest.mark.gpu
def bench_paired_cupy_empty(benchmark):
    """``cupy.empty`` through nbrmm's hook, beside CuPy's MemoryPool and rmm's hook."""
    cupy = pytest.importorskip("cupy")
    from nbrmm.allocators.cupy import cupy_allocator

    empty, uint8 = cupy.empty, cupy.uint8
    arena = make_resource(nbrmm, "arena")
    hook = cupy_allocator(mr=arena)
    pool = cupy.cuda.MemoryPool()
    allocators = {"cupy": pool.malloc}
    with contextlib.ExitStack() as undo:
        try:
            rmm = import_impl("rmm")
            from rmm.allocators.cupy import rmm_cupy_allocator
        except (ImportError, pytest.skip.Exception):
            rmm = None
        if rmm is not None:
            previous = rmm.mr.get_current_device_resource()
            rmm.mr.set_current_device_resource(make_resource(rmm, "arena"))
            undo.callback(rmm.mr.set_current_device_resource, previous)
            allocators["rmm"] = rmm_cupy_allocator
        undo.callback(cupy.cuda.set_allocator, cupy.cuda.get_allocator())

        def batch():
            for _ in range(BATCH):
                empty(NBYTES, dtype=uint8)

        def reference(allocator):
            def timed():
                cupy.cuda.set_allocator(allocator)
                return _timed(batch)

            return timed

        for allocator in [*allocators.values(), hook]:
            cupy.cuda.set_allocator(allocator)
            batch()
        record(benchmark, "paired", "nbrmm", target="cupy_empty", resource="arena", size=NBYTES)
        benchmark.group = f"paired cupy.empty {size_id(NBYTES)}"
        references = {name: reference(a) for name, a in allocators.items()}
        Interleaved(benchmark, references, lambda: cupy.cuda.set_allocator(hook)).run(batch)
    cupy.cuda.Device().synchronize()
    pool.free_all_blocks()


@pytest.mark.gpu
def bench_paired_torch_empty(benchmark):
    """``torch.empty`` through nbrmm's hook behind a MemPool, beside torch's caching
    allocator. Each round enters the pool in the untimed setup and leaves it in the next."""
    torch = pytest.importorskip("torch")
    from nbrmm.allocators.torch import torch_allocator

    empty, uint8 = torch.empty, torch.uint8
    pool = torch.cuda.MemPool(torch_allocator(make_resource(nbrmm, "arena")).allocator())

    def batch():
        for _ in range(BATCH):
            empty(NBYTES, dtype=uint8, device="cuda")

    with contextlib.ExitStack() as in_pool:

        def enter_pool():
            in_pool.enter_context(torch.cuda.use_mem_pool(pool))

        def caching_allocator():
            in_pool.close()  # leave the pool the previous round entered
            return _timed(batch)

        caching_allocator()
        enter_pool()
        batch()
        record(benchmark, "paired", "nbrmm", target="torch_empty", resource="arena", size=NBYTES)
        benchmark.group = f"paired torch.empty {size_id(NBYTES)}"
        Interleaved(benchmark, {"torch": caching_allocator}, enter_pool).run(batch)
    torch.cuda.synchronize()
