"""Workloads W2 and W3: a CuPy + PyTorch pipeline on one GPU, and a PyTorch training loop.

``workload_worker.py`` runs one variant per process (torch takes its allocator once per
process, and a caching allocator keeps what it held); see it for the stages and sizes.

W2, one process, one GPU, two libraries
    A CuPy preprocessing stage, then a PyTorch training loop on its result, the two of
    about the same peak size. Variants: each stage alone on its framework's caching
    allocator (``cupy``, ``torch``: the ideal is the larger of their peaks), both stages
    on the two caching allocators (``two_pools``), and both on one nbrmm pool through the
    hooks (``shared``). Targets: the shared pool's peak device memory in use at most 1.1x
    the ideal, its wall time at most 1.05x the two pools'.
W3, a PyTorch training loop alone
    With nbrmm's hook as torch's allocator over an nbrmm pool (``torch_nbrmm``) beside
    torch's caching allocator (``torch``). Target: at most 1.03x the time.

The processes run one at a time on the GPU, the variants interleaved round by round
(``NBRMM_WORKLOAD_REPS`` rounds; the ``cupy`` variant, there only for its peak, in the
first round only). Each process runs the workload once untimed, then
``NBRMM_WORKLOAD_RUNS`` timed runs.

The results join this run's JSON (``conftest.py``), one entry per workload: the subject's
timed runs are the statistics, and ``extra_info`` has ``case`` ``workload``,
``workload`` (``W2``, ``W3``), ``impl`` ``nbrmm``, ``ops`` 1, ``reference_ns`` (median ns
per run of each reference variant) and ``variants``: per variant, ``wall_s`` (every timed
run), ``first_s``, ``peak_used_bytes`` (the largest over its processes of the sampled
device memory in use above the CUDA context), ``pool_peak_bytes`` and ``pools`` (the
pools' own peaks, largest over the processes), ``stage_peaks`` and ``processes``; and the
workload's ``config``. ``benchmark-analysis/report.py`` computes the ratios.

Without a GPU, ``bench_workloads_host`` runs the harness once, untimed, with the
``host`` variant (the CuPy stage's code on NumPy), as a smoke test; it is skipped when
benchmarks are timed.
"""

import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys

import pytest
from support import benchmark_entry

WORKER = pathlib.Path(__file__).with_name("workload_worker.py")
#: Seconds one worker process may take.
TIMEOUT = 600


def run_worker(variant, env=None):
    """Runs one variant in a worker process; its result (a dict)."""
    proc = subprocess.run(
        [sys.executable, str(WORKER), variant],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=WORKER.parent,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"workload worker {variant!r} failed (exit status "
                           f"{proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def merge(results):
    """One variant's processes summed up: every timed run, the largest peaks."""
    pools = {}
    for r in results:
        for key, value in r["pools"].items():
            pools[key] = max(pools.get(key, 0), value)

    def largest(key):
        values = [r[key] for r in results if r[key] is not None]
        return max(values) if values else None

    stage_peaks = {}
    for r in results:
        for stage, value in r["stage_peaks"].items():
            stage_peaks[stage] = max(stage_peaks.get(stage, 0), value)
    return {
        "wall_s": [s for r in results for s in r["wall_s"]],
        "first_s": [r["first_s"] for r in results],
        "peak_used_bytes": largest("peak_used_bytes"),
        "pool_peak_bytes": largest("pool_peak_bytes"),
        "pools": pools,
        "stage_peaks": stage_peaks,
        "loss": [r["loss"] for r in results],
        "processes": len(results),
    }


def run_interleaved(rounds, variants, once=()):
    """Every variant's processes, round by round in the order given (those in ``once``
    in the first round only); ``{variant: merged results}`` and the config."""
    results = {v: [] for v in variants}
    for round_ in range(rounds):
        for variant in variants:
            if variant in once and round_ > 0:
                continue
            results[variant].append(run_worker(variant))
    config = next(iter(results.values()))[0]["config"]
    return {v: merge(rs) for v, rs in results.items()}, config


def entry(nodeid, workload, subject, references, variants, config):
    """The pytest-benchmark entry of one workload: the subject's runs as the statistics."""
    info = {
        "case": "workload",
        "workload": workload,
        "impl": "nbrmm",
        "ops": 1,
        "reference_ns": {
            name: statistics.median(variants[name]["wall_s"]) * 1e9 for name in references
        },
        "variants": variants,
        "config": config,
    }
    return benchmark_entry(f"{nodeid}[{workload}]", f"workload {workload}",
                           variants[subject]["wall_s"], info)


@pytest.fixture(scope="module")
def workload_runs(request):
    """Every variant of W2 and W3, interleaved, once for the module."""
    if request.config.getoption("benchmark_disable", False):
        pytest.skip("timed only when benchmarks run")
    for name in ("torch", "cupy"):  # imported by the workers only
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed")
    rounds = int(os.environ.get("NBRMM_WORKLOAD_REPS", "2"))
    return run_interleaved(rounds, ("cupy", "torch", "torch_nbrmm", "two_pools", "shared"),
                           once=("cupy",))


@pytest.mark.gpu
def bench_workload_w2_cupy_then_torch(request, workload_runs):
    """W2: CuPy preprocessing then PyTorch training, on one nbrmm pool."""
    variants, config = workload_runs
    w2 = {k: variants[k] for k in ("cupy", "torch", "two_pools", "shared")}
    request.config.nbrmm_child_benchmarks.append(
        entry(request.node.nodeid, "W2", "shared", ("two_pools",), w2, config))
    # The stages really ran: every variant trained, and memory was sampled.
    assert all(v["peak_used_bytes"] > 0 for v in w2.values())
    assert all(loss is not None and loss == loss for loss in w2["shared"]["loss"])


@pytest.mark.gpu
def bench_workload_w3_torch_training(request, workload_runs):
    """W3: PyTorch training with nbrmm's hook as torch's allocator."""
    variants, config = workload_runs
    w3 = {k: variants[k] for k in ("torch", "torch_nbrmm")}
    request.config.nbrmm_child_benchmarks.append(
        entry(request.node.nodeid, "W3", "torch_nbrmm", ("torch",), w3, config))
    assert all(loss is not None and loss == loss for loss in w3["torch_nbrmm"]["loss"])


def bench_workloads_host(request):
    """The harness, untimed, with the host variant (NumPy): a smoke test for machines
    without a GPU."""
    if not request.config.getoption("benchmark_disable", False):
        pytest.skip("a smoke test of the harness, run untimed; the GPU cases are the benchmark")
    env = dict(os.environ, NBRMM_WORKLOAD_RUNS="2")
    results = [run_worker("host", env) for _ in range(2)]
    variants = {"host": merge(results)}
    e = entry(request.node.nodeid, "host", "host", ("host",), variants, results[0]["config"])
    assert e["stats"]["rounds"] == 4 and e["stats"]["median"] > 0
    assert e["extra_info"]["variants"]["host"]["processes"] == 2
    assert e["extra_info"]["reference_ns"]["host"] == pytest.approx(e["stats"]["median"] * 1e9)
