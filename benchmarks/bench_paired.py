"""The guards, timed interleaved: each subject beside its references, batch by batch.

On a shared machine the speed of the CPU can change by up to 2× for tens of milliseconds
at a time, so two cases timed one after the other may see different machines. Here every
round times a batch of ``BATCH`` calls of the subject (pytest-benchmark's statistics), and
right before it, in pytest-benchmark's untimed ``setup``, a batch of each reference. The
medians of the subject and of its references therefore come from the same moments.

The guards are micro benchmarks that keep the workloads' speed (``bench_dask.py``,
``bench_workloads.py``) from eroding; machines differ, so each compares costs timed
together. Per call, ``benchmark-analysis/report.py`` divides the batch times by ``ops``
(``extra_info``), which also records the reference medians (``reference_ns``, ns per call)
and the target (``target``):

``buffer_overhead``
    ``Buffer(256, mr=...)`` beside librmm's C++ allocate+deallocate round trip on the same
    resource (``floor``) and rmm's ``DeviceBuffer(size=256, mr=...)`` over rmm's resource
    of the same kind (``rmm``), for the arena, pool and async resources (the guards: what
    a ``Buffer`` costs over the floor at most 0.75x what rmm's costs over it) and the host
    kind (Python callables, which needs no GPU).
``get_current``
    ``get_current_device_resource()`` beside rmm's (guard: at most 0.5x), with a pool
    current (Python callables over host memory without a GPU).
``cupy_empty``
    ``cupy.empty(256, dtype=uint8)`` through nbrmm's hook over an arena, beside CuPy's own
    ``MemoryPool`` (guard: at most 1.10x) and rmm's ``rmm_cupy_allocator`` over rmm's
    arena; an allocator that hands out one block it holds as CuPy's documented objects
    (``MemoryPointer`` to an ``UnownedMemory``), allocating and freeing nothing
    (``documented_objects_floor``), shows what CuPy itself costs for any allocator built
    on them. ``public_api_floor`` adds what such an allocator must ask CuPy for each call
    (the current device and stream, through CuPy's public functions, as nbrmm's hook
    does): all of the hook but the allocation. ``floor`` is librmm's C++ round trip on the
    arena: a hook under CuPy's public API costs at least the sum of the two.
``torch_empty``
    ``torch.empty(256, dtype=uint8, device="cuda")`` through nbrmm's hook behind a
    ``torch.cuda.MemPool``, beside torch's caching allocator. Once warm, torch's caching
    allocator serves these from the pool's cached blocks and calls the hook only to grow.
``cuda_core_allocate``
    cuda.core's ``allocate(256, stream=s)`` + ``close(s)`` with an nbrmm arena as the
    ``cuda.core.MemoryResource`` (``nbrmm.interop``), beside cuda.core's own default
    device memory resource (``Device().memory_resource``), both on one stream (guard: at
    most 1.25x); librmm's C++ round trip on the arena (``floor``) shows what the arena
    itself costs, and a ``MemoryResource`` written in Python that hands out one block it
    holds (``python_mr_floor``) what cuda.core itself costs for any resource written in
    Python. ``one_call_floor`` is a resource in Python whose methods make one call each of
    the arena's ``allocate`` and ``deallocate`` and check nothing: what such a resource
    costs with nbrmm's raw allocations.
``memory_history``
    ``torch.empty(256)`` + free while the memory history records Python stacks: nbrmm's
    hook as torch's allocator with ``nbrmm.memory.record_history(stacks="python")``,
    beside torch's caching allocator with its own recorder
    (``torch.cuda.memory._record_memory_history(stacks="python")``) (target: at most
    1.0x), each in a worker process as for ``torch_empty_hook``; the same two without
    recording show what each recorder adds.
``torch_empty_hook``
    The same call as ``torch_empty`` with nbrmm's hook as torch's allocator, so that every
    allocation and free goes through it, beside torch's caching allocator (guard: at most
    1.12x). torch takes its allocator once per process, so each runs in a worker process
    (``torch_worker.py``); the workers take turns on one CPU, the reference right before
    the subject. A third worker times the hook over a host-heap resource (reference
    ``pluggable_floor``): torch's pluggable-allocator path with an allocator that costs
    next to nothing.
"""

