"""nbrmm.memory: the allocation history, tags, snapshots and out-of-memory reports, over
host-memory resources (the CPU suite) and, with the ``gpu`` marker, CuPy, PyTorch and
cuda.core sharing one pool on the device."""

import gc
import os
import threading

import pytest

import nbrmm
import nbrmm.memory as memory
import nbrmm.mr
from helpers import HostHeap, run_python, run_threads

HERE = os.path.abspath(__file__)


@pytest.fixture
def heap():
    return HostHeap()


@pytest.fixture
def host(heap):
    return heap.resource()


@pytest.fixture(autouse=True)
def _stop_recording():
    yield
    memory.record_history(False)


def events(snap, action=None):
    return [e for e in snap.events if action is None or e.action == action]


def test_records_allocations_and_frees_with_frames(host):
    memory.record_history()
    assert memory.is_recording()
    buf = nbrmm.Buffer(1000, mr=host)
    ptr = buf.ptr
    snap = memory.snapshot()
    (alloc,) = events(snap)
    # The device is the resource's: the current one when it was made (-1 without a GPU).
    device = nbrmm.get_current_device()
    assert (alloc.action, alloc.address, alloc.size, alloc.device) == ("alloc", ptr, 1000, device)
    assert (alloc.tag, alloc.library, alloc.before_recording) == ("nbrmm", "nbrmm", False)
    top = alloc.frames[0]
    assert top.filename == HERE and top.name == "test_records_allocations_and_frees_with_frames"
    assert [(a.address, a.size) for a in snap.allocations] == [(ptr, 1000)]
    assert snap.allocations[0].site == top
    del buf
    snap = memory.snapshot()
    assert [(e.action, e.address, e.size, e.tag) for e in snap.events] == [
        ("alloc", ptr, 1000, "nbrmm"),
        ("free", ptr, 1000, "nbrmm"),
    ]
    assert snap.allocations == ()
    assert all(e.time_ns > 0 for e in snap.events)
    assert snap.events[0].time_ns <= snap.events[1].time_ns


def test_frames_give_the_line_of_each_call(host):
    # Two calls on two lines of one function, and one line run many times: each event's
    # innermost frame has the line that made it.
    import inspect

    def allocate_twice():
        first = nbrmm.Buffer(10, mr=host)
        second = nbrmm.Buffer(20, mr=host)
        return first, second

    memory.record_history()
    made_at = inspect.currentframe().f_lineno + 1
    kept = [allocate_twice() for _ in range(3)]
    start = inspect.getsourcelines(allocate_twice)[1]
    lines = [(e.size, e.frames[0].line) for e in events(memory.snapshot(), "alloc")]
    assert lines == [(10, start + 1), (20, start + 2)] * 3
    outer = {e.frames[1].line for e in events(memory.snapshot(), "alloc")}
    assert outer == {made_at}
    del kept


def test_every_nbrmm_entry_point_is_recorded(host):
    memory.record_history()
    current = nbrmm.Buffer(100, mr=host)  # explicit
    nbrmm.mr.set_current_device_resource(host)
    assert nbrmm.mr.get_current_device_resource() is host  # recording keeps identity
    implicit = nbrmm.Buffer(200)  # the current resource, read at call time
    legacy = nbrmm.DeviceBuffer(size=300, mr=host)
    raw = host.allocate(400)
    legacy.resize(0)
    legacy.reserve(3000)  # a new block (nothing to copy), the old one freed
    host.deallocate(raw, 400)
    sizes = [(e.action, e.size) for e in memory.snapshot().events]
    assert sizes == [
        ("alloc", 100),
        ("alloc", 200),
        ("alloc", 300),
        ("alloc", 400),
        ("alloc", 3000),
        ("free", 300),
        ("free", 400),
    ]
    assert {a.size for a in memory.snapshot().allocations} == {100, 200, 3000}
    del current, implicit, legacy


def test_memory_allocated_before_recording_is_reported_as_such(host, heap):
    early = nbrmm.Buffer(512, mr=host)
    memory.record_history()
    late = nbrmm.Buffer(64, mr=host)
    del early
    snap = memory.snapshot()
    free = events(snap, "free")[0]
    assert free.before_recording and free.size == 512 and free.tag == "unknown"
    assert [a.size for a in snap.allocations] == [64]  # never a negative count
    assert sum(a.size for a in snap.allocations) == 64
    del late


