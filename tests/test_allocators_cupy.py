"""The CuPy allocator hook (nbrmm.allocators.cupy)."""

import gc
import threading
import weakref

import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap, run_python
from nbrmm import _nbrmm


def _stat(mr, name):
    counts = mr.allocation_counts
    return counts[name] if isinstance(counts, dict) else getattr(counts, name)


# ------------------------------------------------------------------------------------
# CPU: importing, argument checking
# ------------------------------------------------------------------------------------


def test_import_nbrmm_imports_no_framework():
    out = run_python(
        "import sys, nbrmm, nbrmm.mr, nbrmm.allocators\n"
        "print(sorted(m for m in ('cupy', 'torch', 'numba') if m in sys.modules))"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "package", "use"),
    [
        ("nbrmm.allocators.cupy", "cupy", "m.rmm_cupy_allocator(256)"),
        ("nbrmm.allocators.cupy", "cupy", "m.cupy_allocator()"),
        ("nbrmm.allocators.torch", "torch", "m.torch_allocator()"),
        ("nbrmm.allocators.numba", "numba", "m.RMMNumbaManager()"),
        ("nbrmm.allocators.numba", "numba", "m.numba_manager()"),
    ],
)
def test_hook_without_its_framework_imports_and_raises_at_use(module, package, use):
    # As rmm's hooks: the module imports; using it raises, naming the missing package.
    out = run_python(
        f"import sys\nsys.modules[{package!r}] = None\n"
        f"import {module} as m\n"
        "try:\n"
        f"    {use}\n"
        "except ModuleNotFoundError as e:\n"
        "    print('name=' + str(e.name))\n"
        "    print(e)\n"
        "else:\n"
        "    print('no error')\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"name={package}\n")
    assert package in out.stdout.splitlines()[1]


def test_factory_rejects_bad_arguments():
    with pytest.raises(TypeError, match="^mr: expected an nbrmm.mr.DeviceMemoryResource"):
        _nbrmm._cupy_allocator(mr=3)
    with pytest.raises(TypeError, match="^mr:"):
        _nbrmm._cupy_allocator(mr=nbrmm.mr.DeviceMemoryResource)
    with pytest.raises(TypeError, match="^stream:"):
        _nbrmm._cupy_allocator(stream="default")


def test_allocator_rejects_bad_sizes_before_allocating():
    heap = HostHeap()
    alloc = _nbrmm._cupy_allocator(heap.resource(), nbrmm.DEFAULT_STREAM)
    with pytest.raises(TypeError, match="exactly one argument"):
        alloc()
    with pytest.raises(TypeError, match="exactly one argument"):
        alloc(1, 2)
    with pytest.raises(TypeError, match="exactly one argument"):
        alloc(nbytes=1)
    with pytest.raises(TypeError, match="^nbytes: expected an int, got str"):
        alloc("256")
    with pytest.raises(TypeError, match="^nbytes:"):
        alloc(True)
    with pytest.raises(ValueError, match="^nbytes: must be a non-negative"):
        alloc(-1)
    with pytest.raises(ValueError, match="^nbytes:"):
        alloc(1 << 70)
    assert heap.calls == []


def test_allocator_holds_its_resource_and_stream():
    heap = HostHeap()
    mr = heap.resource()
    stream = nbrmm.Stream(nbrmm.DEFAULT_STREAM)
    alloc = _nbrmm._cupy_allocator(mr, stream)
    assert alloc.mr is mr
    assert alloc.stream is stream
    assert "CupyAllocator" in repr(alloc)
    ref = weakref.ref(mr)
    del mr
    gc.collect()
    assert ref() is not None
    del alloc
    gc.collect()
    assert ref() is None

    unbound = _nbrmm._cupy_allocator()
    assert unbound.mr is None
    assert unbound.stream is None


# ------------------------------------------------------------------------------------
# CPU with CuPy installed (no GPU needed): the objects handed to CuPy
# ------------------------------------------------------------------------------------


@pytest.fixture
def hook():
    pytest.importorskip("cupy")
    import nbrmm.allocators.cupy as hook

    yield hook
    hook._set_paths()


def test_memory_pointer_owns_the_allocation(hook):
    import cupy

    heap = HostHeap()
    alloc = hook.cupy_allocator(mr=heap.resource(), stream=nbrmm.DEFAULT_STREAM)
    assert isinstance(alloc, hook.CupyAllocator)
    mp = alloc(256)
    assert type(mp) is cupy.cuda.MemoryPointer
    assert isinstance(mp.mem, hook.Memory)
    assert isinstance(mp.mem, cupy.cuda.memory.BaseMemory)
    assert heap.live == {mp.ptr: 256}
    assert mp.mem.ptr == mp.ptr
    assert mp.mem.size == 256
    assert mp.device_id == mp.mem.device_id == nbrmm.get_current_device()
    assert mp.mem.stream_handle == 0
    shifted = mp + 64  # another pointer into the same memory keeps it alive
    assert shifted.ptr == mp.ptr + 64
    del mp
    gc.collect()
    assert len(heap.live) == 1
    del shifted
    assert heap.live == {}
    assert [c[0] for c in heap.calls] == ["allocate", "deallocate"]


def test_zero_bytes_give_a_null_pointer_without_allocating(hook):
    heap = HostHeap()
    alloc = hook.cupy_allocator(mr=heap.resource(), stream=nbrmm.DEFAULT_STREAM)
    mp = alloc(0)
    assert mp.ptr == 0
    assert mp.mem.size == 0
    del mp
    assert heap.calls == []


def test_memory_outlives_its_allocator_and_resource_objects(hook):
    heap = HostHeap()
    mr = heap.resource()
    alloc = hook.cupy_allocator(mr=mr, stream=nbrmm.DEFAULT_STREAM)
    mp = alloc(128)
    del alloc, mr
    gc.collect()
    assert len(heap.live) == 1
    del mp
    gc.collect()
    assert heap.live == {}


def test_fixed_stream_is_recorded_and_kept_alive(hook):
    heap = HostHeap()
    streams = []
    mr = nbrmm.mr.CallbackMemoryResource(
        lambda n, s: streams.append(("a", s.handle)) or heap.allocate(n, s),
        lambda p, n, s: streams.append(("d", s.handle)) or heap.deallocate(p, n, s),
    )
    stream = nbrmm.Stream(nbrmm.PER_THREAD_DEFAULT_STREAM)
    alloc = hook.cupy_allocator(mr=mr, stream=stream)
    mp = alloc(64)
    assert mp.mem.stream_handle == stream.handle == 2
    del alloc, stream
    gc.collect()
    del mp
    assert streams == [("a", 2), ("d", 2)]


def test_memory_error_from_resource_becomes_cupy_out_of_memory(hook):
    import cupy

    def refuse(nbytes, stream):
        raise MemoryError(f"no room for {nbytes}")

    mr = nbrmm.mr.CallbackMemoryResource(refuse, lambda p, n, s: None)
    alloc = hook.cupy_allocator(mr=mr, stream=nbrmm.DEFAULT_STREAM)
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError, match="1,000 bytes") as info:
        alloc(1000)
    assert isinstance(info.value.__cause__, MemoryError)
    assert "no room for 1000" in str(info.value.__cause__)


