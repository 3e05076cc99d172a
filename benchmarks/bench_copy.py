"""Host<->device and device<->device copies of 1 KiB, 1 MiB and 256 MiB, in GB/s: nbrmm
beside rmm, CuPy, PyTorch and (device to device) cuda.core, each compared with a raw
``cudaMemcpyAsync`` + ``cudaStreamSynchronize`` of the same memory, timed in C++.

Host memory is pageable (NumPy arrays), as in the copies users make. Every timed call
returns only when its copy has finished: nbrmm and rmm synchronize copies on the
default stream themselves (rmm not for device to device); elsewhere the benchmark
synchronizes.
"""

import importlib

import numpy as np
import pytest
from support import (
    KiB,
    MiB,
    cuda_core_device,
    import_library,
    median_s,
    over_impls,
    record,
    size_id,
)

SIZES = (KiB, MiB, 256 * MiB)
DIRECTIONS = ("h2d", "d2h", "d2d")

#: (rounds, iterations per round) by size: a few hundred ms per case at most.
PLAN = {KiB: (20, 100), MiB: (10, 10), 256 * MiB: (5, 1)}

pytestmark = [pytest.mark.gpu, pytest.mark.benchmark(disable_gc=True)]


@pytest.fixture(scope="module", params=SIZES, ids=size_id)
def host(request):
    """A pageable source and destination of one size, shared by the cases of that size."""
    n = request.param
    src = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    return src, np.empty(n, dtype=np.uint8)


def ptr(array):
    return array.ctypes.data


def run(benchmark, copy, direction, size, library, floor_ns):
    """Times ``copy`` and records its bandwidth beside the raw copy's."""
    rounds, iterations = PLAN[size]
    record(
        benchmark,
        "copy",
        library,
        direction=direction,
        size=size,
        floor_ns=floor_ns,
        floor_gbps=size / floor_ns,
    )
    copy()  # warm up
    benchmark.pedantic(copy, rounds=rounds, iterations=iterations, warmup_rounds=1)
    median = median_s(benchmark)
    if median is not None:
        benchmark.extra_info["gbps"] = size / median / 1e9


def endpoints(direction, host, dev_src, dev_dst):
    """(dst, src) pointers of the raw copy that a case is compared with."""
    if direction == "h2d":
        return dev_dst, ptr(host[0])
    if direction == "d2h":
        return ptr(host[1]), dev_src
    return dev_dst, dev_src


@over_impls
@pytest.mark.parametrize("direction", DIRECTIONS)
def bench_copy(benchmark, direction, host, impl, resources, floor):
    src_host, dst_host = host
    n = src_host.nbytes
    mr = resources.get(impl, "cuda")
    if impl.__name__ == "nbrmm":
        src = impl.Buffer(n, mr=mr)
        dst = impl.Buffer(n, mr=mr)
        sync = None
    else:
        src = impl.DeviceBuffer(size=n, mr=mr)
        dst = impl.DeviceBuffer(size=n, mr=mr)
        stream_module = importlib.import_module(f"{impl.__name__}.pylibrmm.stream")
        sync = stream_module.DEFAULT_STREAM.synchronize
    src.copy_from_host(src_host)

    if direction == "h2d":

        def copy():
            dst.copy_from_host(src_host)

    elif direction == "d2h":

        def copy():
            src.copy_to_host(dst_host)

    elif sync is None:

        def copy():
            dst.copy_from_device(src)

    else:

        def copy():
            dst.copy_from_device(src)
            sync()

    floor_ns = floor.memcpy_ns(*endpoints(direction, host, src.ptr, dst.ptr), n, PLAN[n][1])
    run(benchmark, copy, direction, n, impl.__name__, floor_ns)
    assert np.array_equal(dst_host if direction == "d2h" else dst.copy_to_host(), src_host)


@pytest.mark.parametrize("direction", DIRECTIONS)
def bench_copy_cupy(benchmark, direction, host, floor):
    cupy = import_library("cupy")
    src_host, dst_host = host
    n = src_host.nbytes
    src = cupy.asarray(src_host)
    dst = cupy.empty(n, dtype=cupy.uint8)
    stream = cupy.cuda.get_current_stream()

    if direction == "h2d":

        def copy():
            dst.set(src_host)
            stream.synchronize()

    elif direction == "d2h":

        def copy():
            src.get(out=dst_host)
            stream.synchronize()

    else:

        def copy():
            dst.data.copy_from_device(src.data, n)
            stream.synchronize()

    floor_ns = floor.memcpy_ns(
        *endpoints(direction, host, src.data.ptr, dst.data.ptr), n, PLAN[n][1]
    )
    run(benchmark, copy, direction, n, "cupy", floor_ns)


@pytest.mark.parametrize("direction", DIRECTIONS)
def bench_copy_torch(benchmark, direction, host, floor):
    torch = import_library("torch")
    src_host, dst_host = host
    n = src_host.nbytes
    src_host_t, dst_host_t = torch.from_numpy(src_host), torch.from_numpy(dst_host)
    src = src_host_t.to("cuda")
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream()

    if direction == "h2d":

        def copy():
            dst.copy_(src_host_t)

    elif direction == "d2h":

        def copy():
            dst_host_t.copy_(src)

    else:

        def copy():
            dst.copy_(src)
            stream.synchronize()

    floor_ns = floor.memcpy_ns(
        *endpoints(direction, host, src.data_ptr(), dst.data_ptr()), n, PLAN[n][1]
    )
    run(benchmark, copy, direction, n, "torch", floor_ns)


def bench_copy_cuda_core(benchmark, host, floor):
    dev, stream, mr = cuda_core_device()
    src_host, _ = host
    n = src_host.nbytes
    src = mr.allocate(n, stream=stream)
    dst = mr.allocate(n, stream=stream)
    stream.sync()
    try:

        def copy():
            dst.copy_from(src, stream=stream)
            stream.sync()

        floor_ns = floor.memcpy_ns(int(dst.handle), int(src.handle), n, PLAN[n][1])
        run(benchmark, copy, "d2d", n, "cuda.core", floor_ns)
    finally:
        src.close(stream)
        dst.close(stream)
        stream.sync()
