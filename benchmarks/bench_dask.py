"""Workload W1: a Dask + CuPy pipeline on dask-cuda clusters, rmm's pool beside nbrmm's,
interleaved.

Two ``LocalCUDACluster`` of one worker each, on the same GPU and alive at once:

``rmm``
    dask-cuda's own set-up, ``rmm_pool_size=POOL_BYTES`` with CuPy pointed at rmm
    (``rmm_allocator_external_lib_list=["cupy"]``), over rmm 26.10.
``nbrmm``
    no ``rmm_*`` option; :class:`nbrmm.dask.NbrmmSetup` registered with the same pool
    (``initial_pool_size=POOL_BYTES``, CuPy's allocator bound to it) and
    ``statistics=False``, which makes the same resource graph as dask-cuda's.

Each round computes the pipeline of ``dask_workload.py`` ((``N`` / ``CHUNK``)² blocks of
``CHUNK``² float32, about a hundred CuPy allocations per block) once on each cluster, the
``rmm`` cluster in pytest-benchmark's untimed setup right before the timed ``nbrmm`` run,
as ``bench_paired.py`` does. Every round builds a new graph (new task keys), so no cluster
can reuse results of a previous round. The result is checked against NumPy.

``extra_info``: ``case`` ``paired``, ``target`` ``dask_cupy``, ``ops`` 1 (one pipeline
per timed call), ``reference_ns`` ``{"rmm": median ns per pipeline}``, and the workload's
shape (``blocks``, ``size`` of a block in bytes, ``steps``, ``pool_bytes``).
``benchmark-analysis/report.py`` reports it as W1, the ratio of the medians, nbrmm / rmm
(target: at most 0.95).

Without a GPU, ``bench_dask_host_pipeline`` runs the same harness once, untimed, on two
plain ``distributed.LocalCluster`` with NumPy blocks (one with the plugin over host
memory), as a smoke test; it is skipped when benchmarks are timed.
"""

import contextlib
import itertools
import warnings

import dask_workload
import numpy as np
import pytest
from bench_paired import Interleaved, _timed
from support import import_library, record

#: Each worker's pool.
POOL_BYTES = 4 << 30
#: The GPU workload: N x N float32 in CHUNK x CHUNK blocks, STEPS relaxation steps.
N, CHUNK, STEPS = 4096, 256, 16
#: Timed rounds per cluster, after untimed warm-up rounds (and the first, checked round,
#: in which CuPy compiles its kernels).
ROUNDS, WARMUP_ROUNDS = 15, 2
TIMEOUT = 120
#: No dashboard, and the scheduler's HTTP server on a free port (two clusters run at once).
NO_DASHBOARD = dict(dashboard_address=":0", scheduler_kwargs={"dashboard": False})


@contextlib.contextmanager
def _third_party_warnings_shown():
    """Cluster start and stop: dask-cuda and distributed warn about the machine (CPU
    affinity, NVML, ports); such warnings are shown rather than raised, here only."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        yield


class _Clusters:
    """Named clusters and their clients, closed together."""

    def __init__(self):
        self._stack = contextlib.ExitStack()
        self.clients = {}

    def add(self, name, make_cluster):
        """Start ``make_cluster()`` and a client of it, as ``clients[name]``."""
        distributed = import_library("distributed")
        with _third_party_warnings_shown():
            cluster = self._stack.enter_context(make_cluster())
            client = self._stack.enter_context(
                distributed.Client(cluster, timeout=TIMEOUT, set_as_default=False))
            client.wait_for_workers(1, timeout=TIMEOUT)
        self.clients[name] = client
        return client

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        with _third_party_warnings_shown():
            self._stack.close()


def _run_pair(benchmark, clusters, xp_name, meta, n, chunk, steps, rounds, warmup_rounds):
    """Times the pipeline on ``clusters.clients["nbrmm"]``, each round right after it ran
    on the reference cluster; checks every cluster's first result."""
    da = import_library("dask.array")
    round_ids = itertools.count()
    want = dask_workload.expected(n, chunk, steps)

    def compute(client):
        graph = dask_workload.pipeline(da, xp_name, meta, n, chunk, steps, next(round_ids))
        return client.compute(graph, sync=True)

    for client in clusters.clients.values():
        np.testing.assert_allclose(compute(client), want, rtol=1e-3, atol=1e-3)
    for _ in range(warmup_rounds):  # untimed, so that no warm-up round is in a median
        for client in clusters.clients.values():
            compute(client)

    subject = clusters.clients["nbrmm"]
    references = {name: (lambda c=client: _timed(lambda: compute(c), ops=1))
                  for name, client in clusters.clients.items() if name != "nbrmm"}
    Interleaved(benchmark, references).run(lambda: compute(subject), ops=1, rounds=rounds,
                                           warmup_rounds=0)


@pytest.mark.gpu
def bench_dask_cupy_pipeline(benchmark):
    """The pipeline with CuPy blocks on dask-cuda workers: nbrmm's plugin vs rmm's pool."""
    cupy = import_library("cupy")
    dask_cuda = import_library("dask_cuda")
    import_library("rmm")
    from nbrmm.dask import NbrmmSetup

    common = dict(CUDA_VISIBLE_DEVICES="0", n_workers=1, threads_per_worker=1, protocol="tcp",
                  **NO_DASHBOARD)
    with _Clusters() as clusters:
        clusters.add("rmm", lambda: dask_cuda.LocalCUDACluster(
            rmm_pool_size=POOL_BYTES, rmm_allocator_external_lib_list=["cupy"], **common))
        client = clusters.add("nbrmm", lambda: dask_cuda.LocalCUDACluster(**common))
        client.register_plugin(NbrmmSetup(initial_pool_size=POOL_BYTES,
                                          external_lib_list=["cupy"], statistics=False))
        record(benchmark, "paired", "nbrmm", target="dask_cupy", resource="pool",
               size=CHUNK * CHUNK * 4, blocks=(N // CHUNK) ** 2, steps=STEPS,
               pool_bytes=POOL_BYTES)
        benchmark.group = "paired dask.array + CuPy pipeline"
        meta = cupy.empty((0, 0), dtype=cupy.float32)
        _run_pair(benchmark, clusters, "cupy", meta, N, CHUNK, STEPS, ROUNDS, WARMUP_ROUNDS)


def bench_dask_host_pipeline(benchmark, request):
    """The harness, untimed, on two CPU clusters with NumPy blocks (one with nbrmm's
    plugin over host memory): a smoke test for machines without a GPU."""
    if not request.config.getoption("benchmark_disable", False):
        pytest.skip("a smoke test of the harness, run untimed; the GPU case is the benchmark")
    distributed = import_library("distributed")
    from nbrmm.dask import NbrmmSetup

    common = dict(n_workers=1, processes=True, threads_per_worker=1, **NO_DASHBOARD)
    with _Clusters() as clusters:
        clusters.add("plain", lambda: distributed.LocalCluster(**common))
        client = clusters.add("nbrmm", lambda: distributed.LocalCluster(**common))
        client.register_plugin(NbrmmSetup(factory=dask_workload.host_resource,
                                          initial_pool_size="1MiB"))
        record(benchmark, "paired", "nbrmm", target="dask_host", resource="pool",
               size=64 * 64 * 4, blocks=16, steps=2, pool_bytes=1 << 20)
        _run_pair(benchmark, clusters, "numpy", np.empty((0, 0), np.float32), 256, 64, 2,
                  rounds=1, warmup_rounds=0)
        (resource,) = client.run(dask_workload.current_resource).values()
        assert resource == "StatisticsResourceAdaptor"  # the plugin's graph, on the worker