def test_stopping_keeps_the_history_and_starting_again_drops_it(host):
    memory.record_history()
    a = nbrmm.Buffer(10, mr=host)
    memory.record_history(False)
    assert not memory.is_recording()
    b = nbrmm.Buffer(20, mr=host)
    assert [e.size for e in memory.snapshot().events] == [10]
    memory.record_history()
    assert memory.snapshot().events == ()
    c = nbrmm.Buffer(30, mr=host)
    assert [e.size for e in memory.snapshot().events] == [30]
    del a, b, c


def test_reconfiguring_while_recording_keeps_the_history(host):
    memory.record_history(stacks="none")
    a = nbrmm.Buffer(10, mr=host)
    memory.record_history(max_events=5)
    b = nbrmm.Buffer(20, mr=host)
    snap = memory.snapshot()
    assert [e.size for e in snap.events] == [10, 20]
    assert snap.events[0].frames == () and snap.events[1].frames != ()
    del a, b


def test_stacks_none_records_no_frames(host):
    memory.record_history(stacks="none")
    buf = nbrmm.Buffer(10, mr=host)
    assert memory.snapshot().events[0].frames == ()
    del buf


def test_max_events_keeps_the_newest_and_counts_the_rest(host):
    memory.record_history(max_events=3)
    bufs = [nbrmm.Buffer(n + 1, mr=host) for n in range(5)]
    snap = memory.snapshot()
    assert [e.size for e in snap.events] == [3, 4, 5]
    assert snap.dropped_events == 2
    assert len(snap.allocations) == 5  # live allocations are all kept
    memory.record_history(max_events=0)
    del bufs[0]
    assert memory.snapshot().dropped_events == 6
    del bufs


def test_tags_nest_and_belong_to_their_thread(host):
    memory.record_history()
    with memory.tag("outer"):
        a = nbrmm.Buffer(1, mr=host)
        with memory.tag("inner"):
            assert memory.current_tag() == "inner"
            b = nbrmm.Buffer(2, mr=host)
        c = nbrmm.Buffer(3, mr=host)
    d = nbrmm.Buffer(4, mr=host)
    assert memory.current_tag() is None
    assert [(e.size, e.tag) for e in memory.snapshot().events] == [
        (1, "outer"),
        (2, "inner"),
        (3, "outer"),
        (4, "nbrmm"),
    ]
    del a, b, c
    frees = {e.size: e.tag for e in events(memory.snapshot(), "free")}
    assert frees == {1: "outer", 2: "inner", 3: "outer"}  # a free carries its allocation's
    del d


def test_tags_from_many_threads(host):
    memory.record_history(stacks="none")
    barrier = threading.Barrier(6)

    def work(k):
        with memory.tag(f"thread-{k}"):
            barrier.wait()
            kept = [nbrmm.Buffer(k + 1, mr=host) for _ in range(50)]
            assert memory.current_tag() == f"thread-{k}"
        del kept

    assert run_threads(work, 6) == []
    allocs = events(memory.snapshot(), "alloc")
    assert len(allocs) == 300
    assert all(e.tag == f"thread-{e.size - 1}" for e in allocs)
    assert memory.snapshot().bytes_by_tag() == {}


def test_tag_is_a_decorator_and_reentrant(host):
    memory.record_history()
    t = memory.tag("fn")

    @t
    def make(n):
        return nbrmm.Buffer(n, mr=host)

    with t:
        inner = make(8)
    outer = make(9)
    assert [(e.size, e.tag) for e in memory.snapshot().events] == [(8, "fn"), (9, "fn")]
    assert repr(t) == "nbrmm.memory.tag('fn')"
    del inner, outer


