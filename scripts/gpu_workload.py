"""A GPU workload over nbrmm's device paths, run under compute-sanitizer by gpu-check:
every resource kind, buffers, copies, growth, pickling, DLPack, the C++ boundary, CuPy
kernels on memory from nbrmm's CuPy hook, and cuda.core allocating from nbrmm and nbrmm
from cuda.core (nbrmm.interop). It frees everything before exiting, so any memory
the sanitizer reports leaked is a real leak; it also fails by itself when a Buffer is still
alive at the end, and prints what holds it."""

import gc
import pickle
import sys
import types

import nbrmm
import nbrmm.mr as mr

# The test suite's C++ extension that is not nbrmm (tests/extensions.py builds it).
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tests"))
from extensions import cpp_ext  # noqa: E402


def exercise(resource):
    payload = bytes(range(256)) * 64
    buf = nbrmm.Buffer(len(payload), mr=resource)
    buf.copy_from_host(payload)
    assert buf.tobytes() == payload
    buf.resize(3 * len(payload))
    buf.resize(100)
    buf.shrink_to_fit()
    dup = buf.copy()
    other = nbrmm.Buffer(100, mr=resource, stream=nbrmm.Stream())
    other.copy_from_device(dup, stream=other.stream)
    other.stream.synchronize()
    assert other.tobytes() == payload[:100]
    back = pickle.loads(pickle.dumps(dup, protocol=5))
    assert back.tobytes() == payload[:100]
    capsule = buf.__dlpack__()
    del capsule
    ptr = resource.allocate(1000)
    resource.deallocate(ptr, 1000)


def cupy_kernels(resource):
    """Elementwise and reduction kernels over arrays allocated through nbrmm's hook."""
    try:
        import cupy
    except ImportError:
        return "cupy not installed"
    from nbrmm.allocators.cupy import cupy_allocator

    with cupy.cuda.using_allocator(cupy_allocator(mr=resource)):
        a = cupy.arange(1 << 16, dtype=cupy.float32)
        b = a * 2 + 1
        total = float(b.sum())
        c = cupy.empty_like(b)
        c[...] = b[::-1]
        assert float(c[0]) == float(b[-1])
        del a, b, c
    expected = 2 * ((1 << 16) - 1) * (1 << 16) / 2 + (1 << 16)
    assert total == expected, (total, expected)
    cupy.cuda.Device().synchronize()
    return "ok"


def cuda_core_interop(resource):
    """cuda.core allocating from ``resource`` and copying into nbrmm memory; nbrmm
    allocating from a cuda.core pool (in C++) and from a cuda.core resource in Python."""
    try:
        import cuda.core as cc

        import nbrmm.interop as interop
    except ImportError:
        return "cuda.core not installed"
    dev = cc.Device(nbrmm.get_current_device())
    dev.set_current()
    stream = dev.create_stream()
    payload = bytes(range(256)) * 16
    adapter = interop.to_cuda_core_memory_resource(resource)
    filled = adapter.allocate(len(payload), stream=stream)
    filled.fill(7, stream=stream)
    nb = nbrmm.Buffer(len(payload), mr=resource)
    view = interop.to_cuda_core_buffer(nb)
    view.copy_from(filled, stream=stream)
    stream.sync()
    assert nb.tobytes() == b"\x07" * len(payload)
    assert interop.from_cuda_core_buffer(filled).tobytes() == b"\x07" * len(payload)
    view.close()
    filled.close(stream)
    del nb
    pool = cc.DeviceMemoryResource(dev.device_id, cc.DeviceMemoryResourceOptions())
    for cc_mr in (pool, cc.LegacyPinnedMemoryResource()):
        mr = interop.from_cuda_core_memory_resource(cc_mr)
        buf = nbrmm.Buffer(len(payload), mr=mr, stream=nbrmm.Stream())
        buf.copy_from_host(payload, stream=buf.stream)
        buf.resize(3 * len(payload), stream=buf.stream)
        buf.stream.synchronize()
        assert buf.tobytes()[: len(payload)] == payload
        del buf, mr
    stream.sync()
    dev.sync()
    return "ok"


def holders(obj, ignore, depth=3):
    """Describes what refers to `obj`, `depth` levels up (types; frames by function),
    leaving out the objects in `ignore` and this report's own lists and frames."""
    own = {id(ignore), id(sys._getframe()), id(sys._getframe(1))}
    own.update(id(o) for o in ignore)
    lines, frontier = [], [obj]
    for level in range(depth):
        own.add(id(frontier))
        nxt = []
        own.add(id(nxt))
        for o in frontier:
            for r in gc.get_referrers(o):
                if id(r) in own:
                    continue
                what = type(r).__name__
                if isinstance(r, types.FrameType):
                    what += f" of {r.f_code.co_name}() at line {r.f_lineno}"
                lines.append("  " * (level + 1) + what)
                nxt.append(r)
        frontier = nxt[:5]
    return "\n".join(lines) or "  (nothing the collector can see: a C++ reference)"


def leftover_buffers():
    """A failure line for every Buffer still holding memory, with what holds it."""
    alive = [o for o in gc.get_objects() if isinstance(o, nbrmm.Buffer) and not o.closed]
    return [
        f"a Buffer of {b.size} bytes is alive at the end, held by:\n{holders(b, alive)}"
        for b in alive
    ]


def main():
    cuda = mr.CudaMemoryResource()
    resources = [
        cuda,
        mr.ManagedMemoryResource(),
        mr.PoolMemoryResource(cuda, initial_pool_size=1 << 22),
        mr.ArenaMemoryResource(cuda, arena_size=1 << 22),
        mr.CudaAsyncMemoryResource(),
        mr.BinningMemoryResource(cuda, 10, 20),
        mr.FixedSizeMemoryResource(cuda, block_size=1 << 16, blocks_to_preallocate=4),
        mr.StatisticsResourceAdaptor(cuda),
        mr.TrackingResourceAdaptor(cuda),
        mr.LimitingResourceAdaptor(cuda, 1 << 24),
        mr.AlignedResourceAdaptor(cuda, 4096),
        mr.ThreadSafeResourceAdaptor(cuda),
        mr.PrefetchResourceAdaptor(mr.ManagedMemoryResource()),
    ]
    failures = []
    for resource in resources:
        try:
            exercise(resource)
        except Exception as e:  # noqa: BLE001 - reported, and the run fails
            failures.append(f"{type(resource).__name__}: {type(e).__name__}: {e}")
        e = None
    with mr.using_device_resource(resources[2]):
        held = cpp_ext.allocate_from_current(4096)
        del held
    cpp_ext.set_current_owned(True)
    buf = nbrmm.Buffer(4096)
    del buf
    cpp_ext.reset_current()
    try:
        print("cupy kernels:", cupy_kernels(resources[3]))
    except Exception as e:  # noqa: BLE001 - reported, and the run fails
        failures.append(f"cupy kernels: {type(e).__name__}: {e}")
    try:
        print("cuda.core interop:", cuda_core_interop(resources[3]))
    except Exception as e:  # noqa: BLE001 - reported, and the run fails
        failures.append(f"cuda.core interop: {type(e).__name__}: {e}")
    del resources, cuda
    gc.collect()
    failures += leftover_buffers()
    for f in failures:
        print("FAILED", f)
    print("gpu workload:", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
