"""The CuPy allocator hook (nbrmm.allocators.cupy).

Most behaviour is checked twice: against a stand-in for the part of CuPy's public API that
an allocator meets (``FAKE_CUPY``, so that it runs without CuPy and without a GPU), and
against CuPy itself on a GPU. Host-memory resources serve both: CuPy only passes the
pointers around here.
"""

import gc
import importlib
import sys
import threading
import weakref

import numpy
import pytest

import nbrmm
import nbrmm.allocators
import nbrmm.mr
from helpers import HostHeap, run_python


def _stat(mr, name):
    counts = mr.allocation_counts
    return counts[name] if isinstance(counts, dict) else getattr(counts, name)


#: A stand-in for CuPy: ``make_fake_cupy()`` returns the modules ``cupy``, ``cupy.cuda``
#: and ``cupy.cuda.memory``, with what CuPy documents of the names they hold (the current
#: stream is per thread, ``UnownedMemory`` needs an explicit device for a null pointer and
#: refuses a negative one, as it cannot look pointers up here). ``set_allocator`` keeps the
#: allocator where interpreter exit never clears it, as CuPy's C-level global does.
FAKE_CUPY = '''
import ctypes, threading, types

def make_fake_cupy():
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    memory = types.ModuleType("cupy.cuda.memory")
    cupy.cuda, cuda.memory = cuda, memory
    local = threading.local()
    handles = [0x1000]

    class OutOfMemoryError(MemoryError):
        def __init__(self, size, total, limit=0):
            super().__init__(f"Out of memory allocating {size:,} bytes")

    class BaseMemory:
        ptr, size, device_id = 0, 0, -1

    class UnownedMemory(BaseMemory):
        """Memory that CuPy does not own (its owner keeps it alive)."""

        def __init__(self, ptr, size, owner, device_id=-1):
            if device_id < 0:
                raise RuntimeError("UnownedMemory: no device id (no pointer look-up here)")
            self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id

    class MemoryPointer:
        def __init__(self, mem, offset):
            if not isinstance(mem, BaseMemory):
                raise TypeError("mem: expected a BaseMemory")
            self.mem, self.ptr, self.device_id = mem, mem.ptr + offset, mem.device_id

    class Stream:
        def __init__(self, null=False, non_blocking=False, ptds=False):
            if null or ptds:
                self.ptr = 0 if null else 2
            else:
                handles[0] += 0x100
                self.ptr = handles[0]

        def __cuda_stream__(self):
            return (0, self.ptr)

        def __enter__(self):
            stack().append(self)
            return self

        def __exit__(self, *exc):
            stack().pop()

    Stream.null, Stream.ptds = Stream(null=True), Stream(ptds=True)

    def stack():
        if not hasattr(local, "stack"):
            local.stack = [Stream.null]
        return local.stack

    def get_current_stream(device_id=-1):
        return stack()[-1]

    kept = [None]  # never freed: a C-level global of CuPy
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))

    def set_allocator(allocator=None):
        kept[0] = allocator

    def get_allocator():
        return kept[0]

    memory.__dict__.update(
        OutOfMemoryError=OutOfMemoryError, BaseMemory=BaseMemory,
        UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
        set_allocator=set_allocator, get_allocator=get_allocator)
    cuda.__dict__.update(
        BaseMemory=BaseMemory, UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
        Stream=Stream, get_current_stream=get_current_stream, get_device_id=lambda: 0,
        set_allocator=set_allocator, get_allocator=get_allocator)
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.memory": memory}
'''

_ABSENT = object()


def _hook_over_fake_cupy():
    """``nbrmm.allocators.cupy`` imported anew over the stand-in, and the stand-in's
    ``cupy``; every module that was imported before is put back afterwards."""
    namespace = {}
    exec(FAKE_CUPY, namespace)  # noqa: S102 - the stand-in above
    fake = namespace["make_fake_cupy"]()
    names = [*fake, "nbrmm.allocators.cupy"]
    saved = {name: sys.modules.get(name, _ABSENT) for name in names}
    saved_attribute = vars(nbrmm.allocators).get("cupy", _ABSENT)
    sys.modules.update(fake)
    sys.modules.pop("nbrmm.allocators.cupy", None)
    try:
        hook = importlib.import_module("nbrmm.allocators.cupy")
    finally:
        for name, module in saved.items():
            if module is _ABSENT:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        if saved_attribute is _ABSENT:
            vars(nbrmm.allocators).pop("cupy", None)
        else:
            nbrmm.allocators.cupy = saved_attribute
    return hook, fake["cupy"]