def test_snapshot_totals_by_tag_and_site(host):
    memory.record_history()
    with memory.tag("a"):
        x = [nbrmm.Buffer(100, mr=host) for _ in range(3)]
    y = nbrmm.Buffer(1000, mr=host)
    snap = memory.snapshot()
    assert snap.bytes_by_tag() == {"nbrmm": 1000, "a": 300}
    sites = snap.bytes_by_site()
    assert list(sites.values()) == [1000, 300]
    assert all(s.filename == HERE for s in sites)
    del x, y


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_events": -1}, ValueError, "max_events: must be 0 or more, got -1"),
        ({"max_events": 2**64}, ValueError, "max_events: must be less than 2"),
        ({"max_events": 1.5}, TypeError, "max_events: expected an int, got float"),
        ({"max_events": None}, TypeError, "max_events: expected an int, got NoneType"),
        ({"stacks": "all"}, ValueError, "stacks: expected 'python' or 'none', got 'all'"),
        ({"stacks": None}, TypeError, "stacks: expected 'python' or 'none', got NoneType"),
        ({"enabled": 1}, TypeError, "enabled: expected a bool, got int"),
        ({"enabled": None}, TypeError, "enabled: expected a bool, got NoneType"),
        ({"device": "0"}, TypeError, "device: expected an int or a sequence of ints, got str"),
        ({"device": -1}, ValueError, "device: device -1 does not exist"),
        ({"device": 2**64}, ValueError, "device: device 18446744073709551616 does not exist"),
        ({"device": [0, 99]}, ValueError, "device: device 99 does not exist"),
    ],
)
def test_bad_arguments_name_the_parameter_and_change_nothing(kwargs, error, match):
    with pytest.raises(error, match=match):
        memory.record_history(**kwargs)
    assert not memory.is_recording()


@pytest.mark.parametrize("name", [None, 1, b"x", ["x"]])
def test_a_tag_must_be_a_str(name):
    with pytest.raises(TypeError, match=f"name: expected a str, got {type(name).__name__}"):
        memory.tag(name)


def test_the_current_resource_stays_the_object_set(host):
    nbrmm.mr.set_current_device_resource(host)
    memory.record_history()
    assert nbrmm.mr.get_current_device_resource() is host
    stats = nbrmm.mr.StatisticsResourceAdaptor(host)
    nbrmm.mr.set_current_device_resource(stats)
    assert nbrmm.mr.get_current_device_resource() is stats
    memory.record_history(False)
    assert nbrmm.mr.get_current_device_resource() is stats


def test_a_cpp_caller_of_the_current_resource_is_recorded_as_native(host, heap):
    from extensions import cpp_ext

    nbrmm.mr.set_current_device_resource(host)
    memory.record_history()
    with memory.tag("etl"):
        buf = cpp_ext.allocate_from_current(4096)  # C++: rmm::device_buffer, current resource
    plain = cpp_ext.allocate_from_current(100)
    snap = memory.snapshot()
    native = events(snap, "alloc")
    assert [(e.size, e.library, e.tag) for e in native] == [
        (4096, "native", "etl"),
        (100, "native", "native"),
    ]
    assert native[0].address == buf.ptr
    assert native[0].frames and native[0].frames[0].filename == HERE  # the Python caller
    del buf, plain
    gc.collect()
    frees = events(memory.snapshot(), "free")
    assert sorted(e.size for e in frees) == [100, 4096]
    assert not any(e.before_recording for e in frees)
    assert memory.snapshot().allocations == ()
    assert heap.bytes_in_use == 0


def test_cuda_core_allocations_are_tagged_cuda_core(heap):
    interop = pytest.importorskip("nbrmm.interop")
    if nbrmm.get_device_count() > 0:
        # With a driver, cuda.core wants its device current before it makes a buffer on
        # the default stream (a fresh process has no context: nothing here touches CUDA).
        import cuda.core

        cuda.core.Device(nbrmm.get_current_device()).set_current()
    adapter = interop.to_cuda_core_memory_resource(
        heap.resource(), is_device_accessible=False, is_host_accessible=True
    )
    memory.record_history()
    buf = adapter.allocate(4096, stream=nbrmm.DEFAULT_STREAM)
    (alloc,) = events(memory.snapshot(), "alloc")
    assert (alloc.size, alloc.library, alloc.tag) == (4096, "cuda.core", "cuda.core")
    buf.close()
    assert [e.action for e in memory.snapshot().events] == ["alloc", "free"]


# --------------------------------------------------------------------------------------
# Out-of-memory reports
# --------------------------------------------------------------------------------------


def test_out_of_memory_from_a_limiting_adaptor_says_what_holds_the_memory(host):
    limited = nbrmm.mr.LimitingResourceAdaptor(host, allocation_limit="4KiB")
    kept = nbrmm.Buffer(3072, mr=limited)
    with pytest.raises(nbrmm.OutOfMemory) as info:
        nbrmm.Buffer(2048, mr=limited)
    message = str(info.value)
    device = nbrmm.get_current_device()
    where = f"device {device}" if device >= 0 else "no device"
    assert f"asked LimitingResourceAdaptor for 2.0 KiB on {where}, stream 0x" in message
    assert (
        "resource chain: LimitingResourceAdaptor (in use 3.0 KiB, limit 4.0 KiB) -> "
        "CallbackMemoryResource" in message
    )
    assert "record_history()" in message  # how to learn more
    report = info.value.report
    assert (report.requested, report.resource, report.recording) == (
        2048,
        "LimitingResourceAdaptor",
        False,
    )
    assert [r.name for r in report.chain] == ["LimitingResourceAdaptor", "CallbackMemoryResource"]
    assert str(report).startswith(report.reason)
    del kept


