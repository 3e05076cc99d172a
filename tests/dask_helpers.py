"""Code that Dask workers run in the tests: resource factories and probes.

The workers are separate processes that import this module by name (the tests folder is
on their ``sys.path``, which they inherit), so everything here is picklable by reference.
"""

import nbrmm
import nbrmm.mr
from helpers import HostHeap

#: Buffers the probes keep alive on a worker, by name.
HELD: dict = {}


def host_heap_factory():
    """A resource over host memory (aligned_alloc/free); needs no GPU."""
    return HostHeap().resource()


def counted_cuda_factory():
    """``cudaMalloc`` under a statistics adaptor, to count what a pool takes from it."""
    return nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())


def failing_factory():
    raise RuntimeError("this factory fails on purpose")


def not_a_resource_factory():
    return "not a resource"


def chain(res):
    """Class names of ``res`` and its upstream resources, top first."""
    names = []
    while res is not None:
        names.append(type(res).__name__)
        res = getattr(res, "upstream_mr", None)
    return names


def bottom(res):
    """The last resource of ``res``'s chain."""
    while getattr(res, "upstream_mr", None) is not None:
        res = res.upstream_mr
    return res


def describe(dask_worker):
    """What the worker's process holds: its device, current resource chain, counters,
    plugins and metrics."""
    import os

    device = nbrmm.get_current_device()
    res = nbrmm.mr.get_per_device_resource(device)
    counts = getattr(res, "allocation_counts", None)
    from nbrmm.dask import _diagnostics

    return {
        "pid": os.getpid(),
        "device": device,
        "chain": chain(res),
        "current_bytes": None if counts is None else counts.current_bytes,
        "total_count": None if counts is None else counts.total_count,
        "plugins": sorted(dask_worker.plugins),
        "nbrmm_metric": dask_worker.metrics.get("nbrmm") is _diagnostics.nbrmm_metric,
        "rmm_metric": dask_worker.metrics.get("rmm") is _diagnostics.rmm_metric,
        "has_rmm_metric": "rmm" in dask_worker.metrics,
    }


def hold(name, nbytes):
    """Allocate a buffer from the current resource and keep it (and its resource)."""
    buf = nbrmm.Buffer(nbytes)
    HELD[name] = buf
    HELD[name + ".mr"] = buf.mr
    return buf.mr.allocation_counts.current_bytes


def held_is_current(name):
    """Whether the held buffer's resource is the current resource."""
    return HELD[name].mr == nbrmm.mr.get_current_device_resource()


def release(name):
    """Drop the held buffer; returns the bytes its resource still counts."""
    del HELD[name]
    return HELD.pop(name + ".mr").allocation_counts.current_bytes


def make_buffer(nbytes, cls_name="Buffer"):
    """A buffer of ``nbytes`` from the current resource, filled with a pattern."""
    cls = getattr(nbrmm, cls_name)
    buf = cls(size=nbytes) if cls is nbrmm.DeviceBuffer else cls(nbytes)
    if nbytes:
        buf.copy_from_host(pattern(nbytes))
    return buf


def pattern(nbytes):
    return bytes(i % 251 for i in range(nbytes))


def inspect_buffer(buf):
    """What a worker received: class, size, contents and whether it came from the
    receiver's current resource."""
    current = nbrmm.mr.get_current_device_resource()
    counts = current.allocation_counts
    return {
        "class": type(buf).__name__,
        "nbytes": buf.nbytes,
        "from_current": buf.mr == current,
        "contents_ok": buf.tobytes() == pattern(buf.nbytes) if buf.nbytes else True,
        "current_bytes": counts.current_bytes,
    }


def inspect_buffer_bytes(buf):
    """Like :func:`inspect_buffer`, for any current resource (with or without statistics)."""
    return {
        "nbytes": buf.nbytes,
        "contents_ok": buf.tobytes() == pattern(buf.nbytes),
        "from_current": buf.mr == nbrmm.mr.get_current_device_resource(),
    }


def nbrmm_worker_metric(dask_worker):
    """The ``nbrmm`` and ``rmm`` entries of the worker's metrics, evaluated as its
    heartbeat evaluates them (``Worker.get_metrics`` itself may run only in heartbeats)."""
    return {key: dask_worker.metrics[key](dask_worker) for key in ("nbrmm", "rmm")}


def stand_in_rmm_metric(worker):
    """Plays distributed's ``rmm`` metric (registered where rmm can be imported)."""
    return {"rmm-used": -1, "rmm-total": -1}


def give_rmm_metric(dask_worker):
    dask_worker.metrics["rmm"] = stand_in_rmm_metric


def has_stand_in_rmm_metric(dask_worker):
    return dask_worker.metrics.get("rmm") is stand_in_rmm_metric


def task_nbytes(dask_worker, key):
    """The size Dask recorded for a task's result on this worker."""
    return dask_worker.state.tasks[key].nbytes


# --- GPU workers ----------------------------------------------------------------------


def wave_block(block_info=None):
    """One block of ``sin(0.01 i) + cos(0.02 j)`` as a CuPy array, made on the worker."""
    import cupy

    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    i = cupy.arange(r0, r1, dtype=cupy.float32)[:, None]
    j = cupy.arange(c0, c1, dtype=cupy.float32)[None, :]
    return cupy.sin(i * 0.01) + cupy.cos(j * 0.02)


def to_host(block):
    """A CuPy block copied to a NumPy array."""
    import cupy

    return cupy.asnumpy(block)


def cupy_state(dask_worker=None):
    """Whether CuPy allocates through nbrmm's hook, and what CuPy's own pool holds."""
    import cupy

    from nbrmm.allocators.cupy import CupyAllocator

    return {
        "hook": isinstance(cupy.cuda.memory.get_allocator(), CupyAllocator),
        "cupy_pool_bytes": cupy.get_default_memory_pool().total_bytes(),
    }


def counters(dask_worker=None):
    """The counters of every statistics adaptor in the current resource's chain, top
    first, and the size of its pool (None without one)."""
    res = nbrmm.mr.get_current_device_resource()
    found, pool = [], None
    while res is not None:
        if isinstance(res, nbrmm.mr.StatisticsResourceAdaptor):
            found.append(res.allocation_counts)
        if isinstance(res, nbrmm.mr.PoolMemoryResource):
            pool = res.pool_size()
        res = getattr(res, "upstream_mr", None)
    return {"statistics": found, "pool_size": pool}


def numba_round_trip(nbytes):
    """A Numba device array filled and read back; returns whether the contents survived
    and the bytes the current statistics adaptor counted while it was alive."""
    import numpy as np
    from numba import cuda

    data = np.arange(nbytes, dtype=np.uint8)
    d = cuda.to_device(data)
    counted = nbrmm.mr.get_current_device_resource().allocation_counts.current_bytes
    ok = bool((d.copy_to_host() == data).all())
    manager = type(cuda.current_context().memory_manager).__name__
    del d
    return {"ok": ok, "counted": counted, "manager": manager}


def tagged_buffer(tag, nbytes):
    """A buffer of ``nbytes`` from the current resource, allocated under ``tag`` (kept in
    ``HELD`` under the tag's name)."""
    import nbrmm.memory

    with nbrmm.memory.tag(tag):
        HELD[tag] = nbrmm.Buffer(nbytes)
    return nbytes


def release_if_held(name):
    """Drop ``HELD[name]`` if this worker holds it."""
    HELD.pop(name, None)