@pytest.fixture(scope="module")
def fake_api():
    return _hook_over_fake_cupy()


@pytest.fixture(params=["fake-cupy", pytest.param("cupy", marks=pytest.mark.gpu)])
def api(request):
    """``(hook module, cupy module)``: over the stand-in, or over CuPy itself (GPU)."""
    if request.param == "fake-cupy":
        yield request.getfixturevalue("fake_api")
        return
    cupy = pytest.importorskip("cupy")
    import nbrmm.allocators.cupy as hook

    yield hook, cupy
    cupy.cuda.Device().synchronize()


def _new_stream(cupy):
    return cupy.cuda.Stream(non_blocking=True)


# ------------------------------------------------------------------------------------
# Importing; the module without CuPy
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
        ("nbrmm.allocators.cupy", "cupy", "m.CupyAllocator()"),
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


def test_module_surface(api):
    hook, cupy = api
    assert hook.__all__ == sorted(hook.__all__)
    for name in hook.__all__:
        assert getattr(hook, name).__doc__
    assert isinstance(hook.rmm_cupy_allocator, hook.CupyAllocator)
    assert hook.rmm_cupy_allocator.mr is None
    assert hook.rmm_cupy_allocator.stream is None
    assert hook.Memory is cupy.cuda.UnownedMemory
    assert hook.Stream is nbrmm.Stream


# ------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------


def test_factory_rejects_bad_arguments(api):
    hook, _ = api
    with pytest.raises(TypeError, match="^mr: expected an nbrmm.mr.DeviceMemoryResource"):
        hook.cupy_allocator(mr=3)
    with pytest.raises(TypeError, match="^mr:"):
        hook.cupy_allocator(mr=nbrmm.mr.DeviceMemoryResource)
    with pytest.raises(TypeError, match="^stream: .*got str"):
        hook.cupy_allocator(stream="default")
    with pytest.raises(TypeError, match="^stream:"):
        hook.CupyAllocator(stream=5)
    with pytest.raises(TypeError, match="^stream: .*got nbrmm.Stream that is not initialized"):
        hook.cupy_allocator(stream=nbrmm.Stream.__new__(nbrmm.Stream))

    class NewerProtocol:
        def __cuda_stream__(self):
            return (1, 0)

    with pytest.raises(NotImplementedError, match="^stream: .*version 1"):
        hook.cupy_allocator(stream=NewerProtocol())


def test_allocator_rejects_bad_sizes_before_allocating(api):
    hook, _ = api
    heap = HostHeap()
    alloc = hook.cupy_allocator(heap.resource(), nbrmm.DEFAULT_STREAM)
    with pytest.raises(TypeError, match="nbytes"):
        alloc()
    with pytest.raises(TypeError):
        alloc(1, 2)
    with pytest.raises(TypeError, match="nbytes"):
        alloc(nbytes=1)
    with pytest.raises(TypeError, match="^nbytes: expected an int, got str"):
        alloc("256")
    with pytest.raises(TypeError, match="^nbytes: expected an int, got bool"):
        alloc(True)
    with pytest.raises(TypeError, match="^nbytes: expected an int, got float"):
        alloc(256.0)
    with pytest.raises(ValueError, match="^nbytes: must be non-negative"):
        alloc(-1)
    with pytest.raises(ValueError, match="^nbytes:"):
        alloc(1 << 70)
    assert heap.calls == []


def test_allocator_holds_its_resource_and_stream(api):
    hook, _ = api
    heap = HostHeap()
    mr = heap.resource()
    stream = nbrmm.Stream(nbrmm.DEFAULT_STREAM)
    alloc = hook.cupy_allocator(mr, stream)
    assert alloc.mr is mr
    assert alloc.stream is stream
    assert "CupyAllocator" in repr(alloc)
    with pytest.raises(AttributeError):
        alloc.mr = None
    ref = weakref.ref(mr)
    del mr
    gc.collect()
    assert ref() is not None
    del alloc
    gc.collect()
    assert ref() is None

    unbound = hook.cupy_allocator()
    assert unbound.mr is None
    assert unbound.stream is None


