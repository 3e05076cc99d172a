"""A GPU workload over nbrmm's device paths, run under compute-sanitizer by gpu-check:
every resource kind, buffers, copies, growth, pickling, DLPack, the C++ boundary. It frees
everything before exiting, so any memory the sanitizer reports leaked is a real leak."""

import gc
import pickle

import nbrmm
import nbrmm.mr as mr
from nbrmm._testing import cpp_ext


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
    del resources, cuda
    gc.collect()
    for f in failures:
        print("FAILED", f)
    print("gpu workload:", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
