"""nbrmm.dask on a real Dask cluster of worker processes, over host memory (no GPU needed).

One ``distributed.LocalCluster`` (two worker processes) serves the whole module; the
tests run in file order and each registers the configuration it checks. Every resource
is built on the workers by a factory from ``dask_helpers.py``.
"""

import faulthandler
import gc
import importlib
import multiprocessing
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import tomllib

import pytest

distributed = pytest.importorskip("distributed")
import dask.sizeof  # noqa: E402
from distributed.protocol import deserialize, serialize  # noqa: E402

import nbrmm  # noqa: E402
import nbrmm.dask  # noqa: E402
import nbrmm.mr  # noqa: E402
from dask_helpers import (  # noqa: E402
    counted_cuda_factory,
    describe,
    failing_factory,
    give_rmm_metric,
    has_stand_in_rmm_metric,
    held_is_current,
    hold,
    host_heap_factory,
    inspect_buffer,
    make_buffer,
    nbrmm_worker_metric,
    not_a_resource_factory,
    release_if_held,
    tagged_buffer,
    release,
    task_nbytes,
)
from helpers import HostHeap, run_python  # noqa: E402
from nbrmm.dask import NbrmmSetup, gather_statistics  # noqa: E402
from nbrmm.dask._diagnostics import add_metrics, remove_metrics  # noqa: E402
from nbrmm.dask._options import Size, parse_size  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
HAVE_GPU = nbrmm.get_device_count() > 0
#: Seconds any one cluster operation may take before the test fails.
TIMEOUT = 60
#: The whole module is stopped (with every thread's traceback) past this many seconds.
MODULE_DEADLINE = 300
#: Bytes of the buffers sent between workers: real contents need CUDA copies, so without
#: a GPU the buffers are empty (the path through Dask is the same).
SENT = 4096 if HAVE_GPU else 0


# --------------------------------------------------------------------------------------
# Options, checked on the client
# --------------------------------------------------------------------------------------

BAD_OPTIONS = [
    (dict(initial_pool_size=-1), ValueError, "initial_pool_size"),
    (dict(initial_pool_size="-0.5"), ValueError, "initial_pool_size: must not be negative"),
    (dict(maximum_pool_size=" -1MB"), ValueError, "maximum_pool_size: must not be negative"),
    (dict(initial_pool_size=2**64), ValueError, "initial_pool_size"),
    (dict(initial_pool_size="lots"), ValueError, "initial_pool_size"),
    (dict(initial_pool_size=""), ValueError, "initial_pool_size"),
    (dict(initial_pool_size="-5GB"), ValueError, "initial_pool_size"),
    (dict(initial_pool_size=float("nan")), ValueError, "initial_pool_size"),
    (dict(initial_pool_size=float("inf")), ValueError, "initial_pool_size"),
    (dict(initial_pool_size="inf GB"), ValueError, "initial_pool_size"),
    (dict(initial_pool_size=True), TypeError, "initial_pool_size"),
    (dict(initial_pool_size=[1]), TypeError, "initial_pool_size"),
    (dict(maximum_pool_size="1GB"), ValueError, "maximum_pool_size: needs initial_pool_size"),
    (dict(initial_pool_size="2GB", maximum_pool_size="1GB"), ValueError, "maximum_pool_size"),
    (dict(managed_memory=1), TypeError, "managed_memory"),
    (dict(managed_memory=True, async_alloc=True), ValueError, "managed_memory"),
    (dict(async_alloc="yes"), TypeError, "async_alloc"),
    (dict(release_threshold="1GB"), ValueError, "release_threshold: needs async_alloc"),
    (dict(async_alloc=True, release_threshold=-3), ValueError, "release_threshold"),
    (dict(log_directory=3), TypeError, "log_directory"),
    (dict(log_directory=""), ValueError, "log_directory"),
    (dict(log_directory="a\0b"), ValueError, "log_directory"),
    (dict(log_directory=b"/tmp"), TypeError, "log_directory"),
    (dict(track_allocations=None), TypeError, "track_allocations"),
    (dict(external_lib_list="cupy,jax"), ValueError, "external_lib_list"),
    (dict(external_lib_list=["cupy", 3]), TypeError, "external_lib_list"),
    (dict(external_lib_list=42), TypeError, "external_lib_list"),
    (dict(external_lib_list="cupy,"), ValueError, "external_lib_list"),
    (dict(factory=42), TypeError, "factory"),
    (dict(factory=lambda: threading.Lock()), None, None),  # picklable: checked on the worker
    (dict(factory=host_heap_factory, managed_memory=True), ValueError, "factory"),
    (dict(factory=host_heap_factory, async_alloc=True), ValueError, "factory"),
    (dict(statistics=0), TypeError, "statistics"),
]


