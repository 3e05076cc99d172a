"""What the benchmarks share: the libraries compared, resource factories, the C++ floor
measured in the same process, a thread team, and the machine description.

Every benchmark records what it measured in ``benchmark.extra_info`` (see ``record``);
``benchmark-analysis/report.py`` builds its tables from those keys alone:

``case``
    ``buffer``, ``allocate``, ``get_current``, ``set_current``, ``copy``, ``threads``,
    ``reference``, ``paired`` or ``workload``.
``impl``
    ``nbrmm``, ``rmm``, ``cupy``, ``torch``, ``cuda.core`` or ``python``.
``resource``
    The resource kind (``RESOURCE_KINDS``); other libraries' allocators carry the kind
    of nbrmm resource they are compared with (a caching pool: ``pool``; a CUDA
    stream-ordered pool: ``async``).
``size``
    Bytes per allocation or copy.
``floor_ns``, ``floor_kind``
    librmm's own cost of the same work in C++ (the test suite's ``nbrmm_testing`` extension), and what that
    work was (``allocate+deallocate``; ``device_buffer`` for buffers of 0 bytes).
``device_buffer_ns``
    Buffers: an ``rmm::device_buffer`` created and destroyed in C++.
``direction``, ``floor_gbps``, ``gbps``
    Copies.
``threads``, ``ops``
    Thread throughput: threads used and allocations per timed call. Paired cases:
    ``ops`` is the number of calls in each timed batch.
``target``, ``reference_ns``
    Paired cases (``bench_paired.py``, ``bench_dask.py``): which target they time, and the
    median ns per call of each reference timed alongside (``floor``, ``cupy``, ``rmm``,
    ``torch``, ``cuda.core``).
``blocks``, ``steps``, ``pool_bytes``
    The Dask pipeline (``bench_dask.py``, workload W1): blocks per round, relaxation
    steps per block, and each worker's pool.
``workload``, ``variants``, ``config``
    Workloads W2 and W3 (``bench_workloads.py``, case ``workload``): which one, each
    variant's runs and peaks of memory, and the sizes.
"""

import ctypes
import gc
import importlib
import importlib.metadata
import pathlib
import platform
import statistics
import subprocess
import sys
import threading
import time
import warnings

import pytest

import nbrmm
import nbrmm.mr
from nbrmm import _nbrmm

# librmm's cost in C++ loops: the test suite's C++ extension (tests/extensions.py).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from extensions import testing as _testing  # noqa: E402

HAVE_GPU = nbrmm.get_device_count() > 0

KiB = 1 << 10
MiB = 1 << 20

#: The resource kinds every per-resource case runs over. ``host`` (Python callables
#: over malloc) needs no GPU, so each case also runs on a CPU-only machine.
RESOURCE_KINDS = ("host", "cuda", "pool", "arena", "async", "binning")

#: Size of every pool and arena the benchmarks create.
POOL_BYTES = 256 * MiB

#: Libraries whose resources and buffers are compared case by case.
IMPLS = ("nbrmm", "rmm")

#: Distributions whose versions go into the JSON.
DISTRIBUTIONS = (
    "nbrmm",
    "librmm-cu13",
    "rmm-cu13",
    "cupy-cuda13x",
    "torch",
    "cuda-core",
    "cuda-bindings",
    "numpy",
    "nanobind",
    "pytest-benchmark",
)