def test_other_errors_from_resource_propagate(hook):
    def broken(nbytes, stream):
        raise KeyError("broken resource")

    mr = nbrmm.mr.CallbackMemoryResource(broken, lambda p, n, s: None)
    with pytest.raises(KeyError, match="broken resource"):
        hook.cupy_allocator(mr=mr, stream=nbrmm.DEFAULT_STREAM)(10)


def test_module_surface(hook):
    assert hook.__all__ == sorted(hook.__all__)
    for name in hook.__all__:
        assert getattr(hook, name).__doc__
    assert hook.rmm_cupy_allocator.mr is None
    assert hook.rmm_cupy_allocator.stream is None


# ------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------


@pytest.fixture
def cupy_gpu():
    import cupy

    import nbrmm.allocators.cupy as hook

    yield cupy, hook
    hook._set_paths()
    cupy.cuda.Device().synchronize()


def _recording(upstream, log):
    """A resource over `upstream` that logs (kind, nbytes, stream handle)."""

    def allocate(nbytes, stream):
        log.append(("allocate", nbytes, stream.handle))
        return upstream.allocate(nbytes, stream)

    def deallocate(ptr, nbytes, stream):
        log.append(("deallocate", nbytes, stream.handle))
        upstream.deallocate(ptr, nbytes, stream)

    return nbrmm.mr.CallbackMemoryResource(allocate, deallocate)