@pytest.mark.parametrize(("options", "error", "match"), BAD_OPTIONS,
                         ids=[f"{i}-{'-'.join(o)}" for i, (o, _, _) in enumerate(BAD_OPTIONS)])
def test_bad_options_are_rejected_on_the_client(options, error, match):
    if error is None:
        NbrmmSetup(**options)
        return
    with pytest.raises(error, match=match):
        NbrmmSetup(**options)


def test_unpicklable_factory_is_rejected_on_the_client():
    lock = threading.Lock()
    with pytest.raises(TypeError, match="factory: must be picklable"):
        NbrmmSetup(factory=lambda: lock)


def test_options_are_positional_nowhere():
    with pytest.raises(TypeError):
        NbrmmSetup("1GB")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (0, None),
        (0.0, None),
        ("0 MiB", None),
        (1, Size(bytes=1)),
        ("1", Size(bytes=1)),
        (1.0, Size(fraction=1.0)),
        ("1.0", Size(fraction=1.0)),
        (0.5, Size(fraction=0.5)),
        ("0.25", Size(fraction=0.25)),
        (1e9, Size(bytes=10**9)),
        ("5GB", Size(bytes=5 * 10**9)),
        ("5000M", Size(bytes=5 * 10**9)),
        ("1GiB", Size(bytes=1 << 30)),
        (2**64 - 1, Size(bytes=2**64 - 1)),
    ],
)
def test_sizes_read_as_dask_cuda_reads_them(value, expected):
    assert parse_size("initial_pool_size", value) == expected


def test_numpy_scalars_are_sizes():
    np = pytest.importorskip("numpy")
    assert parse_size("initial_pool_size", np.int64(4096)) == Size(bytes=4096)
    assert parse_size("initial_pool_size", np.float32(0.5)) == Size(fraction=0.5)
    with pytest.raises(TypeError, match="initial_pool_size"):
        parse_size("initial_pool_size", np.bool_(True))


def test_sizes_resolve_aligned_and_fractions_of_the_device():
    assert Size(bytes=1000).resolve(0) == 768
    assert Size(bytes=255).resolve(0) == 0
    assert Size(fraction=0.5).resolve(10_000) == 4864
    calls = []
    assert Size(bytes=512).resolve(lambda: calls.append(1)) == 512
    assert calls == []  # the device is asked only for fractions


@pytest.mark.parametrize("fields", [{}, {"bytes": 256, "fraction": 0.5}])
def test_a_size_is_bytes_or_a_fraction(fields):
    with pytest.raises(ValueError, match="Size: give one of bytes and fraction"):
        Size(**fields)


def test_fraction_needs_a_device_on_the_worker():
    plugin = NbrmmSetup(initial_pool_size=0.5, factory=host_heap_factory)
    if HAVE_GPU:
        total = nbrmm.get_device_info(0)["total_memory"]
        assert plugin._size("initial_pool_size", 0) == total // 2 // 256 * 256
    else:
        with pytest.raises(ValueError, match="initial_pool_size: a fraction of device memory"):
            plugin._size("initial_pool_size", nbrmm.get_current_device())


def test_repr_names_the_options():
    text = repr(NbrmmSetup(initial_pool_size="1GB", external_lib_list="cupy"))
    assert text.startswith("NbrmmSetup(")
    assert "initial_pool_size" in text and "cupy" in text and "statistics=True" in text


def test_plugin_pickles_with_its_factory():
    import cloudpickle

    plugin = NbrmmSetup(factory=host_heap_factory, initial_pool_size="1MiB")
    back = cloudpickle.loads(cloudpickle.dumps(plugin))
    assert back.factory is host_heap_factory
    assert back.initial_pool_size == plugin.initial_pool_size
    assert back.name == "nbrmm"


# --------------------------------------------------------------------------------------
# The plugin in this process (a stand-in worker): what one configuration means
# --------------------------------------------------------------------------------------


class FakeWorker:
    """What the plugin uses of a worker: ``name`` and ``metrics``."""

    def __init__(self, name="w", metrics=None):
        self.name = name
        self.metrics = dict(metrics or {})