def size_id(size):
    """A readable test id for a size in bytes."""
    for unit, name in ((MiB, "MiB"), (KiB, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{name}"
    return f"{size}B"


def resource_params(kinds=RESOURCE_KINDS):
    """``pytest.param`` per resource kind; every kind but ``host`` needs a GPU."""
    return [pytest.param(k, marks=() if k == "host" else pytest.mark.gpu, id=k) for k in kinds]


def record(benchmark, case, impl, **info):
    """Records what a benchmark measures (keys documented in this module) and groups
    the terminal table by case and size. Call it before timing."""
    benchmark.extra_info.update(case=case, impl=impl, **info)
    parts = [case]
    parts += [str(info[key]) for key in ("direction", "resource") if key in info]
    if "threads" in info:
        parts.append(f"{info['threads']} threads")
    if "size" in info:
        parts.append(size_id(info["size"]))
    benchmark.group = " ".join(parts)


def benchmark_entry(nodeid, group, seconds, extra_info):
    """A pytest-benchmark JSON entry for rounds timed outside pytest-benchmark (``seconds``:
    one sample per round) by the test ``nodeid``, to add to the run's JSON as conftest.py
    adds child processes'."""
    ordered = sorted(seconds)
    n = len(ordered)
    q1, _, q3 = statistics.quantiles(ordered, n=4) if n > 1 else ordered * 3
    mean = statistics.fmean(ordered)
    return {
        "group": group,
        "name": nodeid.rpartition("::")[2],
        "fullname": nodeid,
        "params": None,
        "param": None,
        "extra_info": extra_info,
        "options": {"timer": "perf_counter_ns (in worker processes)", "disable_gc": True},
        "stats": {
            "min": ordered[0],
            "max": ordered[-1],
            "mean": mean,
            "stddev": statistics.stdev(ordered) if n > 1 else 0.0,
            "rounds": n,
            "median": statistics.median(ordered),
            "iqr": q3 - q1,
            "q1": q1,
            "q3": q3,
            "iterations": 1,
            "total": sum(ordered),
            "ops": 1 / mean if mean > 0 else 0.0,
        },
    }


def median_s(benchmark):
    """The median seconds per call, or None when benchmarks are disabled."""
    stats = getattr(benchmark, "stats", None)
    return None if stats is None else stats.stats.median


# ---------------------------------------------------------------------------------
# Host memory behind the ``host`` kind
# ---------------------------------------------------------------------------------

_libc = ctypes.CDLL(None)
_libc.aligned_alloc.restype = ctypes.c_void_p
_libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]


def _host_allocate(nbytes, stream):
    # librmm's resources return 256-byte aligned memory, and nbrmm holds Python ones to it.
    ptr = _libc.aligned_alloc(256, (max(nbytes, 1) + 255) // 256 * 256)
    if not ptr:
        raise MemoryError(f"aligned_alloc({nbytes}) failed")
    return ptr


def _host_deallocate(ptr, nbytes, stream):
    _libc.free(ptr)


# ---------------------------------------------------------------------------------
# Libraries and resources
# ---------------------------------------------------------------------------------


#: Runs a benchmark once per library of ``IMPLS`` through the ``impl`` fixture. Used as
#: the outermost decorator, so the libraries alternate (nbrmm and rmm measure each case
#: back to back).
over_impls = pytest.mark.parametrize("impl", IMPLS, indirect=True)


def import_library(name):
    """Imports another library (skipping where it is not installed). Warnings that its
    import raises are not nbrmm's: they are silenced, whatever the warning filters say."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip(name)


def import_impl(name):
    """The module of library ``name`` (nbrmm, or rmm with its ``mr`` submodule)."""
    if name == "nbrmm":
        return nbrmm
    mod = import_library(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module(f"{name}.mr")
    return mod


def make_resource(lib, kind):
    """A resource of ``kind`` from library ``lib`` (nbrmm or rmm), built with the same
    arguments for both."""
    mr = lib.mr
    if kind == "host":
        return mr.CallbackMemoryResource(_host_allocate, _host_deallocate)
    if kind == "cuda":
        return mr.CudaMemoryResource()
    if kind == "pool":
        return mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=POOL_BYTES)
    if kind == "arena":
        return mr.ArenaMemoryResource(mr.CudaMemoryResource(), arena_size=POOL_BYTES)
    if kind == "async":
        return mr.CudaAsyncMemoryResource()
    if kind == "binning":
        upstream = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=POOL_BYTES)
        return mr.BinningMemoryResource(upstream, min_size_exponent=8, max_size_exponent=22)
    raise ValueError(f"unknown resource kind {kind!r}")


def buffer_maker(impl, size, mr):
    """A callable that creates and destroys one buffer, spelled as users of ``impl`` do."""
    if impl is nbrmm:
        Buffer = nbrmm.Buffer
        return lambda: Buffer(size, mr=mr)
    DeviceBuffer = impl.DeviceBuffer
    return lambda: DeviceBuffer(size=size, mr=mr)


class Resources:
    """One resource per (library, kind) for the whole session."""

    def __init__(self):
        self._cache = {}

    def get(self, lib, kind):
        key = (lib.__name__, kind)
        if key not in self._cache:
            self._cache[key] = make_resource(lib, kind)
        return self._cache[key]

    def clear(self):
        self._cache.clear()
        gc.collect()


# ---------------------------------------------------------------------------------
# The C++ floor
# ---------------------------------------------------------------------------------


def timed_median(fn, quick, target_ns=4e6, repeats=5, min_iterations=20, max_iterations=200_000):
    """Median ns per iteration of ``fn(iterations) -> ns``: a short trial sets the
    iteration count so that one repeat takes about ``target_ns``. ``quick`` (benchmarks
    disabled) runs one tiny repeat, to check that the code works."""
    if quick:
        return fn(2)
    trial = fn(min_iterations)
    iterations = int(min(max(target_ns / max(trial, 1.0), min_iterations), max_iterations))
    return statistics.median(fn(iterations) for _ in range(repeats))


class Floor:
    """librmm's own cost, measured in C++ on nbrmm resources, cached per session so
    that every case of one resource and size is compared with the same figure."""

    def __init__(self, resources, quick):
        self.resources = resources
        self.quick = quick
        self._cache = {}

    def allocate_ns(self, kind, size):
        """ns per ``allocate`` + ``deallocate`` round trip of ``size`` bytes."""
        key = ("allocate", kind, size)
        if key not in self._cache:
            mr = self.resources.get(nbrmm, kind)
            self._cache[key] = timed_median(
                lambda n: _testing.allocate_round_trip_ns(mr, size, n), self.quick
            )
        return self._cache[key]

    def device_buffer_ns(self, kind, size):
        """ns per ``rmm::device_buffer`` of ``size`` bytes created and destroyed."""
        key = ("device_buffer", kind, size)
        if key not in self._cache:
            mr = self.resources.get(nbrmm, kind)
            self._cache[key] = timed_median(
                lambda n: _testing.device_buffer_round_trip_ns(mr, size, n), self.quick
            )
        return self._cache[key]

    def buffer_info(self, kind, size):
        """extra_info for a buffer of ``size`` bytes: the floor is the allocation round
        trip, or for 0 bytes (nothing is allocated) the device_buffer itself."""
        dbuf = self.device_buffer_ns(kind, size)
        if size == 0:
            return {"floor_ns": dbuf, "floor_kind": "device_buffer", "device_buffer_ns": dbuf}
        return {
            "floor_ns": self.allocate_ns(kind, size),
            "floor_kind": "allocate+deallocate",
            "device_buffer_ns": dbuf,
        }

    def memcpy_ns(self, dst, src, size, iterations):
        """ns per raw ``cudaMemcpyAsync`` + ``cudaStreamSynchronize`` of ``size`` bytes."""
        if self.quick:
            return _testing.memcpy_ns(dst, src, size, 1)
        _testing.memcpy_ns(dst, src, size, 1)  # warm up
        return statistics.median(_testing.memcpy_ns(dst, src, size, iterations) for _ in range(5))


# ---------------------------------------------------------------------------------
# Threads
# ---------------------------------------------------------------------------------


class ThreadTeam:
    """``threads`` worker threads that each run ``work()`` once per call, started once
    so that the timed calls include no thread start-up. Each worker first calls
    ``setup()`` when given (e.g. to make a CUDA context current in that thread)."""

    def __init__(self, threads, work, setup=None):
        self.threads = threads
        self._work = work
        self._setup = setup
        self._start = threading.Barrier(threads + 1)
        self._done = threading.Barrier(threads + 1)
        self._stop = False
        self._errors = []
        self._workers = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for w in self._workers:
            w.start()

    def _run(self):
        if self._setup is not None:
            try:
                self._setup()
            except BaseException as e:  # reported by __call__
                self._errors.append(e)
        while True:
            self._start.wait()
            if self._stop:
                return
            try:
                self._work()
            except BaseException as e:  # reported by __call__
                self._errors.append(e)
            self._done.wait()

    def __call__(self):
        self._start.wait()
        self._done.wait()
        if self._errors:
            raise self._errors[0]

    def close(self):
        self._stop = True
        self._start.wait()
        for w in self._workers:
            w.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------------
# Machine description
# ---------------------------------------------------------------------------------


def _nvidia_smi():
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    line = out.strip().splitlines()[0] if out.strip() else ""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 3:
        return None
    return {"name": fields[0], "driver": fields[1], "memory": fields[2]}


def describe_machine():
    """GPU, driver and library versions, for the report."""
    versions = {}
    for dist in DISTRIBUTIONS:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    cuda = nbrmm._nbrmm.get_versions()
    info = {
        "python": platform.python_version(),
        "versions": versions,
        "cuda_driver_api": cuda["cuda_driver"],
        "cuda_runtime": cuda["cuda_runtime"],
        "gpu": None,
        "driver": None,
    }
    smi = _nvidia_smi()
    if smi is not None:
        info["gpu"] = f"{smi['name']} ({smi['memory']})"
        info["driver"] = smi["driver"]
    elif HAVE_GPU:
        dev = nbrmm.get_device_info(nbrmm.get_current_device())
        info["gpu"] = f"{dev['name']} ({dev['total_memory'] >> 20} MiB)"
    info["recorded"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return info


# ---------------------------------------------------------------------------------
# Other libraries' allocators
# ---------------------------------------------------------------------------------

#: Libraries with allocators of their own, and the nbrmm resource kind each one is
#: compared with: CuPy's MemoryPool and PyTorch's caching allocator are caching pools
#: over cudaMalloc; cuda.core's DeviceMemoryResource is a CUDA stream-ordered pool.
OTHER_LIBRARIES = {"cupy": "pool", "torch": "pool", "cuda.core": "async"}


def cuda_core_device():
    """cuda.core's Device for the current device (made current), a stream of it and its
    memory resource; skips when cuda.core is not installed."""
    try:
        Device = import_library("cuda.core").Device
    except AttributeError:  # releases before 1.0
        Device = import_library("cuda.core.experimental").Device
    dev = Device()
    dev.set_current()
    return dev, dev.create_stream(), dev.memory_resource


def other_buffer_maker(name, size):
    """A callable that creates and destroys one buffer of ``size`` bytes with library
    ``name``'s own allocator, and the objects it needs kept alive."""
    if name == "cupy":
        cupy = import_library("cupy")
        pool = cupy.cuda.MemoryPool()
        malloc = pool.malloc
        return (lambda: malloc(size)), pool
    if name == "torch":
        torch = import_library("torch")
        empty, dtype, device = torch.empty, torch.uint8, torch.device("cuda")
        return (lambda: empty(size, dtype=dtype, device=device)), None
    if name == "cuda.core":
        dev, stream, mr = cuda_core_device()
        allocate = mr.allocate

        def make():
            allocate(size, stream=stream).close(stream)

        return make, (dev, stream, mr)
    raise ValueError(f"unknown library {name!r}")


def checked(make):
    """Runs ``make`` once (initialising the library outside the timing); skips, saying
    why, when the library cannot do it."""
    try:
        make()
    except Exception as e:  # the library refuses this case (e.g. 0 bytes)
        pytest.skip(f"not supported: {type(e).__name__}: {e}")
    return make