@pytest.mark.gpu
def test_gpu_cupy_layout_is_understood(cupy_gpu):
    cupy, hook = cupy_gpu
    assert _nbrmm._cupy_stream_by_device()  # CuPy >= 13 has cupy_backends' get_stream_ptr


@pytest.fixture(params=[True, False], ids=["stream-by-device", "current-stream-ptr"])
def stream_path(request, cupy_gpu):
    cupy, hook = cupy_gpu
    hook._set_paths(stream_by_device=request.param)
    assert _nbrmm._cupy_stream_by_device() is request.param
    return cupy, hook


@pytest.mark.gpu
def test_gpu_stream_paths_read_cupys_current_stream(stream_path):
    cupy, hook = stream_path
    alloc = hook.cupy_allocator(mr=nbrmm.mr.CudaMemoryResource())
    with cupy.cuda.using_allocator(alloc):
        assert cupy.empty(8).data.mem.stream_handle == cupy.cuda.get_current_stream().ptr == 0
        s1 = cupy.cuda.Stream(non_blocking=True)
        with s1:
            assert cupy.empty(8).data.mem.stream_handle == s1.ptr
            s2 = cupy.cuda.Stream()
            with s2:
                assert cupy.empty(8).data.mem.stream_handle == s2.ptr
            assert cupy.empty(8).data.mem.stream_handle == s1.ptr
        s2.use()
        try:
            assert cupy.empty(8).data.mem.stream_handle == s2.ptr
        finally:
            cupy.cuda.Stream.null.use()
        assert cupy.empty(8).data.mem.stream_handle == 0


@pytest.mark.gpu
@pytest.mark.parametrize("by_device", [True, False], ids=["stream-by-device", "current-stream-ptr"])
def test_gpu_per_thread_default_stream_of_cupy(by_device):
    # CUPY_CUDA_PER_THREAD_DEFAULT_STREAM is read when CuPy is imported: a fresh process.
    code = f"""
        import os
        os.environ["CUPY_CUDA_PER_THREAD_DEFAULT_STREAM"] = "1"
        import cupy, nbrmm, nbrmm.mr
        import nbrmm.allocators.cupy as hook
        from nbrmm import _nbrmm
        hook._set_paths(stream_by_device={by_device})
        assert _nbrmm._cupy_stream_by_device() is {by_device}
        log = []
        cuda = nbrmm.mr.CudaMemoryResource()
        mr = nbrmm.mr.CallbackMemoryResource(
            lambda n, s: log.append(s.handle) or cuda.allocate(n, s),
            lambda p, n, s: log.append(s.handle) or cuda.deallocate(p, n, s))
        with cupy.cuda.using_allocator(hook.cupy_allocator(mr=mr)):
            x = cupy.arange(100)
            assert int(x.sum()) == 4950
        print(x.data.mem.stream_handle, cupy.cuda.get_current_stream().ptr)
        del x
        print(sorted(set(log)), len(log) % 2)
    """
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "2 2"  # cudaStreamPerThread, as CuPy itself reports
    assert lines[1] == "[2] 0"  # every allocation and free on it, all freed


@pytest.mark.gpu
def test_gpu_arrays_from_bound_resource(cupy_gpu):
    cupy, hook = cupy_gpu
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    with cupy.cuda.using_allocator(hook.cupy_allocator(mr=stats)):
        x = cupy.arange(1000, dtype=cupy.int64)
        y = x * 2
        assert int(y.sum()) == 999000
        assert (cupy.asnumpy(y[:3]) == [0, 2, 4]).all()
    assert _stat(stats, "total_count") >= 2
    assert _stat(stats, "current_bytes") >= 2 * 8000
    del x, y
    cupy.cuda.Device().synchronize()
    assert _stat(stats, "current_bytes") == 0