import contextlib
import os
import pathlib
import statistics
import subprocess
import sys
import time

import pytest
from support import (
    HAVE_GPU,
    benchmark_entry,
    cuda_core_device,
    import_impl,
    make_resource,
    record,
    resource_params,
    size_id,
)

import nbrmm
import nbrmm.mr
from extensions import testing as _testing

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

    def run(self, batch, ops=BATCH, rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS):
        self.benchmark.extra_info["ops"] = ops
        self.benchmark.pedantic(
            batch,
            setup=self._setup,
            rounds=rounds,
            warmup_rounds=warmup_rounds,
        )
        self.benchmark.extra_info["reference_ns"] = {
            name: statistics.median(values) for name, values in self.samples.items()
        }


pytestmark = pytest.mark.benchmark(disable_gc=True)


def _rmm_or_none():
    """rmm (with its ``mr`` module), or None where it is not installed."""
    try:
        return import_impl("rmm")
    except pytest.skip.Exception:
        return None


@pytest.mark.parametrize("kind", resource_params(("host", "arena", "pool", "async")))
def bench_paired_buffer(benchmark, kind):
    """A buffer of 256 bytes created and destroyed, beside librmm's C++ round trip and
    rmm's ``DeviceBuffer`` of the same size over rmm's resource of the same kind."""
    mr = make_resource(nbrmm, kind)
    Buffer = nbrmm.Buffer

    def batch():
        for _ in range(BATCH):
            Buffer(NBYTES, mr=mr)

    references = {"floor": lambda: _testing.allocate_round_trip_ns(mr, NBYTES, BATCH)}
    rmm = _rmm_or_none()
    if rmm is not None:
        rmm_mr = make_resource(rmm, kind)
        DeviceBuffer = rmm.DeviceBuffer

        def rmm_batch():
            for _ in range(BATCH):
                DeviceBuffer(size=NBYTES, mr=rmm_mr)

        rmm_batch()
        references["rmm"] = lambda: _timed(rmm_batch)
    record(benchmark, "paired", "nbrmm", target="buffer_overhead", resource=kind, size=NBYTES)
    benchmark.group = f"paired buffer {kind} {size_id(NBYTES)}"
    batch()
    Interleaved(benchmark, references).run(batch)


def bench_paired_get_current(benchmark):
    """``get_current_device_resource()`` with a pool current (Python callables over host
    memory without a GPU), beside rmm's. The two libraries share librmm's per-device map,
    so each round makes rmm's resource current before timing rmm, and nbrmm's before
    timing nbrmm (both untimed)."""
    rmm = _rmm_or_none()
    if rmm is None:
        pytest.skip("rmm is not installed: there is no reference")
    kind = "pool" if HAVE_GPU else "host"
    ours, theirs = make_resource(nbrmm, kind), make_resource(rmm, kind)
    rmm_before = rmm.mr.get_current_device_resource()
    get_nbrmm = nbrmm.mr.get_current_device_resource
    get_rmm = rmm.mr.get_current_device_resource

    def batch_of(get):
        def batch():
            for _ in range(BATCH):
                get()

        return batch

    subject, reference = batch_of(get_nbrmm), batch_of(get_rmm)

    def rmm_timed():
        rmm.mr.set_current_device_resource(theirs)
        return _timed(reference)

    try:
        rmm.mr.set_current_device_resource(theirs)
        assert get_rmm() is theirs
        nbrmm.mr.set_current_device_resource(ours)
        assert get_nbrmm() is ours
        record(benchmark, "paired", "nbrmm", target="get_current", resource=kind)
        benchmark.group = "paired get_current_device_resource"
        Interleaved(benchmark, {"rmm": rmm_timed},
                    lambda: nbrmm.mr.set_current_device_resource(ours)).run(subject)
    finally:
        rmm.mr.set_current_device_resource(rmm_before)


