"""A worker process for ``bench_workloads.py``: one variant of the W2 / W3 workloads.

    python benchmarks/workload_worker.py VARIANT

Each variant runs in a process of its own, because torch takes its allocator once per
process (before its first CUDA allocation) and because a caching allocator keeps what it
once held: a process measures the peak of one allocator set-up, from a clean device.

The workload has two stages of about the same peak size (``NBRMM_WORKLOAD_GIB`` each):

*CuPy preprocessing*
    ``CHUNKS`` chunks of raw float32 samples, each normalised, mixed through a square
    random matrix and projected to ``FEATURES`` features: several chunk-sized arrays are
    alive at once and freed at the end of every chunk. The chunks' features are joined
    into the data set (``rows`` x ``FEATURES``) and its labels.
*PyTorch training*
    A small MLP (``FEATURES`` -> ``HIDDEN`` -> ``HIDDEN`` -> ``HIDDEN`` -> 1) trained with
    Adam for ``NBRMM_WORKLOAD_STEPS`` steps on batches drawn from the data set, which
    torch reads from CuPy's memory through DLPack (no copy). The batch makes the
    activations the stage's working set.

Variants (what is run, and who allocates):

``cupy``
    The CuPy stage alone, on CuPy's default ``MemoryPool``.
``torch``
    The PyTorch stage alone (its data set made by torch), on torch's caching allocator.
``torch_nbrmm``
    The same, with nbrmm's hook (``rmm_torch_allocator``) as torch's allocator, over an
    nbrmm pool made the current device resource.
``two_pools``
    Both stages, CuPy on its ``MemoryPool``, torch on its caching allocator.
``shared``
    Both stages on one nbrmm pool (the current device resource), CuPy through
    ``rmm_cupy_allocator`` and torch through ``rmm_torch_allocator``.
``host``
    The CuPy stage's code with NumPy on the host, tiny: a check of the harness on
    machines without a GPU.

The nbrmm pool is ``CudaAsyncMemoryResource()`` (CUDA's stream-ordered pool: it grows
as the workload needs, with no size to choose) under a ``StatisticsResourceAdaptor`` (its
peak of bytes in use); ``NBRMM_WORKLOAD_POOL=pool`` takes
``PoolMemoryResource(CudaMemoryResource(), initial_pool_size=NBRMM_WORKLOAD_POOL_GIB)``
instead, which grows by doubling once a workload outgrows its initial size (a 2 GiB pool
under a 2.2 GiB workload holds 4 GiB) unless ``NBRMM_WORKLOAD_POOL_MAX_GIB`` bounds it (a
workload that needs more then fails with ``MemoryError``). ``NBRMM_WORKLOAD_RELEASE_GIB`` gives the
stream-ordered pool a release threshold (by default it keeps all it once held): at each
synchronization it gives the device the free memory it holds beyond that size. The worker runs the workload once untimed (CuPy compiles its
kernels, the pools grow), then ``NBRMM_WORKLOAD_RUNS`` timed runs; every run ends with the
device synchronized and every array of the run dropped (the pools keep what they cache).
A thread samples ``cudaMemGetInfo`` every ``NBRMM_WORKLOAD_SAMPLE_MS`` milliseconds for
the whole process; the baseline is taken once the CUDA context exists, before the first
allocation.

The last line of stdout is ``RESULT`` and a JSON object: ``variant``, ``wall_s`` (the
timed runs), ``first_s`` (the untimed run), ``peak_used_bytes`` (sampled device memory in
use, less the baseline), ``baseline_used_bytes``, ``samples``, ``pools`` (each pool's own
peak: ``cupy_total_bytes``, ``torch_max_reserved``, ``torch_max_allocated``,
``nbrmm_pool_size``, ``nbrmm_peak_bytes``, those that exist in the variant),
``pool_peak_bytes`` (the bytes the variant's pools held from the device at their peak),
``stage_peaks`` (used device memory above the baseline after each stage of the first
run), ``loss`` (the last training loss) and ``config``.
"""