@pytest.mark.gpu
def test_gpu_rmm_cupy_allocator_uses_the_current_resource(cupy_gpu):
    cupy, hook = cupy_gpu
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    nbrmm.mr.set_current_device_resource(stats)
    with cupy.cuda.using_allocator(hook.rmm_cupy_allocator):
        x = cupy.ones(4096, dtype=cupy.float32)
        assert float(x.sum()) == 4096.0
    assert _stat(stats, "current_bytes") >= 4096 * 4
    del x
    assert _stat(stats, "current_bytes") == 0


@pytest.mark.gpu
def test_gpu_memory_returns_to_its_origin_when_current_resource_changes(cupy_gpu):
    cupy, hook = cupy_gpu
    a = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    b = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    with cupy.cuda.using_allocator(hook.rmm_cupy_allocator):
        nbrmm.mr.set_current_device_resource(a)
        x = cupy.zeros(1 << 16, dtype=cupy.uint8)
        nbrmm.mr.set_current_device_resource(b)
        y = cupy.zeros(1 << 17, dtype=cupy.uint8)
    assert _stat(a, "current_bytes") == 1 << 16
    assert _stat(b, "current_bytes") == 1 << 17
    del x
    assert _stat(a, "current_bytes") == 0
    assert _stat(b, "current_bytes") == 1 << 17
    assert int(y.sum()) == 0
    del y
    assert _stat(b, "current_bytes") == 0


@pytest.mark.gpu
def test_gpu_each_allocation_is_freed_to_the_resource_that_made_it(cupy_gpu):
    cupy, hook = cupy_gpu
    log_a, log_b = [], []
    a = _recording(nbrmm.mr.CudaMemoryResource(), log_a)
    b = _recording(nbrmm.mr.CudaMemoryResource(), log_b)
    with cupy.cuda.using_allocator(hook.rmm_cupy_allocator):
        nbrmm.mr.set_current_device_resource(a)
        x = cupy.ones(1000)
        nbrmm.mr.set_current_device_resource(b)
        y = cupy.ones(2000)
        nbrmm.mr.set_current_device_resource(nbrmm.mr.CudaMemoryResource())
    del x, y
    for log, nbytes in ((log_a, 8000), (log_b, 16000)):
        assert [e[0] for e in log] == ["allocate", "deallocate"]
        assert log[0][1] == log[1][1] >= nbytes


@pytest.mark.gpu
def test_gpu_threads_with_their_own_streams(stream_path):
    cupy, hook = stream_path
    log = []
    lock = threading.Lock()

    def allocate(nbytes, stream):
        ptr = upstream.allocate(nbytes, stream)
        with lock:
            log.append(("allocate", ptr, stream.handle))
        return ptr

    def deallocate(ptr, nbytes, stream):
        with lock:
            log.append(("deallocate", ptr, stream.handle))
        upstream.deallocate(ptr, nbytes, stream)

    upstream = nbrmm.mr.CudaMemoryResource()
    mr = nbrmm.mr.CallbackMemoryResource(allocate, deallocate)
    alloc = hook.cupy_allocator(mr=mr)
    streams, errors = {}, []
    barrier = threading.Barrier(2)

    def work(name):
        try:
            stream = cupy.cuda.Stream(non_blocking=True)
            with cupy.cuda.using_allocator(alloc), stream:
                barrier.wait()
                x = cupy.arange(10000, dtype=cupy.float64)
                total = float((x * 3).sum())
                assert x.data.mem.stream_handle == stream.ptr
                stream.synchronize()
                assert total == 3 * 9999 * 10000 / 2
                del x
            streams[name] = stream.ptr
            stream.synchronize()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert streams["t1"] != streams["t2"]
    by_ptr = {}
    for kind, ptr, handle in log:
        by_ptr.setdefault(ptr, []).append((kind, handle))
    used = set()
    for events in by_ptr.values():
        for i in range(0, len(events), 2):
            (k1, h1), (k2, h2) = events[i], events[i + 1]
            assert (k1, k2) == ("allocate", "deallocate")
            assert h1 == h2  # freed on the stream it was allocated on
            used.add(h1)
    assert {streams["t1"], streams["t2"]} <= used