def test_a_stream_like_object_is_wrapped(api):
    hook, _ = api

    class Foreign:
        def __cuda_stream__(self):
            return (0, 2)

    foreign = Foreign()
    alloc = hook.cupy_allocator(stream=foreign)
    assert isinstance(alloc.stream, nbrmm.Stream)
    assert alloc.stream.handle == 2 and alloc.stream.owner is foreign


# ------------------------------------------------------------------------------------
# The objects handed to CuPy, and their lifetimes
# ------------------------------------------------------------------------------------


def test_memory_pointer_owns_the_allocation(api):
    hook, cupy = api
    heap = HostHeap()
    mr = heap.resource()
    alloc = hook.cupy_allocator(mr=mr, stream=nbrmm.DEFAULT_STREAM)
    mp = alloc(256)
    assert type(mp) is cupy.cuda.MemoryPointer
    assert type(mp.mem) is hook.Memory
    assert isinstance(mp.mem, cupy.cuda.BaseMemory)
    assert heap.live == {mp.ptr: 256}
    assert mp.mem.ptr == mp.ptr
    assert mp.mem.size == 256
    assert mp.device_id == mp.mem.device_id == cupy.cuda.get_device_id()
    # CuPy's reference to the owner of unowned memory: an opaque object, no nbrmm one (CuPy
    # may keep memory until the process ends).
    assert not isinstance(mp.mem._owner, (nbrmm.Buffer, nbrmm.mr.DeviceMemoryResource))
    assert [c[0] for c in heap.calls] == ["allocate"]
    mem = mp.mem
    del mp
    gc.collect()
    assert len(heap.live) == 1  # the memory object keeps it
    del mem
    assert heap.live == {}
    assert [c[0] for c in heap.calls] == ["allocate", "deallocate"]


def test_zero_bytes_give_a_null_pointer_without_allocating(api):
    hook, cupy = api
    heap = HostHeap()
    alloc = hook.cupy_allocator(mr=heap.resource(), stream=nbrmm.DEFAULT_STREAM)
    mp = alloc(0)
    assert mp.ptr == 0
    assert mp.mem.size == 0
    assert mp.device_id == cupy.cuda.get_device_id()
    del mp
    assert heap.calls == []


def test_int_like_sizes_are_accepted(api):
    hook, _ = api
    heap = HostHeap()
    alloc = hook.cupy_allocator(mr=heap.resource(), stream=nbrmm.DEFAULT_STREAM)
    mp = alloc(numpy.int64(512))
    assert mp.mem.size == 512 and list(heap.live.values()) == [512]


def test_memory_outlives_its_allocator_and_resource_objects(api):
    hook, _ = api
    heap = HostHeap()
    mr = heap.resource()
    alloc = hook.cupy_allocator(mr=mr, stream=nbrmm.DEFAULT_STREAM)
    mp = alloc(128)
    ref = weakref.ref(mr)
    del alloc, mr
    gc.collect()
    assert ref() is not None
    assert len(heap.live) == 1
    del mp
    gc.collect()
    assert heap.live == {}
    assert ref() is None


def _last_allocation_stream(log):
    """The stream handle of the last allocation logged by _stream_log's resource."""
    return next(handle for kind, _, handle in reversed(log) if kind == "allocate")