def test_setup_and_teardown_in_process(tmp_path):
    device = nbrmm.get_current_device()
    before = nbrmm.mr.get_per_device_resource(device)
    distributed_rmm = object()
    worker = FakeWorker("tcp://1.2.3.4:5/worker-7", {"rmm": distributed_rmm})
    plugin = NbrmmSetup(factory=host_heap_factory, initial_pool_size="1MiB",
                        track_allocations=True, log_directory=tmp_path / "logs")
    plugin.setup(worker)
    top = nbrmm.mr.get_per_device_resource(device)
    assert [type(r).__name__ for r in _chain(top)] == [
        "StatisticsResourceAdaptor", "TrackingResourceAdaptor", "LoggingResourceAdaptor",
        "PoolMemoryResource", "CallbackMemoryResource"]
    assert set(worker.metrics) == {"nbrmm", "rmm"} and worker.metrics["rmm"] is not distributed_rmm
    buf = nbrmm.Buffer(1000)
    assert buf.mr is top
    assert worker.metrics["nbrmm"](worker) == {"nbrmm-used": 1000, "nbrmm-total": 1 << 20}
    assert worker.metrics["rmm"](worker) == {"rmm-used": 1000, "rmm-total": 1 << 20}
    log = tmp_path / "logs" / f"rmm_log_worker-7.dev{device}.txt"
    plugin.teardown(worker)
    assert nbrmm.mr.get_per_device_resource(device) == before
    assert worker.metrics == {"rmm": distributed_rmm}
    assert log.read_text().splitlines()[0].startswith("Thread,Time,Action")
    assert "allocate" in log.read_text()
    del buf
    assert top.allocation_counts.current_bytes == 0


def _chain(res):
    while res is not None:
        yield res
        res = getattr(res, "upstream_mr", None)


def test_a_second_instance_replaces_the_first_in_process():
    device = nbrmm.get_current_device()
    before = nbrmm.mr.get_per_device_resource(device)
    w1, w2 = FakeWorker("a"), FakeWorker("b")
    first, second = NbrmmSetup(factory=host_heap_factory), NbrmmSetup(factory=host_heap_factory)
    first.setup(w1)
    r1 = nbrmm.mr.get_per_device_resource(device)
    kept = nbrmm.Buffer(64)
    second.setup(w2)
    r2 = nbrmm.mr.get_per_device_resource(device)
    # Not stacked: the second graph sits on a fresh factory resource, not on the first.
    assert [type(r).__name__ for r in _chain(r2)] == [
        "StatisticsResourceAdaptor", "CallbackMemoryResource"]
    assert r2 != r1 and r2.upstream_mr is not r1.upstream_mr
    first.teardown(w1)  # no longer installed: leaves the second alone
    assert nbrmm.mr.get_per_device_resource(device) == r2
    assert kept.mr is r1 and r1.allocation_counts.current_bytes == 64
    del kept
    assert r1.allocation_counts.current_bytes == 0
    second.teardown(w2)
    assert nbrmm.mr.get_per_device_resource(device) == before
    assert w1.metrics == {} and w2.metrics == {}


def test_teardown_leaves_a_resource_set_by_someone_else():
    device = nbrmm.get_current_device()
    worker = FakeWorker()
    plugin = NbrmmSetup(factory=host_heap_factory)
    plugin.setup(worker)
    other = HostHeap().resource()
    nbrmm.mr.set_current_device_resource(other)
    plugin.teardown(worker)
    assert nbrmm.mr.get_per_device_resource(device) is other


@pytest.mark.parametrize(
    ("factory", "error", "match"),
    [
        (failing_factory, RuntimeError, "on purpose"),
        (not_a_resource_factory, TypeError, "factory: must return an nbrmm.mr.DeviceMemoryResource"),
    ],
)
def test_failed_setup_changes_nothing_in_process(factory, error, match):
    device = nbrmm.get_current_device()
    worker = FakeWorker()
    good = NbrmmSetup(factory=host_heap_factory)
    good.setup(worker)
    installed = nbrmm.mr.get_per_device_resource(device)
    with pytest.raises(error, match=match):
        NbrmmSetup(factory=factory).setup(FakeWorker())
    assert nbrmm.mr.get_per_device_resource(device) == installed
    good.teardown(worker)


