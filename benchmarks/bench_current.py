"""The current device resource: ``get_current_device_resource`` and
``set_current_device_resource`` of nbrmm beside rmm, and the nearest counterparts of
CuPy (``get_allocator`` / ``set_allocator``) and cuda.core (``Device.memory_resource``)."""

import operator

import pytest
from support import HAVE_GPU, cuda_core_device, import_library, over_impls, record

pytestmark = pytest.mark.benchmark(min_time=2e-5, max_time=0.1, min_rounds=10, disable_gc=True)

#: The resource made current: a pool on a GPU, Python callbacks without one.
KIND = "pool" if HAVE_GPU else "host"


@over_impls
def bench_get_current_device_resource(benchmark, impl, resources):
    mr = resources.get(impl, KIND)
    before = impl.mr.get_current_device_resource()
    impl.mr.set_current_device_resource(mr)
    try:
        record(benchmark, "get_current", impl.__name__, resource=KIND)
        got = benchmark(impl.mr.get_current_device_resource)
        assert got is mr
    finally:
        impl.mr.set_current_device_resource(before)


@over_impls
def bench_set_current_device_resource(benchmark, impl, resources):
    mr = resources.get(impl, KIND)
    before = impl.mr.get_current_device_resource()
    try:
        record(benchmark, "set_current", impl.__name__, resource=KIND)
        benchmark(impl.mr.set_current_device_resource, mr)
        assert impl.mr.get_current_device_resource() is mr
    finally:
        impl.mr.set_current_device_resource(before)


@pytest.mark.gpu
def bench_get_current_cupy(benchmark):
    cupy = import_library("cupy")
    pool = cupy.cuda.MemoryPool()
    before = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(pool.malloc)
    try:
        record(benchmark, "get_current", "cupy", resource=KIND)
        benchmark(cupy.cuda.get_allocator)
    finally:
        cupy.cuda.set_allocator(before)


@pytest.mark.gpu
def bench_set_current_cupy(benchmark):
    cupy = import_library("cupy")
    pool = cupy.cuda.MemoryPool()
    before = cupy.cuda.get_allocator()
    try:
        record(benchmark, "set_current", "cupy", resource=KIND)
        benchmark(cupy.cuda.set_allocator, pool.malloc)
    finally:
        cupy.cuda.set_allocator(before)


@pytest.mark.gpu
def bench_get_current_cuda_core(benchmark):
    dev, _, _ = cuda_core_device()
    record(benchmark, "get_current", "cuda.core", resource=KIND)
    benchmark(operator.attrgetter("memory_resource"), dev)


@pytest.mark.gpu
def bench_set_current_cuda_core(benchmark):
    dev, _, mr = cuda_core_device()
    try:
        dev.memory_resource = mr
    except AttributeError as e:
        pytest.skip(f"cuda.core's Device.memory_resource cannot be set: {e}")
    try:
        record(benchmark, "set_current", "cuda.core", resource=KIND)
        benchmark(setattr, dev, "memory_resource", mr)
    finally:
        dev.memory_resource = mr
