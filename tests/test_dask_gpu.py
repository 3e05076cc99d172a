"""nbrmm.dask on a GPU: dask-cuda's LocalCUDACluster with nbrmm's plugin running CuPy
through dask.array, Buffers of device memory between worker processes, the Numba hook,
and the device path of Buffer serialization.

Every test needs a GPU (``gpu`` marker). Missing libraries skip the test, which
``--require-gpu`` turns into a failure.
"""

import contextlib
import faulthandler
import time
import warnings

import numpy as np
import pytest

import nbrmm
import nbrmm.mr
from dask_helpers import (
    counted_cuda_factory,
    counters,
    cupy_state,
    describe,
    inspect_buffer,
    inspect_buffer_bytes,
    make_buffer,
    numba_round_trip,
    pattern,
    to_host,
    wave_block,
)

pytestmark = pytest.mark.gpu

TIMEOUT = 120
#: The whole module is stopped (with every thread's traceback) past this many seconds.
MODULE_DEADLINE = 480
#: The workers' pool: fixed size (maximum = initial), so it cannot take more memory from
#: CUDA than the one block it starts with.
POOL = 1 << 30
#: The dask.array workload: an N x N float32 array in CHUNK x CHUNK blocks.
N, CHUNK = 2048, 256
#: No dashboard, and each scheduler's HTTP server on a free port (two clusters at once).
NO_DASHBOARD = dict(dashboard_address=":0", scheduler_kwargs={"dashboard": False})


def _import(name):
    """Import a library the test needs, skipping when it is missing. Its own import-time
    warnings are not nbrmm's and are not turned into errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip(name)


@contextlib.contextmanager
def _third_party_warnings_shown():
    """Cluster start and stop: dask-cuda and distributed warn about the machine (CPU
    affinity, NVML, ports); such warnings are shown rather than raised, here only."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        yield


@pytest.fixture(scope="module", autouse=True)
def _deadline():
    """Stops the run, with every thread's traceback, if this module hangs."""
    faulthandler.dump_traceback_later(MODULE_DEADLINE, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def cuda_client():
    """A LocalCUDACluster of one worker on device 0, with none of its rmm_* options."""
    dask_cuda = _import("dask_cuda")
    distributed = _import("distributed")
    with contextlib.ExitStack() as stack:
        with _third_party_warnings_shown():
            cluster = stack.enter_context(dask_cuda.LocalCUDACluster(
                CUDA_VISIBLE_DEVICES="0", n_workers=1, threads_per_worker=2, protocol="tcp",
                **NO_DASHBOARD))
            client = stack.enter_context(distributed.Client(cluster, timeout=TIMEOUT))
            client.wait_for_workers(1, timeout=TIMEOUT)
        yield client
        with _third_party_warnings_shown():
            stack.close()


@pytest.fixture(scope="module")
def gpu_client():
    """A distributed LocalCluster of two worker processes, both on device 0."""
    distributed = _import("distributed")
    with contextlib.ExitStack() as stack:
        with _third_party_warnings_shown():
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=2, processes=True, threads_per_worker=1, **NO_DASHBOARD))
            client = stack.enter_context(distributed.Client(cluster, timeout=TIMEOUT))
            client.wait_for_workers(2, timeout=TIMEOUT)
        yield client
        with _third_party_warnings_shown():
            stack.close()


def _only(results):
    (value,) = results.values()
    return value