def test_missing_library_is_named():
    for library in ("cupy", "torch", "numba"):
        try:
            importlib.import_module(library)
        except ImportError:
            break
    else:
        pytest.skip("cupy, torch and numba are all installed")
    device = nbrmm.get_current_device()
    before = nbrmm.mr.get_per_device_resource(device)
    plugin = NbrmmSetup(factory=host_heap_factory, external_lib_list=[library])
    with pytest.raises(ImportError, match=f"external_lib_list: '{library}'"):
        plugin.setup(FakeWorker())
    assert nbrmm.mr.get_per_device_resource(device) == before


def test_interpreter_exit_with_a_configuration_installed():
    # A worker process may exit without tearing its plugins down: nothing may leak.
    code = f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        import nbrmm, nbrmm.dask
        from dask_helpers import host_heap_factory

        class Worker:
            name = "w"
            metrics = {{}}

        nbrmm.dask.NbrmmSetup(factory=host_heap_factory, initial_pool_size="1MiB",
                              track_allocations=True).setup(Worker())
        kept = nbrmm.Buffer(1000)
        print(nbrmm.dask.memory_usage())
    """
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(1000, 1048576)"
    assert "leaked" not in out.stderr


def test_torch_refusing_a_new_allocator_leaves_the_previous_configuration(monkeypatch):
    # torch takes a new allocator only before its first CUDA allocation; a stand-in torch
    # that refuses shows the order of the steps (torch first, then everything else).
    import types

    from nbrmm.dask import _plugin

    installed_allocators = []

    def change_current_allocator(allocator):
        if installed_allocators:
            raise RuntimeError("Can't swap an already initialized allocator")
        installed_allocators.append(allocator)

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(
        memory=types.SimpleNamespace(change_current_allocator=change_current_allocator))
    monkeypatch.setitem(sys.modules, "torch", torch)
    device = nbrmm.get_current_device()
    before = nbrmm.mr.get_per_device_resource(device)

    def configuration(owner):
        return _plugin._Configuration(owner=owner, device=device,
                                      resource=HostHeap().resource(), logging=None,
                                      hooks={"torch": object()})

    first = configuration("first")
    with _plugin._lock:
        _plugin._install(first)
    assert nbrmm.mr.get_per_device_resource(device) is first.resource
    assert installed_allocators == [first.hooks["torch"]]
    second = configuration("second")
    with pytest.raises(RuntimeError, match="external_lib_list: torch cannot take a new allocator"):
        with _plugin._lock:
            _plugin._install(second)
    assert nbrmm.mr.get_per_device_resource(device) is first.resource  # left whole
    with _plugin._lock:
        _plugin._uninstall(first)
    assert nbrmm.mr.get_per_device_resource(device) == before


def test_metrics_restore_only_what_they_replaced():
    worker = FakeWorker()
    add_metrics(worker)
    add_metrics(worker)  # twice: still one entry each, nothing remembered to restore
    assert set(worker.metrics) == {"nbrmm", "rmm"}
    replacement = object()
    worker.metrics["nbrmm"] = replacement
    remove_metrics(worker)
    assert worker.metrics == {"nbrmm": replacement}


def test_memory_usage_without_counting_adaptors_is_zero():
    with nbrmm.mr.using_device_resource(HostHeap().resource()):
        buf = nbrmm.Buffer(10)
        assert nbrmm.dask.memory_usage() == (0, 0)
        rows = nbrmm.dask.worker_statistics()
        row = [r for r in rows if r["device"] == nbrmm.get_current_device()][0]
        assert row["resource"] == "CallbackMemoryResource" and row["current_bytes"] is None
        del buf


# --------------------------------------------------------------------------------------
# Serialization and sizeof in this process
# --------------------------------------------------------------------------------------


# Classes by name: pytest keeps parameters until after the extension's exit checks.
@pytest.mark.parametrize("cls_name", ["Buffer", "DeviceBuffer"])
def test_dask_family_round_trip_allocates_from_the_current_resource(cls_name):
    cls = getattr(nbrmm, cls_name)
    sender = nbrmm.mr.StatisticsResourceAdaptor(HostHeap().resource())
    receiver = nbrmm.mr.StatisticsResourceAdaptor(HostHeap().resource())
    with nbrmm.mr.using_device_resource(sender):
        buf = make_buffer(SENT, cls_name)
    header, frames = serialize(buf, serializers=("dask",))
    assert header["serializer"] == "dask"
    assert [len(memoryview(f)) for f in frames] == [SENT]
    with nbrmm.mr.using_device_resource(receiver):
        back = deserialize(header, frames)
    assert type(back) is cls and back.nbytes == SENT and back.mr is receiver
    if SENT:
        assert back.tobytes() == buf.tobytes()
        assert receiver.allocation_counts.current_bytes == SENT


class _LyingFrame:
    """A device frame whose ``nbytes`` differs from what its array interface describes."""

    def __init__(self, nbytes, shape):
        self.nbytes = nbytes
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "|u1", "data": (0, False),
                                         "version": 3}


def test_cuda_family_hands_over_the_buffer_itself():
    buf = nbrmm.Buffer(1000, mr=HostHeap().resource())
    header, frames = serialize(buf, serializers=("cuda",))
    assert header["serializer"] == "cuda" and frames == [buf]
    assert deserialize(header, frames) is buf


@pytest.mark.parametrize(
    ("sub_header", "frames", "match"),
    [
        ({"nbytes": 4}, [b"1234", b"5678"], "one frame"),
        ({"nbytes": 5}, [b"1234"], "expected 5 bytes"),
        ({"nbytes": -1}, [b""], "nbytes"),
        ({}, [b""], "nbytes"),
        ({"nbytes": "4"}, [b"1234"], "nbytes"),
        ({"nbytes": True}, [b"1"], "^header: no valid 'nbytes'"),
        # A device frame whose nbytes says 8 but whose array is 4 bytes would leave 4
        # bytes of the new buffer unwritten.
        ({"nbytes": 8}, [_LyingFrame(8, (4,))], "^frames: expected 8 bytes, got 4$"),
        ({"nbytes": 8}, [_LyingFrame(8, "x")], "^frames: not a device array"),
    ],
)
@pytest.mark.parametrize("family", ["dask", "cuda"])
def test_bad_frames_are_refused(family, sub_header, frames, match):
    header = {"serializer": family, "sub-header": sub_header,
              "type-serialized": pickle.dumps(nbrmm.Buffer)}
    if family == "cuda":
        header["compression"] = (False,) * len(frames)
    with pytest.raises(ValueError, match=match):
        deserialize(header, frames)


def test_sizeof_is_the_capacity():
    buf = nbrmm.Buffer(1000, mr=HostHeap().resource())
    assert dask.sizeof.sizeof(buf) == buf.capacity() == 1000
    assert dask.sizeof.sizeof(nbrmm.DeviceBuffer(size=10, mr=HostHeap().resource())) == 10
    buf.close()
    assert dask.sizeof.sizeof(buf) == 0


def test_sizeof_entry_point_registers_without_nbrmm_dask(tmp_path):
    # The entry point declared in pyproject.toml, installed as a distribution's metadata
    # would be: a fresh interpreter importing dask.sizeof picks it up.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = project["project"]["entry-points"]["dask.sizeof"]
    assert declared == {"nbrmm": "nbrmm._sizeof:register"}
    info = tmp_path / "nbrmm_entry_points-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nbrmm-entry-points\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[dask.sizeof]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    code = textwrap.dedent("""
        import sys
        import dask.sizeof
        assert "nbrmm.dask" not in sys.modules
        import nbrmm
        from helpers import HostHeap
        buf = nbrmm.Buffer(777, mr=HostHeap().resource())
        print(dask.sizeof.sizeof(buf))
    """)
    env = dict(os.environ)
    package_parent = pathlib.Path(nbrmm.__file__).resolve().parents[1]  # wherever it is built
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tmp_path), str(package_parent), str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "777"


def test_docs_examples_without_a_gpu_run():
    import doctest
    import re

    text = (ROOT / "docs" / "dask.md").read_text()
    blocks = [b for b in re.findall(r"```pycon\n(.*?)```", text, re.S) if "needs a GPU" not in b]
    assert blocks
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for i, block in enumerate(blocks):
        runner.run(doctest.DocTestParser().get_doctest(block, {}, f"dask.md[{i}]", "dask.md", 0))
    assert runner.summarize(verbose=False) == (0, runner.tries) and runner.tries >= 4


def test_nbrmm_dask_names_are_documented():
    assert nbrmm.dask.__all__ == sorted(nbrmm.dask.__all__)
    for name in nbrmm.dask.__all__:
        assert getattr(nbrmm.dask, name).__doc__, name


# --------------------------------------------------------------------------------------
# A cluster of worker processes
# --------------------------------------------------------------------------------------


def _wait(predicate, what, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster that starts with no worker, and its client; on exit, checks that no
    process and no thread was left behind."""
    faulthandler.dump_traceback_later(MODULE_DEADLINE, exit=True)
    threads_before = set(threading.enumerate())
    try:
        with distributed.LocalCluster(
            n_workers=0,
            processes=True,
            threads_per_worker=1,
            dashboard_address=":0",  # the scheduler's HTTP server on a free port
            scheduler_kwargs={"dashboard": False},
        ) as cluster, distributed.Client(cluster, timeout=TIMEOUT) as client:
            yield cluster, client
        assert multiprocessing.active_children() == []
        gc.collect()
        left = [t for t in set(threading.enumerate()) - threads_before if t.is_alive()]
        # distributed's offload executor is a process-wide pool kept for reuse.
        assert [t.name for t in left if not t.name.startswith("Dask-Offload")] == []
    finally:
        faulthandler.cancel_dump_traceback_later()