import gc
import json
import math
import os
import sys
import threading
import time

GiB = 1 << 30
VARIANTS = ("cupy", "torch", "torch_nbrmm", "two_pools", "shared", "host")
#: Raw samples per row of the CuPy stage, features per row of the data set, hidden width.
RAW, FEATURES, HIDDEN = 1024, 128, 512
CHUNKS = 5


def env_float(name, default):
    """A number from the environment (``default`` when unset)."""
    value = os.environ.get(name)
    try:
        return default if value in (None, "") else float(value)
    except ValueError:
        raise SystemExit(f"{name} must be a number, not {value!r}") from None


def env_gib_or_none(name):
    """A size in GiB from the environment, as bytes rounded down to 256; None when unset."""
    gib = env_float(name, None)
    return None if gib is None else int(gib * GiB) // 256 * 256


def config():
    """The workload's sizes, from ``NBRMM_WORKLOAD_*`` (see the module docstring)."""
    gib = env_float("NBRMM_WORKLOAD_GIB", 2.0)
    stage = gib * GiB
    # CuPy stage: about four raw chunks alive at once, plus the data set and its copy.
    chunk_rows = max(1024, int(stage / (5 * RAW * 4)) // 1024 * 1024)
    rows = CHUNKS * chunk_rows
    # torch stage: about five batch x HIDDEN float32 arrays alive in the backward pass,
    # beside the data set.
    dataset = rows * FEATURES * 4
    batch = max(1024, int((stage - dataset) / (5 * HIDDEN * 4)) // 1024 * 1024)
    return {
        "gib": gib,
        "chunk_rows": chunk_rows,
        "rows": rows,
        "raw": RAW,
        "features": FEATURES,
        "hidden": HIDDEN,
        "batch": batch,
        "steps": int(env_float("NBRMM_WORKLOAD_STEPS", 200)),
        "runs": int(env_float("NBRMM_WORKLOAD_RUNS", 3)),
        "pool_kind": os.environ.get("NBRMM_WORKLOAD_POOL", "async"),
        "pool_bytes": int(env_float("NBRMM_WORKLOAD_POOL_GIB", gib) * GiB) // 256 * 256,
        "pool_max_bytes": env_gib_or_none("NBRMM_WORKLOAD_POOL_MAX_GIB"),
        "release_bytes": env_gib_or_none("NBRMM_WORKLOAD_RELEASE_GIB"),
        "sample_ms": env_float("NBRMM_WORKLOAD_SAMPLE_MS", 1.0),
        "seed": 2026,
    }


# ---------------------------------------------------------------------------------
# The stages
# ---------------------------------------------------------------------------------


def preprocess(xp, rng, cfg):
    """The CuPy stage (``xp`` is CuPy, or NumPy for the host check): the data set
    (``rows`` x ``features`` float32) and its labels."""
    f32 = xp.float32
    raw_n, feats_n = cfg["raw"], cfg["features"]
    mix = rng.standard_normal((raw_n, raw_n), dtype=f32) / f32(math.sqrt(raw_n))
    project = rng.standard_normal((raw_n, feats_n), dtype=f32) / f32(math.sqrt(raw_n))
    chunks = []
    for _ in range(cfg["rows"] // cfg["chunk_rows"]):
        raw = rng.standard_normal((cfg["chunk_rows"], raw_n), dtype=f32)
        centred = raw - raw.mean(axis=0)
        scaled = centred / (centred.std(axis=0) + f32(1e-6))
        mixed = scaled @ mix
        xp.tanh(mixed, out=mixed)
        features = mixed @ project
        features /= xp.linalg.norm(features, axis=1, keepdims=True) + f32(1e-6)
        chunks.append(features)
        del raw, centred, scaled, mixed, features
    data = xp.concatenate(chunks)
    del chunks
    weights = rng.standard_normal((feats_n,), dtype=f32)
    labels = xp.sin(data @ weights) + f32(0.1) * rng.standard_normal((cfg["rows"],), dtype=f32)
    return data, labels.astype(f32, copy=False)


def train(torch, data, labels, cfg):
    """The PyTorch stage: an MLP trained on ``data`` / ``labels`` (CUDA tensors); the
    last loss."""
    nn = torch.nn
    torch.manual_seed(cfg["seed"])
    gen = torch.Generator(device="cuda")
    gen.manual_seed(cfg["seed"])
    h = cfg["hidden"]
    model = nn.Sequential(
        nn.Linear(cfg["features"], h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
        nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1),
    ).to("cuda")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rows = data.shape[0]
    loss = None
    for _ in range(cfg["steps"]):
        idx = torch.randint(0, rows, (cfg["batch"],), device="cuda", generator=gen)
        xb, yb = data.index_select(0, idx), labels.index_select(0, idx)
        loss = nn.functional.mse_loss(model(xb).squeeze(1), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del idx, xb, yb
    return float(loss)  # synchronizes


def torch_dataset(torch, cfg):
    """The data set of the torch stage alone: the CuPy stage's shapes, made by torch."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(cfg["seed"])
    data = torch.randn(cfg["rows"], cfg["features"], device="cuda", generator=gen)
    weights = torch.randn(cfg["features"], device="cuda", generator=gen)
    return data, torch.sin(data @ weights)


# ---------------------------------------------------------------------------------
# Device memory in use
# ---------------------------------------------------------------------------------


class UsedMemory:
    """Samples the device memory in use (``cudaMemGetInfo``) in a thread; ``peak`` and
    ``now()`` are bytes above the baseline taken at start."""

    def __init__(self, interval_s):
        import nbrmm

        self._info = nbrmm.available_device_memory
        self.baseline = self._used()
        self.peak = 0
        self.samples = 0
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _used(self):
        free, total = self._info()
        return total - free

    def now(self):
        used = self._used() - self.baseline
        self.peak = max(self.peak, used)
        return used

    def peak_so_far(self):
        self.now()
        return self.peak

    def _run(self):
        while not self._stop.wait(self._interval):
            self.now()
            self.samples += 1

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.now()


# ---------------------------------------------------------------------------------
# Variants
# ---------------------------------------------------------------------------------


def nbrmm_pool(cfg):
    """The nbrmm pool, under a statistics adaptor, made the current device resource."""
    import nbrmm.mr

    if cfg["pool_kind"] == "pool":
        pool = nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource(),
                                           initial_pool_size=cfg["pool_bytes"],
                                           maximum_pool_size=cfg["pool_max_bytes"])
    elif cfg["pool_kind"] == "async":
        pool = nbrmm.mr.CudaAsyncMemoryResource(release_threshold=cfg["release_bytes"])
    else:
        raise ValueError(f"NBRMM_WORKLOAD_POOL: 'async' or 'pool', got {cfg['pool_kind']!r}")
    stats = nbrmm.mr.StatisticsResourceAdaptor(pool)
    nbrmm.mr.set_current_device_resource(stats)
    return pool, stats


def run_host(cfg):
    """The ``host`` variant: the CuPy stage's code with NumPy, at a tiny size."""
    import numpy as np

    small = dict(cfg, chunk_rows=256, rows=CHUNKS * 256, raw=64, features=8)
    walls = []
    for _ in range(1 + cfg["runs"]):
        start = time.perf_counter()
        data, labels = preprocess(np, np.random.default_rng(small["seed"]), small)
        assert data.shape == (small["rows"], small["features"]) and labels.dtype == np.float32
        assert np.isfinite(data).all() and np.isfinite(labels).all()
        del data, labels
        walls.append(time.perf_counter() - start)
    return {"variant": "host", "first_s": walls[0], "wall_s": walls[1:], "peak_used_bytes": None,
            "baseline_used_bytes": None, "samples": 0, "pools": {}, "pool_peak_bytes": None,
            "stage_peaks": {}, "loss": None, "config": small}


def run(variant, cfg):
    if variant == "host":
        return run_host(cfg)
    uses_cupy = variant in ("cupy", "two_pools", "shared")
    uses_torch = variant != "cupy"
    on_nbrmm = variant in ("torch_nbrmm", "shared")

    import nbrmm

    torch = cupy = None
    if uses_torch:
        import torch

        if on_nbrmm:
            from nbrmm.allocators.torch import rmm_torch_allocator

            # Before torch's first CUDA allocation, so that every one goes through nbrmm.
            torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
        matmul = torch.backends.cuda.matmul
        if hasattr(matmul, "fp32_precision"):
            matmul.fp32_precision = "tf32"
        else:
            matmul.allow_tf32 = True
        torch.cuda.init()
    if uses_cupy:
        import cupy

        if on_nbrmm:
            from nbrmm.allocators.cupy import rmm_cupy_allocator

            cupy.cuda.set_allocator(rmm_cupy_allocator)
        cupy.cuda.Device(0).use()
    nbrmm.available_device_memory()  # the CUDA context, before the baseline
    used = UsedMemory(cfg["sample_ms"] / 1e3)
    pool = stats = None
    if on_nbrmm:  # the hooks read the current device resource at each allocation
        pool, stats = nbrmm_pool(cfg)

    def synchronize():
        if torch is not None:
            torch.cuda.synchronize()
        if cupy is not None:
            cupy.cuda.Device().synchronize()

    stage_peaks = {}
    loss = None

    def once(first):
        nonlocal loss
        if uses_cupy:
            data, labels = preprocess(cupy, cupy.random.RandomState(cfg["seed"]), cfg)
            synchronize()
            if first:
                stage_peaks["cupy"] = used.peak_so_far()
            if torch is not None:
                data, labels = torch.from_dlpack(data), torch.from_dlpack(labels)
        else:
            data, labels = torch_dataset(torch, cfg)
        if torch is not None:
            loss = train(torch, data, labels, cfg)
            if first:
                stage_peaks["torch"] = used.peak_so_far()
        del data, labels
        gc.collect()
        synchronize()

    walls = []
    for i in range(1 + cfg["runs"]):
        start = time.perf_counter()
        once(first=i == 0)
        walls.append(time.perf_counter() - start)
    used.stop()

    pools = {}
    if uses_cupy and not on_nbrmm:
        pools["cupy_total_bytes"] = cupy.get_default_memory_pool().total_bytes()
    if uses_torch and not on_nbrmm:
        pools["torch_max_reserved"] = torch.cuda.max_memory_reserved()
        pools["torch_max_allocated"] = torch.cuda.max_memory_allocated()
    if on_nbrmm:
        pools["nbrmm_peak_bytes"] = stats.allocation_counts.peak_bytes
        if hasattr(pool, "pool_size"):
            pools["nbrmm_pool_size"] = pool.pool_size()  # a pool never gives memory back
            pool_peak = pools["nbrmm_pool_size"]
        else:  # CUDA's pool: what it held at its peak is in the device's used memory
            pool_peak = used.peak
    else:
        pool_peak = pools.get("cupy_total_bytes", 0) + pools.get("torch_max_reserved", 0)
    return {
        "variant": variant,
        "first_s": walls[0],
        "wall_s": walls[1:],
        "peak_used_bytes": used.peak,
        "baseline_used_bytes": used.baseline,
        "samples": used.samples,
        "pools": pools,
        "pool_peak_bytes": pool_peak,
        "stage_peaks": stage_peaks,
        "loss": loss,
        "config": cfg,
    }


def main(argv):
    if len(argv) != 1 or argv[0] not in VARIANTS:
        raise SystemExit(f"usage: workload_worker.py {{{'|'.join(VARIANTS)}}}")
    result = run(argv[0], config())
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