def _wait(predicate, what, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def test_dask_cuda_without_rmm_options_leaves_rmm_alone(cuda_client):
    from nbrmm.dask import NbrmmSetup

    info = _only(cuda_client.run(describe))
    assert info["device"] == 0
    assert info["chain"] == ["CudaMemoryResource"]  # librmm's initial resource
    cuda_client.register_plugin(NbrmmSetup(initial_pool_size="64MiB"))
    assert _only(cuda_client.run(describe))["chain"] == [
        "StatisticsResourceAdaptor", "PoolMemoryResource", "CudaMemoryResource"]


def test_cupy_workload_through_dask_array_is_served_by_the_pool(cuda_client):
    cupy = _import("cupy")
    da = _import("dask.array")
    from nbrmm.dask import NbrmmSetup, gather_statistics

    # The pool sits on cudaMalloc under a statistics adaptor (the factory), so the test
    # sees what the pool took from CUDA: its one initial block, and nothing else.
    cuda_client.register_plugin(NbrmmSetup(
        factory=counted_cuda_factory, initial_pool_size=POOL, maximum_pool_size=POOL,
        external_lib_list=["cupy"]))
    assert _only(cuda_client.run(cupy_state)) == {"hook": True, "cupy_pool_bytes": 0}

    blocks = N // CHUNK
    x = da.map_blocks(wave_block, chunks=((CHUNK,) * blocks, (CHUNK,) * blocks),
                      dtype=np.float32, meta=cupy.empty((0, 0), dtype=cupy.float32))
    y = (x + x.T) * 0.5
    z = da.exp(-(y * y)) + da.sqrt(da.abs(y))
    result = z.sum(axis=0).map_blocks(to_host, dtype=np.float32, meta=np.empty((0,), np.float32))
    got = cuda_client.compute(result, sync=True)

    i = np.arange(N, dtype=np.float32)
    xs = np.sin(i * 0.01)[:, None] + np.cos(i * 0.02)[None, :]
    ys = (xs + xs.T) * 0.5
    want = (np.exp(-(ys * ys)) + np.sqrt(np.abs(ys))).sum(axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-3)

    state = _only(cuda_client.run(counters))
    top, upstream = state["statistics"]
    # Every block (and every temporary CuPy made) came through the hook ...
    assert top.total_count >= 4 * blocks * blocks
    assert top.total_bytes >= 4 * N * N * 4
    assert top.peak_bytes <= POOL
    # ... and from the pool: CUDA was asked once, for the pool itself.
    assert (upstream.total_count, upstream.current_bytes) == (1, POOL)
    assert state["pool_size"] == POOL
    assert _only(cuda_client.run(cupy_state)) == {"hook": True, "cupy_pool_bytes": 0}

    # The table says the same; the worker frees everything once the results are gone.
    (row,) = gather_statistics(cuda_client, frame=False)
    assert row["device"] == 0 and row["total_count"] >= top.total_count
    del x, y, z, result
    _wait(lambda: _only(cuda_client.run(counters))["statistics"][0].current_bytes == 0,
          "the worker to free the workload's memory")


def test_fraction_of_device_memory_and_metric(cuda_client):
    from nbrmm.dask import NbrmmSetup

    cuda_client.register_plugin(NbrmmSetup(initial_pool_size=0.01))
    # The previous configuration's CuPy hook went with it: CuPy has its own pool back.
    assert _only(cuda_client.run(cupy_state))["hook"] is False
    total = nbrmm.get_device_info(0)["total_memory"]
    expected = int(total * 0.01) // 256 * 256
    assert _only(cuda_client.run(counters))["pool_size"] == expected
    _wait(lambda: any(
        w["metrics"].get("nbrmm", {}).get("nbrmm-total") == expected
        for w in cuda_client.scheduler_info()["workers"].values()),
        "the scheduler to receive the nbrmm metric")
    # The dashboard's RMM plot reads the rmm metric: it shows nbrmm's pool.
    _wait(lambda: any(
        w["metrics"].get("rmm", {}).get("rmm-total") == expected
        for w in cuda_client.scheduler_info()["workers"].values()),
        "the scheduler to receive the rmm metric")


@pytest.mark.parametrize(
    ("options", "chain"),
    [
        (dict(async_alloc=True, initial_pool_size="64MiB", maximum_pool_size="256MiB",
              release_threshold="64MiB"),
         ["StatisticsResourceAdaptor", "LimitingResourceAdaptor", "CudaAsyncMemoryResource"]),
        (dict(managed_memory=True, initial_pool_size="64MiB", maximum_pool_size="128MiB"),
         ["StatisticsResourceAdaptor", "PoolMemoryResource", "ManagedMemoryResource"]),
        (dict(managed_memory=True, track_allocations=True, statistics=False),
         ["TrackingResourceAdaptor", "ManagedMemoryResource"]),
    ],
    ids=["async", "managed-pool", "managed-tracked"],
)
def test_dask_cuda_options_build_dask_cudas_graph(cuda_client, options, chain):
    from nbrmm.dask import NbrmmSetup, gather_statistics

    cuda_client.register_plugin(NbrmmSetup(**options))
    assert _only(cuda_client.run(describe))["chain"] == chain
    made = cuda_client.submit(make_buffer, 1 << 20, pure=False)
    seen = cuda_client.submit(inspect_buffer_bytes, made, pure=False).result(timeout=TIMEOUT)
    assert seen == {"nbytes": 1 << 20, "contents_ok": True, "from_current": True}
    (row,) = gather_statistics(cuda_client, frame=False)
    if options.get("statistics", True):
        assert row["current_bytes"] == 1 << 20 and row["total_count"] == 1
    else:
        assert row["current_bytes"] is None
    del made


def test_log_files_per_worker(cuda_client, tmp_path):
    from nbrmm.dask import NbrmmSetup

    cuda_client.register_plugin(NbrmmSetup(initial_pool_size="64MiB", log_directory=tmp_path))
    assert _only(cuda_client.run(describe))["chain"] == [
        "StatisticsResourceAdaptor", "LoggingResourceAdaptor", "PoolMemoryResource",
        "CudaMemoryResource"]
    cuda_client.submit(make_buffer, 4096, pure=False).result(timeout=TIMEOUT)
    cuda_client.register_plugin(NbrmmSetup())  # tearing down flushes the log
    (name,) = [w["name"] for w in cuda_client.scheduler_info()["workers"].values()]
    log = tmp_path / f"rmm_log_{str(name).split('/')[-1]}.dev0.txt"
    lines = log.read_text().splitlines()
    assert lines[0].startswith("Thread,Time,Action")
    assert any(",allocate," in line and ",4096," in line for line in lines[1:])


def test_device_buffer_sent_between_workers(gpu_client):
    from nbrmm.dask import NbrmmSetup

    gpu_client.register_plugin(NbrmmSetup(initial_pool_size="64MiB"))
    a, b = sorted(gpu_client.scheduler_info()["workers"])
    size = 1 << 20
    made = gpu_client.submit(make_buffer, size, workers=[a], pure=False)
    seen = gpu_client.submit(inspect_buffer, made, workers=[b], pure=False)
    assert seen.result(timeout=TIMEOUT) == {
        "class": "Buffer", "nbytes": size, "from_current": True, "contents_ok": True,
        "current_bytes": size}
    local = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    with nbrmm.mr.using_device_resource(local):
        back = made.result(timeout=TIMEOUT)
    assert back.mr is local and back.tobytes() == pattern(size)


def test_numba_hook_is_bound_to_the_workers_resource(gpu_client):
    _import("numba.cuda")
    from nbrmm.dask import NbrmmSetup

    gpu_client.register_plugin(NbrmmSetup(initial_pool_size="64MiB",
                                          external_lib_list=["numba"]))
    a = sorted(gpu_client.scheduler_info()["workers"])[0]
    got = gpu_client.submit(numba_round_trip, 4096, workers=[a], pure=False).result(
        timeout=TIMEOUT)
    assert got == {"ok": True, "counted": 4096, "manager": "RMMNumbaManager"}


def test_cuda_family_copies_a_foreign_device_frame():
    cupy = _import("cupy")
    from distributed.protocol import deserialize, serialize

    import nbrmm.dask  # noqa: F401 - registers the serializers

    buf = make_buffer(4096)
    header, frames = serialize(buf, serializers=("cuda",))
    assert frames == [buf]
    # What a UCX receiver hands over: device memory of another library.
    foreign = cupy.asarray(np.frombuffer(pattern(4096), dtype=np.uint8))
    target = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    with nbrmm.mr.using_device_resource(target):
        back = deserialize(header, [foreign])
    assert type(back) is nbrmm.Buffer and back.mr is target
    assert back.tobytes() == pattern(4096)
    assert target.allocation_counts.current_bytes == 4096


def test_dask_family_syncs_a_buffer_on_its_own_stream():
    _import("distributed")
    from distributed.protocol import deserialize, serialize

    import nbrmm.dask  # noqa: F401

    stream = nbrmm.Stream()
    buf = nbrmm.Buffer(1 << 20, stream=stream)
    buf.copy_from_host(pattern(1 << 20), stream=stream)  # asynchronous on ``stream``
    header, frames = serialize(buf, serializers=("dask",))
    assert bytes(frames[0]) == pattern(1 << 20)
    assert deserialize(header, frames).tobytes() == pattern(1 << 20)