def test_out_of_memory_while_recording_names_tags_and_call_sites(host):
    pool = nbrmm.mr.PoolMemoryResource(host, initial_pool_size="64KiB", maximum_pool_size="64KiB")
    memory.record_history()
    with memory.tag("model"):
        weights = nbrmm.Buffer("40KiB", mr=pool)
    scratch = nbrmm.Buffer("16KiB", mr=pool)
    with pytest.raises(MemoryError) as info:
        pool.allocate(32 * 1024)
    assert isinstance(info.value, nbrmm.OutOfMemory)
    message = str(info.value)
    assert "resource chain: PoolMemoryResource (pool 64.0 KiB) -> CallbackMemoryResource" in message
    assert "live bytes by tag: model 40.0 KiB, nbrmm 16.0 KiB" in message
    assert f"{HERE}:" in message  # the call sites
    report = info.value.report
    assert report.bytes_by_tag == {"model": 40 * 1024, "nbrmm": 16 * 1024}
    assert report.chain[0].pool_size == 64 * 1024
    failed = events(memory.snapshot(), "failed_alloc")
    assert [(e.size, e.address) for e in failed] == [(32 * 1024, 0)]
    del weights, scratch


def test_a_python_resource_memory_error_goes_on_unchanged():
    def allocate(nbytes, stream):
        raise MemoryError("mine")

    mr = nbrmm.mr.CallbackMemoryResource(allocate, lambda p, n, s: None)
    with pytest.raises(MemoryError, match="^mine$") as info:
        nbrmm.Buffer(10, mr=mr)
    assert not hasattr(info.value, "report")


# --------------------------------------------------------------------------------------
# Threads and exit
# --------------------------------------------------------------------------------------


def test_recording_on_and_off_while_threads_allocate(host, heap):
    stop = threading.Event()

    def work(k):
        while not stop.is_set():
            with memory.tag(f"t{k}"):
                bufs = [nbrmm.Buffer(256, mr=host) for _ in range(20)]
            del bufs

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(200):
            memory.record_history(i % 2 == 0, stacks="python" if i % 4 else "none")
            memory.snapshot()
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads)
    memory.record_history(False)
    snap = memory.snapshot()
    assert all(e.size == 256 for e in snap.events)
    assert heap.bytes_in_use == 0


def test_exit_while_recording_with_threads_allocating():
    proc = run_python(
        """
        import sys, threading
        sys.path.insert(0, TESTS)
        import nbrmm, nbrmm.memory
        from helpers import HostHeap
        host = HostHeap().resource()
        nbrmm.memory.record_history()
        def work():
            while True:
                with nbrmm.memory.tag("busy"):
                    b = nbrmm.Buffer(1024, mr=host)
                del b
        for _ in range(3):
            threading.Thread(target=work, daemon=True).start()
        kept = nbrmm.Buffer(4096, mr=host)
        print("started", flush=True)
        """.replace("TESTS", repr(os.path.dirname(HERE)))
    )
    assert proc.returncode == 0, proc.stderr
    assert "started" in proc.stdout
    assert "leak" not in proc.stderr.lower(), proc.stderr


# --------------------------------------------------------------------------------------
# On the device: CuPy, PyTorch and cuda.core through one pool
# --------------------------------------------------------------------------------------