@pytest.mark.gpu
def test_gpu_current_stream_object_outlives_its_allocations(stream_path):
    cupy, hook = stream_path
    log = []
    mr = _recording(nbrmm.mr.CudaMemoryResource(), log)
    stream = cupy.cuda.Stream(non_blocking=True)
    handle = stream.ptr
    with cupy.cuda.using_allocator(hook.cupy_allocator(mr=mr)), stream:
        x = cupy.ones(100)
    ref = weakref.ref(stream)
    del stream
    gc.collect()
    assert ref() is not None  # the allocation keeps CuPy's stream alive
    assert float(x.sum()) == 100.0
    del x
    gc.collect()
    assert ref() is None
    assert [(e[0], e[2]) for e in log] == [("allocate", handle), ("deallocate", handle)]
    assert log[0][1] == log[1][1] >= 800


@pytest.mark.gpu
def test_gpu_fixed_stream(cupy_gpu):
    cupy, hook = cupy_gpu
    stream = nbrmm.Stream(flags=nbrmm.CudaStreamFlags.NON_BLOCKING)
    alloc = hook.cupy_allocator(mr=nbrmm.mr.CudaMemoryResource(), stream=stream)
    with cupy.cuda.using_allocator(alloc):
        x = cupy.full(10, 7, dtype=cupy.int32)
    assert x.data.mem.stream_handle == stream.handle
    assert int(x.sum()) == 70


@pytest.mark.gpu
def test_gpu_zero_size_arrays(cupy_gpu):
    cupy, hook = cupy_gpu
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    alloc = hook.cupy_allocator(mr=stats)
    with cupy.cuda.using_allocator(alloc):
        x = cupy.empty(0, dtype=cupy.float32)
        assert x.size == 0
        assert float(cupy.concatenate([x, cupy.ones(2, dtype=cupy.float32)]).sum()) == 2.0
    mp = alloc(0)
    assert mp.ptr == 0
    assert _stat(stats, "current_bytes") == 0


@pytest.mark.gpu
def test_gpu_out_of_memory_raises_cupy_error(cupy_gpu):
    cupy, hook = cupy_gpu
    limited = nbrmm.mr.LimitingResourceAdaptor(nbrmm.mr.CudaMemoryResource(), 1 << 20)
    with cupy.cuda.using_allocator(hook.cupy_allocator(mr=limited)):
        small = cupy.ones(1 << 10, dtype=cupy.uint8)
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError) as info:
            cupy.empty(2 << 20, dtype=cupy.uint8)
        assert isinstance(info.value.__cause__, MemoryError)
        assert int(small.sum()) == 1 << 10


@pytest.mark.gpu
def test_gpu_set_allocator_globally(cupy_gpu):
    cupy, hook = cupy_gpu
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(hook.cupy_allocator(mr=stats))
    try:
        x = cupy.linspace(0.0, 1.0, 1001)
        assert abs(float(x.mean()) - 0.5) < 1e-12
        assert _stat(stats, "total_count") >= 1
    finally:
        cupy.cuda.set_allocator(previous)
    del x
    assert _stat(stats, "current_bytes") == 0


@pytest.mark.gpu
def test_gpu_memory_objects_use_cupys_public_fields(cupy_gpu):
    import weakref

    cupy, hook = cupy_gpu
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    ref = weakref.ref(stats)
    mp = hook.cupy_allocator(mr=stats)(512)
    assert type(mp) is cupy.cuda.MemoryPointer
    mem = mp.mem
    assert isinstance(mem, cupy.cuda.memory.BaseMemory) and type(mem) is hook.Memory
    assert mem.size == 512 and mem.ptr == mp.ptr and mem.device_id == cupy.cuda.Device().id
    assert mem.mr is stats  # the resource the memory goes back to, kept alive by it
    del stats, mem
    gc.collect()
    assert ref() is not None and ref().allocation_counts.current_bytes == 512
    del mp
    gc.collect()
    assert ref() is None