def _describe(client, workers=None):
    return client.run(describe, workers=workers)


def _workers(client):
    return sorted(client.scheduler_info()["workers"])


def _two_workers(cluster, client):
    """The two workers' addresses (started here when a test runs on its own)."""
    if len(_workers(client)) != 2:
        cluster.scale(2)
        client.wait_for_workers(2, timeout=TIMEOUT)
    return _workers(client)


def test_plugin_registered_before_the_workers_start(cluster):
    cluster, client = cluster
    assert _workers(client) == []
    client.register_plugin(NbrmmSetup(factory=host_heap_factory))
    cluster.scale(2)
    client.wait_for_workers(2, timeout=TIMEOUT)
    info = _describe(client)
    assert len(info) == 2
    for worker in info.values():
        assert worker["device"] == nbrmm.get_current_device()
        assert worker["chain"] == ["StatisticsResourceAdaptor", "CallbackMemoryResource"]
        assert worker["total_count"] == 0
        assert "nbrmm" in worker["plugins"]
        assert worker["nbrmm_metric"] and worker["rmm_metric"]
    assert len({w["pid"] for w in info.values()} | {os.getpid()}) == 3


def test_registering_again_leaves_one_configuration(cluster, tmp_path):
    cluster, client = cluster
    client.register_plugin(NbrmmSetup(factory=host_heap_factory))
    _two_workers(cluster, client)
    assert set(client.run(hold, "old", 512).values()) == {512}
    client.register_plugin(NbrmmSetup(
        factory=host_heap_factory, initial_pool_size="1MiB", track_allocations=True,
        log_directory=tmp_path))
    for worker in _describe(client).values():
        # Built from scratch: one statistics adaptor, over a fresh factory resource.
        assert worker["chain"] == [
            "StatisticsResourceAdaptor", "TrackingResourceAdaptor", "LoggingResourceAdaptor",
            "PoolMemoryResource", "CallbackMemoryResource"]
        assert worker["current_bytes"] == 0
        assert worker["plugins"].count("nbrmm") == 1
    # Memory of the old configuration stays valid and goes back to it.
    assert set(client.run(held_is_current, "old").values()) == {False}
    assert set(client.run(release, "old").values()) == {0}
    names = {info["name"] for info in client.scheduler_info()["workers"].values()}
    device = nbrmm.get_current_device()
    logs = sorted(p.name for p in tmp_path.iterdir())
    assert logs == sorted(f"rmm_log_{name}.dev{device}.txt" for name in names)

    client.unregister_worker_plugin("nbrmm")
    for worker in _describe(client).values():
        assert worker["chain"] == ["CudaMemoryResource"]  # librmm's initial resource
        assert "nbrmm" not in worker["plugins"]
        assert not worker["nbrmm_metric"] and not worker["rmm_metric"]