_SHARED_POOL = r"""
import json, sys
import cupy, torch
import cuda.core as cc
import nbrmm, nbrmm.memory as memory, nbrmm.mr
from nbrmm.allocators.cupy import rmm_cupy_allocator
from nbrmm.allocators.torch import rmm_torch_allocator
import nbrmm.interop as interop

cc.Device(0).set_current()
pool = nbrmm.mr.PoolMemoryResource(
    nbrmm.mr.CudaMemoryResource(), initial_pool_size="256MiB", maximum_pool_size="512MiB"
)
nbrmm.mr.set_current_device_resource(pool)
cupy.cuda.set_allocator(rmm_cupy_allocator)
torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
adapter = interop.NbrmmMemoryResource(pool)
memory.record_history()
x = cupy.zeros(1 << 20, dtype=cupy.uint8)
t = torch.zeros(1 << 21, dtype=torch.uint8, device="cuda")
with memory.tag("features"):
    y = cupy.ones(3 << 20, dtype=cupy.uint8)
    u = torch.ones(4 << 20, dtype=torch.uint8, device="cuda")
stream = cc.Device(0).create_stream()
b = adapter.allocate(5 << 20, stream=stream)
n = nbrmm.Buffer(6 << 20)
torch.cuda.synchronize()
snap = memory.snapshot()
out = {
    "live": sorted((a.library, a.tag, a.size) for a in snap.allocations),
    "by_tag": snap.bytes_by_tag(),
    "chain": [(r.name, r.pool_size) for r in snap.resources if r.device == 0],
    "sites": [str(a.site) for a in snap.allocations],
}
errors = {}
try:
    cupy.empty(1 << 30, dtype=cupy.uint8)
except cupy.cuda.memory.OutOfMemoryError as e:
    errors["cupy"] = str(e)
try:
    torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
except RuntimeError as e:  # what torch makes of a pluggable allocator's error
    errors["torch"] = str(e)
try:
    nbrmm.Buffer(1 << 30)
except nbrmm.OutOfMemory as e:
    errors["nbrmm"] = str(e)
out["errors"] = errors
out["failed"] = sorted((e.library, e.size) for e in memory.snapshot().events if e.action == "failed_alloc")
snap.dump(sys.argv[1])
from torch.cuda import _memory_viz
import pickle
with open(sys.argv[1], "rb") as f:
    data = pickle.load(f)
out["trace_plot"] = len(_memory_viz.trace_plot(data))
out["segment_plot"] = len(_memory_viz.segment_plot(data))
b.close(stream)
del x, y, t, u, n
print(json.dumps(out))
"""