class _ForeignStream:
    """A stream of another library (only the stream protocol)."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _stream_log(heap, log):
    """A host-memory resource that logs (kind, nbytes, stream handle) of each call."""
    return nbrmm.mr.CallbackMemoryResource(
        lambda n, s: log.append(("allocate", n, s.handle)) or heap.allocate(n, s),
        lambda p, n, s: log.append(("deallocate", n, s.handle)) or heap.deallocate(p, n, s),
    )


def test_fixed_stream_is_recorded_and_kept_alive(api):
    hook, _ = api
    heap, log = HostHeap(), []
    stream = nbrmm.Stream(_ForeignStream(0x40))  # (never used for work: a host heap)
    alloc = hook.cupy_allocator(mr=_stream_log(heap, log), stream=stream)
    mp = alloc(64)
    assert _last_allocation_stream(log) == stream.handle == 0x40
    ref = weakref.ref(stream)
    del alloc, stream
    gc.collect()
    assert ref() is not None
    del mp
    gc.collect()
    assert ref() is None
    assert log == [("allocate", 64, 0x40), ("deallocate", 64, 0x40)]


def test_cupys_current_stream_is_used_and_kept_alive(api):
    hook, cupy = api
    heap, log = HostHeap(), []
    alloc = hook.cupy_allocator(mr=_stream_log(heap, log))
    alloc(8)
    assert _last_allocation_stream(log) == 0  # CuPy's null stream: the legacy default
    with cupy.cuda.Stream.ptds:
        alloc(8)
        assert _last_allocation_stream(log) == 2
    stream = _new_stream(cupy)
    handle = stream.ptr
    with stream:
        mp = alloc(100)
        assert _last_allocation_stream(log) == handle
        with _new_stream(cupy) as inner:
            alloc(8)
            assert _last_allocation_stream(log) == inner.ptr
        alloc(8)
        assert _last_allocation_stream(log) == handle
    ref = weakref.ref(stream)
    del stream
    gc.collect()
    assert ref() is not None  # the allocation keeps CuPy's stream alive
    log.clear()
    del mp
    gc.collect()
    assert ref() is None
    assert log == [("deallocate", 100, handle)]
    assert heap.live == {}


def test_memory_returns_to_its_resource_after_the_current_one_changed(api):
    hook, _ = api
    heaps = HostHeap(), HostHeap(), HostHeap()
    a, b, c = (h.resource() for h in heaps)
    nbrmm.mr.set_current_device_resource(a)
    x = hook.rmm_cupy_allocator(1000)
    nbrmm.mr.set_current_device_resource(b)
    y = hook.rmm_cupy_allocator(2000)
    assert list(heaps[0].live) == [x.ptr] and list(heaps[1].live) == [y.ptr]
    nbrmm.mr.set_current_device_resource(c)
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is not None  # the memory keeps its resource alive
    del x, y
    gc.collect()
    assert ref() is None
    for heap, nbytes in zip(heaps, (1000, 2000, None)):
        if nbytes is None:
            assert heap.calls == []
        else:
            assert [(k, n) for k, n, _ in heap.calls] == [
                ("allocate", nbytes), ("deallocate", nbytes)
            ]
            assert heap.live == {}


def test_statistics_see_every_allocation(api):
    hook, _ = api
    heap = HostHeap()
    stats = nbrmm.mr.StatisticsResourceAdaptor(heap.resource())
    alloc = hook.cupy_allocator(mr=stats)
    held = [alloc(n) for n in (16, 256, 4096)]
    assert _stat(stats, "current_bytes") == 16 + 256 + 4096
    assert _stat(stats, "current_count") == 3
    del held
    assert _stat(stats, "current_bytes") == 0
    assert _stat(stats, "total_count") == 3


# ------------------------------------------------------------------------------------
# Errors of the resource
# ------------------------------------------------------------------------------------


def test_memory_error_from_resource_becomes_cupy_out_of_memory(api):
    hook, cupy = api

    def refuse(nbytes, stream):
        raise MemoryError(f"no room for {nbytes}")

    mr = nbrmm.mr.CallbackMemoryResource(refuse, lambda p, n, s: None)
    alloc = hook.cupy_allocator(mr=mr, stream=nbrmm.DEFAULT_STREAM)
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError, match="1,000 bytes") as info:
        alloc(1000)
    assert isinstance(info.value.__cause__, MemoryError)
    assert "no room for 1000" in str(info.value.__cause__)


def test_limit_of_an_adaptor_becomes_cupy_out_of_memory(api):
    hook, cupy = api
    heap = HostHeap()
    limited = nbrmm.mr.LimitingResourceAdaptor(heap.resource(), 1 << 12)
    alloc = hook.cupy_allocator(mr=limited)
    held = alloc(1 << 11)
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError) as info:
        alloc(1 << 12)
    assert isinstance(info.value.__cause__, nbrmm.OutOfMemory)
    assert list(heap.live.values()) == [1 << 11]
    del held
    assert heap.live == {}


def test_a_size_no_resource_can_serve_becomes_cupy_out_of_memory(api):
    hook, cupy = api
    heap = HostHeap()
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError) as info:
        hook.cupy_allocator(mr=heap.resource(), stream=nbrmm.DEFAULT_STREAM)(1 << 63)
    assert isinstance(info.value.__cause__, MemoryError)
    assert "nbytes" in str(info.value.__cause__) and heap.calls == []


def test_cupys_own_out_of_memory_error_is_not_wrapped(api):
    hook, cupy = api
    oom = cupy.cuda.memory.OutOfMemoryError(64, -1)

    def refuse(nbytes, stream):
        raise oom

    mr = nbrmm.mr.CallbackMemoryResource(refuse, lambda p, n, s: None)
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError) as info:
        hook.cupy_allocator(mr=mr, stream=nbrmm.DEFAULT_STREAM)(64)
    assert info.value is oom


def test_other_errors_from_resource_propagate(api):
    hook, _ = api

    def broken(nbytes, stream):
        raise KeyError("broken resource")

    mr = nbrmm.mr.CallbackMemoryResource(broken, lambda p, n, s: None)
    with pytest.raises(KeyError, match="broken resource"):
        hook.cupy_allocator(mr=mr, stream=nbrmm.DEFAULT_STREAM)(10)


def test_allocating_from_inside_the_resources_own_callback_is_refused(api):
    hook, _ = api
    heap = HostHeap()
    box = {}

    def allocate(nbytes, stream):
        box["alloc"](16)  # the same resource, from its own callback
        return heap.allocate(nbytes, stream)

    box["alloc"] = hook.cupy_allocator(
        mr=nbrmm.mr.CallbackMemoryResource(allocate, heap.deallocate),
        stream=nbrmm.DEFAULT_STREAM,
    )
    with pytest.raises(RuntimeError, match="inside a Python callback"):
        box["alloc"](64)
    assert heap.live == {}


# ------------------------------------------------------------------------------------
# Threads; interpreter exit
# ------------------------------------------------------------------------------------


def test_threads_allocate_on_their_own_streams(api):
    hook, cupy = api
    heap, log = HostHeap(), []
    alloc = hook.cupy_allocator(mr=_stream_log(heap, log))
    handles, errors = {}, []
    barrier = threading.Barrier(4)

    def work(k):
        try:
            stream = _new_stream(cupy)
            with stream:
                barrier.wait()
                for n in range(1, 50):
                    mp = alloc(8 * n)
                    del mp
            handles[k] = stream.ptr
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(set(handles.values())) == 4
    assert heap.live == {}
    for handle in handles.values():
        events = [e for e in log if e[2] == handle]
        assert [e[:2] for e in events[0::2]] == [("allocate", 8 * n) for n in range(1, 50)]
        assert [e[:2] for e in events[1::2]] == [("deallocate", 8 * n) for n in range(1, 50)]



def test_memory_dropped_inside_a_callback_of_its_resource_waits(api):
    # CuPy memory of a pool dropped by the Python upstream of that same pool while the pool
    # grows (its lock held): the free waits until the next allocation or free outside it.
    hook, _ = api
    heap, holder = HostHeap(), {}

    def alloc(n, s):
        holder.pop("victim", None)
        return heap.allocate(n, s)

    pool = nbrmm.mr.PoolMemoryResource(nbrmm.mr.CallbackMemoryResource(alloc, heap.deallocate), 0)
    stats = nbrmm.mr.StatisticsResourceAdaptor(pool)
    allocate = hook.cupy_allocator(mr=stats, stream=nbrmm.DEFAULT_STREAM)
    holder["victim"] = allocate(300)
    big = allocate(1 << 20)  # grows the pool: the callback drops the victim
    assert "victim" not in holder
    assert stats.allocation_counts.current_bytes == 300 + (1 << 20)
    del big  # a free outside the callback: the waiting one is done first
    assert stats.allocation_counts.current_bytes == 0


def test_lent_memory_refuses_bad_arguments_before_allocating():
    heap = HostHeap()
    mr = heap.resource()
    lend = nbrmm._nbrmm._lend_memory
    with pytest.raises(ValueError, match="^nbytes: must be non-negative"):
        lend(-1, mr, nbrmm.DEFAULT_STREAM)
    with pytest.raises(ValueError, match="^nbytes:"):
        lend(1 << 64, mr, nbrmm.DEFAULT_STREAM)
    with pytest.raises(TypeError, match="^nbytes:"):
        lend(None, mr, nbrmm.DEFAULT_STREAM)
    with pytest.raises(TypeError, match="^mr:"):
        lend(8, nbrmm.mr.DeviceMemoryResource, nbrmm.DEFAULT_STREAM)
    with pytest.raises(TypeError, match="^stream"):
        lend(8, mr, None)
    assert heap.calls == []
    ptr, owner = lend(0, mr, nbrmm.DEFAULT_STREAM)  # 0 bytes: nothing allocated
    assert ptr == 0 and heap.calls == []
    del owner
    ptr, owner = lend(64, mr, nbrmm.DEFAULT_STREAM)
    assert heap.live == {ptr: 64}
    del owner
    assert heap.live == {}

def test_an_allocator_in_a_cycle_with_its_resource_is_collected(fake_api):
    hook, _ = fake_api
    heap, box = HostHeap(), []
    mr = nbrmm.mr.CallbackMemoryResource(
        lambda n, s, box=box: heap.allocate(n, s), heap.deallocate)
    allocator = hook.cupy_allocator(mr=mr)
    box.append(allocator)  # the resource's callback holds the allocator: a cycle
    pointer = allocator(100)
    ref = weakref.ref(mr)
    del allocator, mr, box
    gc.collect()
    assert ref() is not None  # the memory CuPy still holds keeps its resource
    del pointer
    gc.collect()
    assert ref() is None and heap.live == {}


def test_the_memory_history_tags_the_hooks_allocations_cupy(fake_api):
    import nbrmm.memory as memory

    hook, _ = fake_api
    heap = HostHeap()
    allocate = hook.cupy_allocator(mr=heap.resource(), stream=nbrmm.DEFAULT_STREAM)
    memory.record_history()
    try:
        plain = allocate(1000)
        with memory.tag("prepare"):
            tagged = allocate(2000)
        snap = memory.snapshot()
    finally:
        memory.record_history(False)
    allocs = [e for e in snap.events if e.action == "alloc"]
    assert [(e.size, e.library, e.tag) for e in allocs] == [
        (1000, "cupy", "cupy"), (2000, "cupy", "prepare")]
    names = [f.name for f in allocs[0].frames]
    assert "test_the_memory_history_tags_the_hooks_allocations_cupy" in names
    assert {a.address for a in snap.allocations} == {plain.ptr, tagged.ptr}
    del plain, tagged
    assert heap.live == {}


EXIT_PRELUDE = """
import ctypes, sys
import nbrmm, nbrmm.mr
libc = ctypes.CDLL(None)
libc.aligned_alloc.restype = ctypes.c_void_p
libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
mr = nbrmm.mr.CallbackMemoryResource(
    lambda n, s: libc.aligned_alloc(256, (max(n, 1) + 255) // 256 * 256),
    lambda p, n, s: libc.free(p))
"""


@pytest.mark.parametrize("where", ["global", "inside-using"])
def test_allocator_set_in_cupy_at_exit(where):
    # CuPy keeps its allocator in a C-level global: the hook takes itself out at exit,
    # so no nbrmm object is left alive (nanobind would report it as leaked).
    install = (
        "cupy.cuda.set_allocator(hook.cupy_allocator(mr=mr))\n"
        "keep = cupy.cuda.get_allocator()(300)\n"
        if where == "global"
        else "keep = hook.cupy_allocator(mr=mr)(300)\n"
    )
    code = (
        EXIT_PRELUDE + FAKE_CUPY + "sys.modules.update(make_fake_cupy())\n"
        "import cupy\nimport nbrmm.allocators.cupy as hook\n" + install +
        "assert keep.mem.size == 300\nprint('reached the end')\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "reached the end" in out.stdout
    assert "leaked" not in out.stderr, out.stderr


# ------------------------------------------------------------------------------------
# GPU: CuPy's arrays through the hook
# ------------------------------------------------------------------------------------


@pytest.fixture
def cupy_gpu():
    import cupy

    import nbrmm.allocators.cupy as hook

    yield cupy, hook
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
def test_gpu_arrays_are_ordered_on_cupys_current_stream(cupy_gpu):
    cupy, hook = cupy_gpu
    cuda, log = nbrmm.mr.CudaMemoryResource(), []
    alloc = hook.cupy_allocator(mr=nbrmm.mr.CallbackMemoryResource(
        lambda n, s: log.append(("allocate", n, s.handle)) or cuda.allocate(n, s),
        lambda p, n, s: log.append(("deallocate", n, s.handle)) or cuda.deallocate(p, n, s),
    ))

    def _stream_of(x):
        """The stream handle the memory of CuPy array ``x`` (just made) was allocated on."""
        return _last_allocation_stream(log)

    with cupy.cuda.using_allocator(alloc):
        assert _stream_of(cupy.empty(8)) == cupy.cuda.get_current_stream().ptr == 0
        s1 = cupy.cuda.Stream(non_blocking=True)
        with s1:
            assert _stream_of(cupy.empty(8)) == s1.ptr
            s2 = cupy.cuda.Stream()
            with s2:
                assert _stream_of(cupy.empty(8)) == s2.ptr
            assert _stream_of(cupy.empty(8)) == s1.ptr
        s2.use()
        try:
            assert _stream_of(cupy.empty(8)) == s2.ptr
        finally:
            cupy.cuda.Stream.null.use()
        assert _stream_of(cupy.empty(8)) == 0


@pytest.mark.gpu
def test_gpu_per_thread_default_stream_of_cupy():
    # CUPY_CUDA_PER_THREAD_DEFAULT_STREAM is read when CuPy is imported: a fresh process.
    code = """
        import os
        os.environ["CUPY_CUDA_PER_THREAD_DEFAULT_STREAM"] = "1"
        import cupy, nbrmm, nbrmm.mr
        import nbrmm.allocators.cupy as hook
        log = []
        cuda = nbrmm.mr.CudaMemoryResource()
        mr = nbrmm.mr.CallbackMemoryResource(
            lambda n, s: log.append(s.handle) or cuda.allocate(n, s),
            lambda p, n, s: log.append(s.handle) or cuda.deallocate(p, n, s))
        with cupy.cuda.using_allocator(hook.cupy_allocator(mr=mr)):
            x = cupy.arange(100)
            assert int(x.sum()) == 4950
        print(log[0], cupy.cuda.get_current_stream().ptr)  # log[0]: x's allocation
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
def test_gpu_threads_with_their_own_streams(cupy_gpu):
    cupy, hook = cupy_gpu
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
                with lock:
                    assert ("allocate", x.data.ptr, stream.ptr) in log
                stream.synchronize()
                assert total == 3 * 9999 * 10000 / 2
                del x
            streams[name] = stream.ptr
            stream.synchronize()
        except BaseException as e:  # noqa: BLE001 - reported below
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
def test_gpu_current_stream_object_outlives_its_allocations(cupy_gpu):
    cupy, hook = cupy_gpu
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
    log = []
    alloc = hook.cupy_allocator(mr=_recording(nbrmm.mr.CudaMemoryResource(), log), stream=stream)
    with cupy.cuda.using_allocator(alloc):
        x = cupy.full(10, 7, dtype=cupy.int32)
    assert [(kind, handle) for kind, _, handle in log] == [("allocate", stream.handle)]
    assert log[0][1] >= 40
    stream.synchronize()
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
    assert mp.ptr == 0 and mp.device_id == cupy.cuda.Device().id
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
def test_gpu_memory_objects_are_cupys_unowned_memory(cupy_gpu):
    cupy, hook = cupy_gpu
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    ref = weakref.ref(stats)
    mp = hook.cupy_allocator(mr=stats)(512)
    assert type(mp) is cupy.cuda.MemoryPointer
    mem = mp.mem
    assert type(mem) is hook.Memory is cupy.cuda.UnownedMemory
    assert mem.size == 512 and mem.ptr == mp.ptr and mem.device_id == cupy.cuda.Device().id
    del stats, mem
    gc.collect()
    assert ref() is not None and ref().allocation_counts.current_bytes == 512
    del mp
    gc.collect()
    assert ref() is None


@pytest.mark.gpu
def test_gpu_kernels_read_and_write_hook_memory(cupy_gpu):
    cupy, hook = cupy_gpu
    arena = nbrmm.mr.ArenaMemoryResource(nbrmm.mr.CudaMemoryResource(), arena_size=1 << 24)
    with cupy.cuda.using_allocator(hook.cupy_allocator(mr=arena)):
        a = cupy.arange(1 << 16, dtype=cupy.int64)
        b = cupy.cumsum(a)[-1]
        c = cupy.matmul(a[:256].astype(cupy.float32).reshape(16, 16),
                        cupy.eye(16, dtype=cupy.float32))
    assert int(b) == (1 << 16) * ((1 << 16) - 1) // 2
    assert float(c.sum()) == 255 * 256 / 2