def test_the_rmm_metric_is_replaced_and_put_back(cluster):
    cluster, client = cluster
    client.register_plugin(NbrmmSetup(factory=host_heap_factory))
    _two_workers(cluster, client)
    client.run(give_rmm_metric)  # as distributed's own, where rmm can be imported
    client.register_plugin(NbrmmSetup(factory=host_heap_factory))
    assert all(w["rmm_metric"] for w in _describe(client).values())
    client.unregister_worker_plugin("nbrmm")
    assert set(client.run(has_stand_in_rmm_metric).values()) == {True}


def test_worker_restart_sets_up_the_new_process_once(cluster):
    cluster, client = cluster
    client.register_plugin(NbrmmSetup(factory=host_heap_factory, track_allocations=True))
    _two_workers(cluster, client)
    before = _describe(client)
    client.run(hold, "lost", 100)
    client.restart(timeout=TIMEOUT)
    client.wait_for_workers(2, timeout=TIMEOUT)
    after = _describe(client)
    assert len(after) == 2
    assert {w["pid"] for w in after.values()}.isdisjoint({w["pid"] for w in before.values()})
    for worker in after.values():
        assert worker["chain"] == [
            "StatisticsResourceAdaptor", "TrackingResourceAdaptor", "CallbackMemoryResource"]
        assert worker["total_count"] == 0
        assert worker["plugins"].count("nbrmm") == 1