@pytest.mark.gpu
def test_cupy_torch_and_cuda_core_share_a_recorded_pool(tmp_path):
    import json
    import subprocess
    import sys

    pytest.importorskip("cupy")
    pytest.importorskip("torch")
    pytest.importorskip("cuda.core")
    dump = tmp_path / "memory.pickle"
    proc = subprocess.run(
        [sys.executable, "-c", _SHARED_POOL, str(dump)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    assert [tuple(x) for x in out["live"]] == sorted(
        [
            ("cupy", "cupy", 1 * mib),
            ("torch", "torch", 2 * mib),
            ("cupy", "features", 3 * mib),
            ("torch", "features", 4 * mib),
            ("cuda.core", "cuda.core", 5 * mib),
            ("nbrmm", "nbrmm", 6 * mib),
        ]
    )
    assert out["by_tag"]["features"] == 7 * mib
    assert out["chain"] == [["PoolMemoryResource", 256 * mib], ["CudaMemoryResource", None]]
    assert all("<string>" in s for s in out["sites"]), out["sites"]  # the script's lines
    # Out of memory: each framework's own error; CuPy's and nbrmm's carry the report.
    assert "resource chain: PoolMemoryResource" in out["errors"]["cupy"]
    assert "live bytes by tag: " in out["errors"]["cupy"]
    torch_error = out["errors"]["torch"]
    assert "out of memory: nbrmm could not allocate 1073741824 bytes on device 0 for torch: " \
        "Maximum pool size exceeded" in torch_error
    assert "RMM failure" not in torch_error and ".cpp" not in torch_error
    assert "asked PoolMemoryResource for 1.0 GiB on device 0" in out["errors"]["nbrmm"]
    assert {lib for lib, _ in out["failed"]} >= {"cupy", "torch", "nbrmm"}
    assert out["trace_plot"] > 1000 and out["segment_plot"] > 1000
    assert dump.stat().st_size > 0


def test_one_tag_object_used_by_several_threads_at_once(host):
    memory.record_history(stacks="none")
    shared = memory.tag("shared")
    entered = threading.Barrier(2)

    def work(k):
        with memory.tag("outer"):
            if k == 0:
                with memory.tag("deeper"), shared:
                    entered.wait()
                    entered.wait()
            else:
                with shared:
                    entered.wait()
                entered.wait()  # this thread left ``shared`` while thread 0 is inside
            assert memory.current_tag() == "outer"
            nbrmm.Buffer(k + 1, mr=host)

    assert run_threads(work, 2) == []
    assert sorted(e.tag for e in events(memory.snapshot(), "alloc")) == ["outer", "outer"]


@pytest.mark.parametrize("kwargs", [{"max_events": True}, {"device": True}, {"device": [0.0]}])
def test_bools_and_floats_are_not_ints(kwargs):
    with pytest.raises(TypeError, match=f"{next(iter(kwargs))}: expected an int"):
        memory.record_history(**kwargs)


def test_a_tag_that_is_not_valid_utf8_is_kept_escaped(host):
    memory.record_history()
    with memory.tag("bad\udcff"):
        buf = nbrmm.Buffer(8, mr=host)
    assert memory.snapshot().events[0].tag == "bad\\udcff"
    del buf


def test_a_resource_callback_may_use_the_history():
    heap = HostHeap()
    seen = []

    def allocate(nbytes, stream):
        with memory.tag("inside"):
            seen.append((len(memory.snapshot().events), memory.current_tag()))
        return heap.allocate(nbytes, stream)

    mr = nbrmm.mr.CallbackMemoryResource(allocate, heap.deallocate)
    memory.record_history()
    with memory.tag("outside"):
        buf = nbrmm.Buffer(64, mr=mr)
    memory.record_history(False)
    extra = nbrmm.Buffer(32, mr=mr)  # the callback stops nothing, records nothing now
    assert seen == [(0, "inside"), (1, "inside")]
    assert [(e.size, e.tag) for e in memory.snapshot().events] == [(64, "outside")]
    del buf, extra


def test_tags_left_out_of_order_take_only_themselves(host):
    # A generator suspended inside its tag, closed inside the caller's tag: closing it
    # takes its own tag away and leaves the caller's.
    def produce():
        with memory.tag("producer"):
            yield

    memory.record_history()
    gen = produce()
    next(gen)
    with memory.tag("caller"):
        gen.close()
        assert memory.current_tag() == "caller"
        buf = nbrmm.Buffer(8, mr=host)
    assert memory.current_tag() is None
    assert [e.tag for e in events(memory.snapshot(), "alloc")] == ["caller"]
    del buf


def test_a_tag_left_on_another_thread_is_a_clear_error():
    t = memory.tag("entered here")
    t.__enter__()
    errors = run_threads(lambda k: t.__exit__(None, None, None), 1)
    assert [type(e) for e in errors] == [RuntimeError]
    assert "left on a thread that did not enter it" in str(errors[0])
    assert memory.current_tag() == "entered here"  # still this thread's, until it leaves it
    t.__exit__(None, None, None)
    assert memory.current_tag() is None
    with pytest.raises(RuntimeError, match="did not enter it"):
        memory.tag("never entered").__exit__(None, None, None)


def test_tag_names_are_kept_whole(host):
    class Evil(str):
        def encode(self, *args):  # not what the tag reads
            return b"\xff"

    with memory.tag("a\x00b"):
        assert memory.current_tag() == "a\x00b"
    memory.record_history()
    with memory.tag(Evil("evil")):
        assert memory.current_tag() == "evil"
        buf = nbrmm.Buffer(8, mr=host)
    assert events(memory.snapshot(), "alloc")[0].tag == "evil"
    del buf


def test_fork_while_threads_record():
    # A child forked while other threads record allocations and frees allocates and
    # records on (the recorder's lock is never inherited held).
    out = run_python(
        """
        import os, signal, sys, threading
        sys.path.insert(0, %r)
        import nbrmm, nbrmm.memory as memory
        from extensions import testing
        heap = testing.host_heap_resource()
        memory.record_history()
        stop = False

        def churn(i):
            while not stop:
                with memory.tag(f"t{i}"):
                    nbrmm.Buffer(100 + i, mr=heap)

        threads = [threading.Thread(target=churn, args=(i,), daemon=True) for i in range(6)]
        for t in threads:
            t.start()
        failed = 0
        for _ in range(60):
            pid = os.fork()
            if pid == 0:
                signal.alarm(10)
                b = nbrmm.Buffer(64, mr=heap)
                memory.snapshot()
                del b
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            failed += status != 0
        stop = True
        print("failed", failed)
        """
        % os.path.dirname(HERE),
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["failed", "0"], out.stdout + out.stderr