@pytest.mark.gpu
def bench_paired_cupy_empty(benchmark):
    """``cupy.empty`` through nbrmm's hook, beside CuPy's MemoryPool and rmm's hook."""
    cupy = pytest.importorskip("cupy")
    from nbrmm.allocators.cupy import cupy_allocator

    empty, uint8 = cupy.empty, cupy.uint8
    arena = make_resource(nbrmm, "arena")
    hook = cupy_allocator(mr=arena)
    pool = cupy.cuda.MemoryPool()
    # CuPy's cost for any allocator that returns its documented objects: one block, held.
    block = pool.malloc(NBYTES)
    device = cupy.cuda.get_device_id()
    memory_pointer, unowned_memory = cupy.cuda.MemoryPointer, cupy.cuda.UnownedMemory

    get_device_id, get_current_stream = cupy.cuda.get_device_id, cupy.cuda.get_current_stream

    def documented_objects(nbytes):
        return memory_pointer(unowned_memory(block.ptr, nbytes, block, device), 0)

    def public_api(nbytes):
        on_device = get_device_id()
        get_current_stream(on_device)
        return memory_pointer(unowned_memory(block.ptr, nbytes, block, on_device), 0)

    allocators = {"cupy": pool.malloc, "documented_objects_floor": documented_objects,
                  "public_api_floor": public_api}
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
        references["floor"] = lambda: _testing.allocate_round_trip_ns(arena, NBYTES, BATCH)
        Interleaved(benchmark, references, lambda: cupy.cuda.set_allocator(hook)).run(batch)
    cupy.cuda.Device().synchronize()
    del block
    pool.free_all_blocks()


@pytest.mark.gpu
def bench_paired_cuda_core_allocate(benchmark):
    """cuda.core's ``allocate`` + ``close`` through an nbrmm arena, beside cuda.core's own
    default device memory resource, a cuda.core resource in Python that allocates nothing,
    and the arena's C++ round trip."""
    dev, stream, own = cuda_core_device()
    from nbrmm.interop import to_cuda_core_memory_resource

    arena = make_resource(nbrmm, "arena")
    ours = to_cuda_core_memory_resource(arena)

    def batch_of(mr):
        allocate = mr.allocate

        def batch():
            for _ in range(BATCH):
                allocate(NBYTES, stream=stream).close(stream)

        return batch

    # cuda.core's own cost for any MemoryResource written in Python: allocate hands out
    # one block it holds (Buffer.from_handle), deallocate does nothing.
    import cuda.core

    block = own.allocate(NBYTES, stream=stream)
    from_handle = cuda.core.Buffer.from_handle

    class PythonResource(cuda.core.MemoryResource):
        is_device_accessible, is_host_accessible, is_managed = True, False, False
        device_id = dev.device_id

        def allocate(self, size, *, stream):
            return from_handle(block.handle, size, mr=self, stream=stream)

        def deallocate(self, ptr, size, *, stream):
            pass

    class OneCallResource(cuda.core.MemoryResource):
        is_device_accessible, is_host_accessible, is_managed = True, False, False
        device_id = dev.device_id

        def allocate(self, size, *, stream):
            return from_handle(arena.allocate(size, stream), size, mr=self, stream=stream)

        def deallocate(self, ptr, size, *, stream):
            arena.deallocate(ptr, size, stream)

    subject, reference = batch_of(ours), batch_of(own)
    python_floor = batch_of(PythonResource())
    one_call_floor = batch_of(OneCallResource())
    subject()
    reference()
    python_floor()
    one_call_floor()
    record(benchmark, "paired", "nbrmm", target="cuda_core_allocate", resource="arena", size=NBYTES)
    benchmark.group = f"paired cuda.core allocate {size_id(NBYTES)}"
    references = {
        "cuda.core": lambda: _timed(reference),
        "python_mr_floor": lambda: _timed(python_floor),
        "one_call_floor": lambda: _timed(one_call_floor),
        "floor": lambda: _testing.allocate_round_trip_ns(arena, NBYTES, BATCH),
    }
    Interleaved(benchmark, references).run(subject)
    stream.sync()
    block.close(stream)


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