def test_statistics_and_metrics_are_gathered(cluster):
    cluster, client = cluster
    client.register_plugin(NbrmmSetup(factory=host_heap_factory, initial_pool_size="1MiB"))
    a, b = _two_workers(cluster, client)
    kept = [client.submit(nbrmm.Buffer, 1000, workers=[a], pure=False)]
    kept += [client.submit(nbrmm.Buffer, n, workers=[b], pure=False) for n in (300, 700)]
    distributed.wait(kept, timeout=TIMEOUT)
    dropped = client.submit(nbrmm.Buffer, 5000, workers=[b], pure=False)
    distributed.wait(dropped, timeout=TIMEOUT)
    del dropped
    _wait(lambda: client.run(describe, workers=[b])[b]["current_bytes"] == 1000,
          "the worker to free a released result")

    rows = gather_statistics(client, frame=False)
    assert [(r["worker"], r["device"]) for r in rows] == [(a, nbrmm.get_current_device()),
                                                          (b, nbrmm.get_current_device())]
    by_worker = {r["worker"]: r for r in rows}
    assert {k: by_worker[a][k] for k in ("current_bytes", "current_count", "peak_bytes",
                                         "peak_count", "total_bytes", "total_count")} == {
        "current_bytes": 1000, "current_count": 1, "peak_bytes": 1000, "peak_count": 1,
        "total_bytes": 1000, "total_count": 1}
    assert {k: by_worker[b][k] for k in ("current_bytes", "current_count", "peak_bytes",
                                         "peak_count", "total_bytes", "total_count")} == {
        "current_bytes": 1000, "current_count": 2, "peak_bytes": 6000, "peak_count": 3,
        "total_bytes": 6000, "total_count": 3}
    assert {r["resource"] for r in rows} == {"StatisticsResourceAdaptor"}
    assert {r["name"] for r in rows} == {
        w["name"] for w in client.scheduler_info()["workers"].values()}

    # The metric, as each worker's heartbeat sends it, and as the scheduler received it.
    metrics = client.run(nbrmm_worker_metric)
    for worker in (a, b):
        assert metrics[worker]["nbrmm"] == {"nbrmm-used": 1000, "nbrmm-total": 1 << 20}
        assert metrics[worker]["rmm"] == {"rmm-used": 1000, "rmm-total": 1 << 20}
    _wait(lambda: all(
        client.scheduler_info()["workers"][w]["metrics"].get("nbrmm", {}).get("nbrmm-used")
        == 1000 for w in (a, b)), "the scheduler to receive the metric")

    # Dask knows the results' sizes (dask.sizeof on the workers).
    assert client.run(task_nbytes, key=kept[0].key, workers=[a])[a] == 1000
    del kept


def test_memory_by_tag_and_snapshots_from_every_worker(cluster, tmp_path):
    import nbrmm.memory

    cluster, client = cluster
    client.register_plugin(NbrmmSetup(factory=host_heap_factory))
    a, b = _two_workers(cluster, client)
    assert nbrmm.dask.gather_memory_by_tag(client, frame=False) == []  # nothing recorded
    client.run(nbrmm.memory.record_history)
    try:
        client.run(tagged_buffer, "load", 1000, workers=[a])
        client.run(tagged_buffer, "load", 300, workers=[b])
        client.run(tagged_buffer, "train", 4000, workers=[b])
        rows = nbrmm.dask.gather_memory_by_tag(client, frame=False)
        assert [(r["worker"], r["tag"], r["live_bytes"], r["live_count"]) for r in rows] == [
            (a, "load", 1000, 1), (b, "load", 300, 1), (b, "train", 4000, 1)]
        assert len({r["device"] for r in rows}) == 1  # the host heap's, on every worker
        written = nbrmm.dask.dump_snapshots(client, str(tmp_path / "snap-{worker}.pickle"))
        assert sorted(written) == [a, b]
        for worker, path in written.items():
            snap = nbrmm.memory.Snapshot.load(path)
            tags = snap.bytes_by_tag()
            assert tags == ({"load": 1000} if worker == a else {"train": 4000, "load": 300})
        with pytest.raises(ValueError, match=r"path: must contain '\{worker\}'"):
            nbrmm.dask.dump_snapshots(client, str(tmp_path / "one.pickle"))
        with pytest.raises(TypeError, match="client: expected a distributed.Client, got int"):
            nbrmm.dask.gather_memory_by_tag(1)
    finally:
        client.run(release_if_held, "load")
        client.run(release_if_held, "train")
        client.run(nbrmm.memory.record_history, False)


def test_statistics_table_as_a_dataframe(cluster):
    pandas = pytest.importorskip("pandas")
    cluster, client = cluster
    client.register_plugin(NbrmmSetup(factory=host_heap_factory))
    _two_workers(cluster, client)
    table = gather_statistics(client, frame=True)
    assert isinstance(table, pandas.DataFrame)
    assert list(table.columns) == list(nbrmm.dask._diagnostics.COLUMNS)
    assert table.to_dict("records") == gather_statistics(client, frame=False)
    assert isinstance(gather_statistics(client), pandas.DataFrame)  # the default with pandas


def test_statistics_table_without_pandas(cluster, monkeypatch):
    cluster, client = cluster
    client.register_plugin(NbrmmSetup(factory=host_heap_factory))
    _two_workers(cluster, client)
    monkeypatch.setitem(sys.modules, "pandas", None)  # ``import pandas`` fails
    with pytest.raises(ImportError, match="frame: True needs pandas"):
        gather_statistics(client, frame=True)
    rows = gather_statistics(client)
    assert isinstance(rows, list) and len(rows) == 2 and rows[0]["total_count"] == 0


def test_statistics_table_arguments(cluster):
    _, client = cluster
    with pytest.raises(TypeError, match="client"):
        gather_statistics("tcp://127.0.0.1:8786")
    with pytest.raises(TypeError, match="frame"):
        gather_statistics(client, frame="yes")


@pytest.mark.parametrize("cls_name", ["Buffer", "DeviceBuffer"])
def test_buffer_sent_between_workers(cluster, cls_name):
    cluster, client = cluster
    client.register_plugin(NbrmmSetup(factory=host_heap_factory))
    a, b = _two_workers(cluster, client)
    made = client.submit(make_buffer, SENT, cls_name, workers=[a], pure=False)
    seen = client.submit(inspect_buffer, made, workers=[b], pure=False)
    got = seen.result(timeout=TIMEOUT)
    assert got == {"class": cls_name, "nbytes": SENT, "from_current": True,
                   "contents_ok": True, "current_bytes": SENT}
    # And back to the client, allocated from the client's current resource.
    local = nbrmm.mr.StatisticsResourceAdaptor(HostHeap().resource())
    with nbrmm.mr.using_device_resource(local):
        buf = made.result(timeout=TIMEOUT)
    assert type(buf).__name__ == cls_name and buf.mr is local and buf.nbytes == SENT


@pytest.mark.parametrize(
    ("factory", "error", "match"),
    [
        (failing_factory, RuntimeError, "on purpose"),
        (not_a_resource_factory, TypeError, "factory: must return"),
    ],
)
def test_worker_errors_reach_the_client_and_leave_no_partial_state(cluster, factory, error,
                                                                   match):
    cluster, client = cluster
    _two_workers(cluster, client)
    with pytest.raises(error, match=match):
        client.register_plugin(NbrmmSetup(factory=factory))
    for worker in _describe(client).values():
        # The previous configuration was torn down first; nothing of the failed one is in.
        assert worker["chain"] == ["CudaMemoryResource"]
        assert not worker["nbrmm_metric"]
    client.unregister_worker_plugin("nbrmm")


def test_a_pool_larger_than_the_device_is_reported(cluster):
    # CUDA memory under a pool of 2**60 bytes: out of memory with a GPU, and without one.
    cluster, client = cluster
    _two_workers(cluster, client)
    with pytest.raises(MemoryError):
        client.register_plugin(NbrmmSetup(factory=counted_cuda_factory, initial_pool_size=2**60))
    for worker in _describe(client).values():
        assert worker["chain"] == ["CudaMemoryResource"]
    client.unregister_worker_plugin("nbrmm")