class _TorchWorker:
    """A ``torch_worker.py`` process: ``batch()`` has it time one batch (ns per call)."""

    def __init__(self, mode, cpu):
        worker = pathlib.Path(__file__).with_name("torch_worker.py")
        self.proc = subprocess.Popen(
            [sys.executable, str(worker), mode, str(BATCH), str(NBYTES), str(cpu)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr = ""
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.close()
            raise RuntimeError(f"torch worker ({mode}) did not start: {line!r}\n{self.stderr}")

    def batch(self):
        self.proc.stdin.write("batch\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline()) / BATCH

    def close(self):
        """Stops the worker; returns its exit status (its stderr lands in ``stderr``)."""
        try:
            _, self.stderr = self.proc.communicate("stop\n", timeout=60)
        except (subprocess.TimeoutExpired, BrokenPipeError, ValueError):
            self.proc.kill()
            _, self.stderr = self.proc.communicate()
        return self.proc.returncode


@pytest.mark.gpu
def bench_paired_torch_empty_hook(request):
    """``torch.empty`` with nbrmm's hook as torch's allocator, beside torch's caching
    allocator and beside the same hook over a host heap, each in a worker process, batch
    for batch. The result joins this run's JSON (conftest.py), with the reference medians
    as in the other paired cases."""
    # Started in the order they take their turns in: the subject last.
    _torch_workers_paired(
        request,
        {"pluggable_floor": "hook-host", "torch": "caching", "nbrmm": "hook"},
        "torch_empty_hook",
    )


def _torch_workers_paired(request, modes, target):
    """Times ``torch.empty`` batches in one worker process per mode (``{name: mode}``,
    in turn, the subject ``nbrmm`` last) and adds the result to this run's JSON."""
    pytest.importorskip("torch")
    if request.config.getoption("benchmark_disable", False):
        pytest.skip("timed only when benchmarks run")
    cpu = max(os.sched_getaffinity(0))  # every worker's turns on the same core
    workers = {}
    try:
        for name, mode in modes.items():
            workers[name] = _TorchWorker(mode, cpu)
        samples = {name: [] for name in workers}
        for round_ in range(WARMUP_ROUNDS + ROUNDS):
            for name, worker in workers.items():
                ns = worker.batch()
                if round_ >= WARMUP_ROUNDS:
                    samples[name].append(ns)
    finally:
        status = {name: worker.close() for name, worker in workers.items()}
    failed = {name: workers[name].stderr[-2000:] for name, rc in status.items() if rc != 0}
    assert not failed, failed
    info = {
        "case": "paired",
        "impl": "nbrmm",
        "target": target,
        "resource": "arena",
        "size": NBYTES,
        "ops": BATCH,
        "reference_ns": {
            name: statistics.median(values) for name, values in samples.items() if name != "nbrmm"
        },
    }
    seconds = [ns * BATCH / 1e9 for ns in samples["nbrmm"]]
    group = f"paired {target} {size_id(NBYTES)}"
    request.config.nbrmm_child_benchmarks.append(
        benchmark_entry(request.node.nodeid, group, seconds, info))


@pytest.mark.gpu
def bench_paired_memory_history(request):
    """``torch.empty`` while recording the memory history with Python stacks: nbrmm's
    hook and recorder beside torch's caching allocator and recorder (and both without
    recording)."""
    _torch_workers_paired(
        request,
        {
            "caching": "caching",
            "hook": "hook",
            "torch_history": "caching-history",
            "nbrmm": "hook-history",
        },
        "memory_history",
    )
