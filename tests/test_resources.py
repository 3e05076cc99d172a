"""Resources without an upstream, and the suballocators (pool, arena, fixed-size, binning).

Suballocators run over a host-memory upstream (HostHeap) on the CPU, so their behaviour
is tested for real without a GPU; the GPU tests run every resource on the device.
"""

import ctypes
import gc
import threading
import weakref

import pytest

import nbrmm
import nbrmm.mr
import nbrmm.mr.experimental
from helpers import POOL_SIZE, HostHeap, read_host, run_python, write_host

HAVE_GPU = nbrmm.get_device_count() > 0
no_gpu_only = pytest.mark.skipif(HAVE_GPU, reason="checks the behaviour without a GPU")
MiB = 1 << 20


def upstream_calls(heap):
    return [(kind, n) for kind, n, _ in heap.calls]


def inside(heap, ptr, nbytes=1):
    """The start of the live upstream block that contains [ptr, ptr + nbytes)."""
    for base, size in heap.live.items():
        if base <= ptr and ptr + nbytes <= base + size:
            return base
    return None


# --------------------------------------------------------------------------------------
# PoolMemoryResource
# --------------------------------------------------------------------------------------


def test_pool_takes_the_initial_pool_and_suballocates_from_it():
    heap = HostHeap()
    pool = nbrmm.mr.PoolMemoryResource(heap.resource(), MiB, 4 * MiB)
    assert upstream_calls(heap) == [("allocate", MiB)]
    assert pool.pool_size() == MiB
    (chunk,) = heap.live
    ptrs = [pool.allocate(n) for n in (1000, 2000, 3000)]
    assert upstream_calls(heap) == [("allocate", MiB)]  # no upstream call per allocation
    assert all(inside(heap, p, n) == chunk for p, n in zip(ptrs, (1000, 2000, 3000)))
    assert len(set(ptrs)) == 3
    write_host(ptrs[1], b"pool" * 500)
    assert read_host(ptrs[1], 2000) == b"pool" * 500
    for p, n in zip(ptrs, (1000, 2000, 3000)):
        pool.deallocate(p, n)
    assert pool.pool_size() == MiB


def test_pool_grows_in_chunks_and_respects_the_maximum():
    heap = HostHeap()
    pool = nbrmm.mr.PoolMemoryResource(heap.resource(), MiB, 4 * MiB)
    small = pool.allocate(1000)
    big = pool.allocate(2 * MiB)  # does not fit: the pool takes a 2 MiB chunk
    assert upstream_calls(heap) == [("allocate", MiB), ("allocate", 2 * MiB)]
    assert pool.pool_size() == 3 * MiB
    with pytest.raises(nbrmm.OutOfMemory):
        pool.allocate(2 * MiB)  # only 1 MiB of room is left below the maximum
    assert pool.pool_size() == 3 * MiB
    pool.deallocate(big, 2 * MiB)
    pool.deallocate(small, 1000)


def test_pool_without_maximum_grows_by_at_least_its_size():
    heap = HostHeap()
    pool = nbrmm.mr.PoolMemoryResource(heap.resource(), "1MiB")
    p = pool.allocate(MiB + MiB // 2)
    q = pool.allocate(16)
    assert upstream_calls(heap) == [("allocate", MiB), ("allocate", MiB + MiB // 2)]
    r = pool.allocate(MiB)
    assert upstream_calls(heap)[-1] == ("allocate", MiB * 5 // 2)  # the whole pool's size
    for ptr, n in ((p, MiB + MiB // 2), (q, 16), (r, MiB)):
        pool.deallocate(ptr, n)


def test_pool_returns_every_chunk_on_destruction():
    heap = HostHeap()
    pool = nbrmm.mr.PoolMemoryResource(heap.resource(), 256 * 4, 0x10000)
    ptrs = [pool.allocate(4000) for _ in range(4)]
    for p in ptrs:
        pool.deallocate(p, 4000)
    chunks = sum(1 for kind, _ in upstream_calls(heap) if kind == "allocate")
    assert chunks > 1
    del pool
    gc.collect()
    assert heap.bytes_in_use == 0
    assert sum(1 for kind, _ in upstream_calls(heap) if kind == "deallocate") == chunks


def test_pool_initial_size_zero_takes_nothing_up_front():
    heap = HostHeap()
    pool = nbrmm.mr.PoolMemoryResource(heap.resource(), 0, MiB)
    assert heap.calls == [] and pool.pool_size() == 0
    p = pool.allocate(100)
    assert pool.pool_size() > 0
    pool.deallocate(p, 100)


def test_pool_is_usable_from_threads():
    heap = HostHeap()
    pool = nbrmm.mr.PoolMemoryResource(heap.resource(), 4 * MiB)
    errors = []

    def work():
        try:
            for i in range(200):
                n = 256 * (1 + i % 7)
                p = pool.allocate(n)
                write_host(p, bytes([i % 251]) * n)
                assert read_host(p, n) == bytes([i % 251]) * n
                pool.deallocate(p, n)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert upstream_calls(heap) == [("allocate", 4 * MiB)]


@pytest.mark.parametrize(
    ("kwargs", "exc", "param"),
    [
        ({"initial_pool_size": 1000}, ValueError, "initial_pool_size"),
        ({"initial_pool_size": MiB, "maximum_pool_size": 1000}, ValueError, "maximum_pool_size"),
        ({"initial_pool_size": 2 * MiB, "maximum_pool_size": MiB}, nbrmm.InvalidArgumentError,
         "exceeds the maximum pool size"),
        ({"initial_pool_size": -256}, ValueError, "initial_pool_size"),
        ({"initial_pool_size": "lots"}, ValueError, "initial_pool_size"),
        ({"initial_pool_size": 1.5}, TypeError, "initial_pool_size"),
        ({"initial_pool_size": MiB, "maximum_pool_size": [1]}, TypeError, "maximum_pool_size"),
    ],
)
def test_pool_rejects_bad_sizes(kwargs, exc, param):
    heap = HostHeap()
    with pytest.raises(exc, match=param):
        nbrmm.mr.PoolMemoryResource(heap.resource(), **kwargs)
    assert heap.calls == []


def test_pool_rejects_a_non_resource_upstream():
    with pytest.raises(TypeError, match="upstream_mr"):
        nbrmm.mr.PoolMemoryResource("cuda", MiB)
    with pytest.raises(TypeError, match="upstream_mr"):
        nbrmm.mr.PoolMemoryResource(None, MiB)


def test_pool_reports_an_upstream_failure_and_leaks_nothing():
    def no_memory(n, s):
        raise MemoryError(f"cannot take {n}")

    up = nbrmm.mr.CallbackMemoryResource(no_memory, lambda p, n, s: None)
    with pytest.raises(MemoryError):
        nbrmm.mr.PoolMemoryResource(up, MiB)


@no_gpu_only
def test_pool_default_initial_size_needs_the_device():
    with pytest.raises(nbrmm.CudaError):
        nbrmm.mr.PoolMemoryResource(HostHeap().resource())


# --------------------------------------------------------------------------------------
# FixedSizeMemoryResource
# --------------------------------------------------------------------------------------


def test_fixed_size_preallocates_blocks_and_serves_one_per_request():
    heap = HostHeap()
    mr = nbrmm.mr.FixedSizeMemoryResource(heap.resource(), block_size=1000, blocks_to_preallocate=4)
    assert mr.get_block_size() == 1024  # rounded up to a multiple of 256
    assert upstream_calls(heap) == [("allocate", 4096)]
    (chunk,) = heap.live
    ptrs = [mr.allocate(n) for n in (1, 500, 1000, 1024)]
    assert sorted(p - chunk for p in ptrs) == [0, 1024, 2048, 3072]
    assert upstream_calls(heap) == [("allocate", 4096)]
    extra = mr.allocate(10)  # all four blocks in use: another chunk
    assert upstream_calls(heap) == [("allocate", 4096), ("allocate", 4096)]
    with pytest.raises(nbrmm.OutOfMemory):
        mr.allocate(1025)
    for p, n in zip(ptrs, (1, 500, 1000, 1024)):
        mr.deallocate(p, n)
    mr.deallocate(extra, 10)
    del mr
    gc.collect()
    assert heap.bytes_in_use == 0


def test_fixed_size_defaults_match_rmm():
    heap = HostHeap()
    mr = nbrmm.mr.FixedSizeMemoryResource(heap.resource())
    assert mr.get_block_size() == MiB
    assert upstream_calls(heap) == [("allocate", 128 * MiB)]  # malloc'd, never touched
    del mr
    assert heap.bytes_in_use == 0


@pytest.mark.parametrize(
    ("kwargs", "exc", "param"),
    [
        ({"block_size": 0}, ValueError, "block_size"),
        ({"block_size": -1}, ValueError, "block_size"),
        ({"blocks_to_preallocate": 0}, ValueError, "blocks_to_preallocate"),
        ({"block_size": 1 << 40, "blocks_to_preallocate": 1 << 30}, ValueError, "blocks_to_preallocate"),
        ({"block_size": 2**64 - 1}, ValueError, "blocks_to_preallocate"),
        ({"blocks_to_preallocate": True}, TypeError, "blocks_to_preallocate"),
        ({"block_size": None}, TypeError, "block_size"),
    ],
)
def test_fixed_size_rejects_bad_arguments(kwargs, exc, param):
    heap = HostHeap()
    with pytest.raises(exc, match=param):
        nbrmm.mr.FixedSizeMemoryResource(heap.resource(), **kwargs)
    assert heap.calls == []


# --------------------------------------------------------------------------------------
# BinningMemoryResource
# --------------------------------------------------------------------------------------


def test_binning_exponents_create_fixed_size_bins():
    heap = HostHeap()
    mr = nbrmm.mr.BinningMemoryResource(heap.resource(), 8, 10)
    # One fixed-size resource per power of two, each preallocating 128 blocks.
    assert upstream_calls(heap) == [("allocate", 128 * 256), ("allocate", 128 * 512),
                                    ("allocate", 128 * 1024)]
    chunks = {size // 128: base for base, size in heap.live.items()}
    routed = {}
    for n in (1, 256, 257, 512, 1000, 1024):
        p = mr.allocate(n)
        routed[n] = inside(heap, p, n)
        mr.deallocate(p, n)
    assert routed == {1: chunks[256], 256: chunks[256], 257: chunks[512], 512: chunks[512],
                      1000: chunks[1024], 1024: chunks[1024]}
    before = len(heap.calls)
    big = mr.allocate(1025)  # larger than every bin: straight to the upstream
    assert heap.calls[before:] == [("allocate", 1025, big)]
    mr.deallocate(big, 1025)
    assert mr.bin_mrs == []


def test_binning_add_bin_routes_sizes_to_the_bin_resource():
    heap, bin_heap = HostHeap(), HostHeap()
    mr = nbrmm.mr.BinningMemoryResource(heap.resource())
    assert heap.calls == []
    bin_mr = bin_heap.resource()
    mr.add_bin(4096, bin_mr)
    mr.add_bin("2KiB")  # a fixed-size bin over the upstream
    assert upstream_calls(heap) == [("allocate", 128 * 2048)]
    assert mr.bin_mrs == [bin_mr]
    small = mr.allocate(2000)
    mid = mr.allocate(3000)
    large = mr.allocate(5000)
    assert bin_heap.live == {mid: 3000}
    assert inside(heap, small, 2000) is not None and heap.live.get(large) == 5000
    for p, n in ((small, 2000), (mid, 3000), (large, 5000)):
        mr.deallocate(p, n)
    assert bin_heap.bytes_in_use == 0
    assert [c[0] for c in bin_heap.calls] == ["allocate", "deallocate"]


def test_binning_bin_mrs_is_a_copy():
    mr = nbrmm.mr.BinningMemoryResource(HostHeap().resource())
    mr.add_bin(512, HostHeap().resource())
    got = mr.bin_mrs
    got.clear()
    assert len(mr.bin_mrs) == 1


def test_binning_host_accessibility_follows_its_resources():
    mr = nbrmm.mr.BinningMemoryResource(nbrmm.mr.PinnedHostMemoryResource())
    assert mr.is_host_accessible is True  # (constructing allocates nothing)
    mr.add_bin(1024, nbrmm.mr.PinnedHostMemoryResource())
    assert mr.is_host_accessible is True
    mr.add_bin(4096, nbrmm.mr.CudaMemoryResource())  # one device-only bin is enough
    assert mr.is_host_accessible is False


def test_adaptors_are_host_accessible_when_their_upstream_is():
    pinned = nbrmm.mr.PinnedHostMemoryResource()
    assert nbrmm.mr.StatisticsResourceAdaptor(pinned).is_host_accessible is True
    assert nbrmm.mr.ThreadSafeResourceAdaptor(pinned).is_host_accessible is True
    assert nbrmm.mr.StatisticsResourceAdaptor(HostHeap().resource()).is_host_accessible is False


@pytest.mark.parametrize(
    ("args", "exc", "param"),
    [
        ((8, -1), ValueError, "max_size_exponent"),
        ((-1, 8), ValueError, "min_size_exponent"),
        ((10, 8), ValueError, "max_size_exponent"),
        ((0, 31), ValueError, "max_size_exponent"),
        ((-2, -2), ValueError, "min_size_exponent"),
        (("8", 9), TypeError, "^min_size_exponent: expected an int, got str"),
        ((2**64, 9), nbrmm.ArgumentRangeError, "^min_size_exponent: .* is out of range"),
    ],
)
def test_binning_rejects_bad_exponents(args, exc, param):
    heap = HostHeap()
    with pytest.raises(exc, match=param):
        nbrmm.mr.BinningMemoryResource(heap.resource(), *args)
    assert heap.calls == []


def test_binning_add_bin_rejects_bad_arguments():
    heap = HostHeap()
    mr = nbrmm.mr.BinningMemoryResource(heap.resource())
    with pytest.raises(ValueError, match="allocation_size"):
        mr.add_bin(0)
    with pytest.raises(ValueError, match="allocation_size"):
        mr.add_bin(-4)
    with pytest.raises(TypeError, match="bin_resource"):
        mr.add_bin(256, "fixed")
    assert heap.calls == [] and mr.bin_mrs == []


# --------------------------------------------------------------------------------------
# ArenaMemoryResource (librmm asks the device for its free memory even with arena_size)
# --------------------------------------------------------------------------------------


def test_arena_rejects_bad_arguments():
    heap = HostHeap()
    with pytest.raises(ValueError, match="arena_size"):
        nbrmm.mr.ArenaMemoryResource(heap.resource(), arena_size=MiB - 1)
    with pytest.raises(ValueError, match="arena_size"):
        nbrmm.mr.ArenaMemoryResource(heap.resource(), arena_size="2TiB")
    with pytest.raises(TypeError, match="dump_log_on_failure"):
        nbrmm.mr.ArenaMemoryResource(heap.resource(), 4 * MiB, dump_log_on_failure=1)
    with pytest.raises(TypeError, match="upstream_mr"):
        nbrmm.mr.ArenaMemoryResource(object(), 4 * MiB)
    assert heap.calls == []


@no_gpu_only
def test_arena_needs_the_device():
    heap = HostHeap()
    with pytest.raises(nbrmm.CudaError):
        nbrmm.mr.ArenaMemoryResource(heap.resource(), 4 * MiB)
    assert heap.bytes_in_use == 0


# --------------------------------------------------------------------------------------
# Resources without an upstream: arguments, and clean errors without a GPU
# --------------------------------------------------------------------------------------


def test_host_accessibility_flags():
    for cls in (nbrmm.mr.ManagedMemoryResource, nbrmm.mr.PinnedHostMemoryResource):
        assert cls().is_host_accessible is True
    assert nbrmm.mr.CudaMemoryResource().is_host_accessible is False


def test_plain_resources_compare_equal_by_type():
    assert nbrmm.mr.ManagedMemoryResource() == nbrmm.mr.ManagedMemoryResource()
    assert nbrmm.mr.PinnedHostMemoryResource() != nbrmm.mr.ManagedMemoryResource()
    assert type(nbrmm.mr.PinnedHostMemoryResource()) is nbrmm.mr.PinnedHostMemoryResource


@pytest.mark.parametrize(
    ("make", "exc", "param"),
    [
        (lambda: nbrmm.mr.SamHeadroomMemoryResource(-1), ValueError, "headroom"),
        (lambda: nbrmm.mr.SamHeadroomMemoryResource("much"), ValueError, "headroom"),
        (lambda: nbrmm.mr.SamHeadroomMemoryResource(None), TypeError, "headroom"),
        (lambda: nbrmm.mr.CudaAsyncMemoryResource(initial_pool_size=-5), ValueError, "initial_pool_size"),
        (lambda: nbrmm.mr.CudaAsyncMemoryResource(release_threshold="x"), ValueError, "release_threshold"),
        (lambda: nbrmm.mr.CudaAsyncMemoryResource(enable_ipc=1), TypeError, "enable_ipc"),
        (lambda: nbrmm.mr.CudaAsyncMemoryResource(enable_fabric="yes"), TypeError, "enable_fabric"),
        (lambda: nbrmm.mr.CudaAsyncViewMemoryResource("pool"), ValueError, "pool_handle"),
        (lambda: nbrmm.mr.CudaAsyncViewMemoryResource(True), ValueError, "pool_handle"),
        (lambda: nbrmm.mr.CudaAsyncViewMemoryResource(0), ValueError, "pool_handle"),
        (lambda: nbrmm.mr.CudaAsyncViewMemoryResource(-1), ValueError, "pool_handle"),
        (lambda: nbrmm.mr.CudaAsyncViewMemoryResource(2**64), ValueError, "pool_handle"),
    ],
)
def test_resources_reject_bad_arguments(make, exc, param):
    with pytest.raises(exc, match=param):
        make()


@no_gpu_only
@pytest.mark.parametrize(
    "make",
    [
        lambda: nbrmm.mr.CudaAsyncMemoryResource(),
        lambda: nbrmm.mr.CudaAsyncViewMemoryResource(0x1234),
        lambda: nbrmm.mr.experimental.CudaAsyncManagedMemoryResource(),
        lambda: nbrmm.mr.SystemMemoryResource(),
        lambda: nbrmm.mr.SamHeadroomMemoryResource(0),
    ],
    ids=["cuda_async", "cuda_async_view", "cuda_async_managed", "system", "sam_headroom"],
)
def test_device_resources_fail_cleanly_without_a_gpu(make):
    with pytest.raises((nbrmm.CudaError, nbrmm.LogicError)):
        make()


@no_gpu_only
@pytest.mark.parametrize("name", ["ManagedMemoryResource", "PinnedHostMemoryResource"])
def test_allocation_fails_cleanly_without_a_gpu(name):
    with pytest.raises(MemoryError):
        getattr(nbrmm.mr, name)().allocate(64)


def test_experimental_namespace():
    assert nbrmm.mr.experimental.__all__ == ["CudaAsyncManagedMemoryResource"]
    assert nbrmm.mr.experimental.CudaAsyncManagedMemoryResource.__doc__
    assert not hasattr(nbrmm.mr, "CudaAsyncManagedMemoryResource")


# --------------------------------------------------------------------------------------
# GPU: every resource allocates and frees device memory
# --------------------------------------------------------------------------------------


def _cuda():
    return nbrmm.mr.CudaMemoryResource()


def _not_supported(exc):
    return isinstance(exc, nbrmm.LogicError) and "not supported" in str(exc)


# Parameters are names and lambdas, never nbrmm objects: pytest may keep its items alive
# past interpreter shutdown, and nbrmm types there would read as leaks.
GPU_RESOURCES = {
    "cuda": _cuda,
    "managed": lambda: nbrmm.mr.ManagedMemoryResource(),
    "pinned_host": lambda: nbrmm.mr.PinnedHostMemoryResource(),
    "cuda_async": lambda: nbrmm.mr.CudaAsyncMemoryResource(POOL_SIZE, POOL_SIZE),
    "cuda_async_view": lambda: nbrmm.mr.CudaAsyncViewMemoryResource(
        nbrmm.mr.CudaAsyncMemoryResource(POOL_SIZE)
    ),
    "cuda_async_managed": lambda: nbrmm.mr.experimental.CudaAsyncManagedMemoryResource(),
    "pool": lambda: nbrmm.mr.PoolMemoryResource(_cuda(), POOL_SIZE, 2 * POOL_SIZE),
    "arena": lambda: nbrmm.mr.ArenaMemoryResource(_cuda(), 4 * POOL_SIZE),
    "fixed_size": lambda: nbrmm.mr.FixedSizeMemoryResource(_cuda(), 4096, POOL_SIZE // 4096),
    "binning": lambda: nbrmm.mr.BinningMemoryResource(_cuda(), 10, 12),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_RESOURCES))
def test_gpu_resource_allocates_device_memory(name):
    mr = GPU_RESOURCES[name]()
    assert mr.device == nbrmm.get_current_device()
    stats = nbrmm.mr.StatisticsResourceAdaptor(mr)
    payload = bytes(range(256)) * 4
    buf = nbrmm.Buffer(len(payload), mr=stats)
    buf.copy_from_host(payload)
    assert buf.tobytes() == payload
    assert stats.allocation_counts.current_bytes == len(payload)
    assert stats.allocation_counts.current_count == 1
    ptr = mr.allocate(3000)
    mr.deallocate(ptr, 3000)
    del buf
    assert stats.allocation_counts.current_bytes == 0
    assert stats.allocation_counts.total_count == 1


@pytest.mark.gpu
@pytest.mark.parametrize(
    "make",
    [lambda: nbrmm.mr.SystemMemoryResource(), lambda: nbrmm.mr.SamHeadroomMemoryResource(POOL_SIZE)],
    ids=["system", "sam_headroom"],
)
def test_gpu_system_memory_works_or_is_reported_unsupported(make):
    try:
        mr = make()
    except nbrmm.LogicError as e:
        # Devices without pageable memory access: librmm's documented refusal.
        assert _not_supported(e), e
        return
    assert mr.is_host_accessible
    buf = nbrmm.Buffer(512, mr=mr)
    buf.copy_from_host(b"s" * 512)
    assert read_host(buf.ptr, 512) == b"s" * 512  # ordinary host memory
    assert buf.tobytes() == b"s" * 512


@pytest.mark.gpu
@pytest.mark.parametrize(
    "make",
    [lambda: nbrmm.mr.PinnedHostMemoryResource(), lambda: nbrmm.mr.ManagedMemoryResource(),
     lambda: nbrmm.mr.experimental.CudaAsyncManagedMemoryResource()],
    ids=["pinned_host", "managed", "cuda_async_managed"],
)
def test_gpu_host_accessible_memory_is_readable_from_the_host(make):
    mr = make()
    assert mr.is_host_accessible
    buf = nbrmm.Buffer(1024, mr=mr)
    buf.copy_from_host(bytes(range(256)) * 4)  # default stream: synchronized
    assert read_host(buf.ptr, 1024) == bytes(range(256)) * 4
    write_host(buf.ptr, b"host" * 4)
    assert buf.tobytes()[:16] == b"host" * 4


@pytest.mark.gpu
def test_gpu_managed_memory_is_usable_by_both_sides():
    mr = nbrmm.mr.ManagedMemoryResource()
    ptr = mr.allocate(4096)
    write_host(ptr, b"\x07" * 4096)
    dev = nbrmm.Buffer(4096, mr=nbrmm.mr.CudaMemoryResource())
    dev.copy_from_device(_Cai(ptr, 4096))
    assert dev.tobytes() == b"\x07" * 4096
    mr.deallocate(ptr, 4096)


class _Cai:
    """A minimal 1-D uint8 ``__cuda_array_interface__`` over a raw pointer."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
            "strides": None, "stream": None,
        }


# CUDA driver entry points for checking pool attributes (libcuda is there with any GPU).
CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4
CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5


def _pool_attribute(pool, attr):
    libcuda = ctypes.CDLL("libcuda.so.1")
    value = ctypes.c_uint64()
    rc = libcuda.cuMemPoolGetAttribute(ctypes.c_void_p(pool), attr, ctypes.byref(value))
    assert rc == 0, f"cuMemPoolGetAttribute failed: {rc}"
    return value.value


def _default_pool():
    libcuda = ctypes.CDLL("libcuda.so.1")
    pool = ctypes.c_void_p()
    assert libcuda.cuDeviceGetDefaultMemPool(ctypes.byref(pool), nbrmm.get_current_device()) == 0
    return pool.value


@pytest.mark.gpu
def test_gpu_async_pool_options():
    mr = nbrmm.mr.CudaAsyncMemoryResource(initial_pool_size=POOL_SIZE, release_threshold=POOL_SIZE)
    pool = mr.pool_handle()
    assert pool != 0 and pool != _default_pool()
    assert _pool_attribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == POOL_SIZE
    assert _pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) >= POOL_SIZE
    keeps_all = nbrmm.mr.CudaAsyncMemoryResource()
    assert _pool_attribute(keeps_all.pool_handle(), CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 2**64 - 1
    ipc = nbrmm.mr.CudaAsyncMemoryResource(enable_ipc=True)
    buf = nbrmm.Buffer(1000, mr=ipc)
    buf.copy_from_host(b"i" * 1000)
    assert buf.tobytes() == b"i" * 1000


@pytest.mark.gpu
def test_gpu_async_view_over_pools():
    owner = nbrmm.mr.CudaAsyncMemoryResource(POOL_SIZE)
    by_int = nbrmm.mr.CudaAsyncViewMemoryResource(owner.pool_handle())
    by_obj = nbrmm.mr.CudaAsyncViewMemoryResource(owner)
    assert by_int.pool_handle() == by_obj.pool_handle() == owner.pool_handle()
    assert by_int == by_obj  # views of one pool are interchangeable
    default = nbrmm.mr.CudaAsyncViewMemoryResource(_default_pool())
    for mr in (by_int, by_obj, default):
        buf = nbrmm.Buffer(777, mr=mr)
        buf.copy_from_host(b"v" * 777)
        assert buf.tobytes() == b"v" * 777


@pytest.mark.gpu
def test_gpu_async_view_keeps_the_pool_owner_alive():
    import weakref

    owner = nbrmm.mr.CudaAsyncMemoryResource(POOL_SIZE)
    ref = weakref.ref(owner)
    view = nbrmm.mr.CudaAsyncViewMemoryResource(owner)
    del owner
    gc.collect()
    assert ref() is not None
    buf = nbrmm.Buffer(100, mr=view)
    del buf

    class Handle:  # what cuda-bindings' cudaMemPool_t looks like
        def __init__(self, value):
            self.value = value

        def __int__(self):
            return self.value

    handle = Handle(ref().pool_handle())
    handle_ref = weakref.ref(handle)
    view2 = nbrmm.mr.CudaAsyncViewMemoryResource(handle)
    del handle
    gc.collect()
    assert handle_ref() is not None and view2.pool_handle() == ref().pool_handle()
    del view, view2
    gc.collect()
    assert ref() is None and handle_ref() is None


@no_gpu_only
def test_a_view_that_cannot_be_made_releases_its_pool_owner():
    class Owner:
        def pool_handle(self):
            return 0x1234

    owner = Owner()
    ref = weakref.ref(owner)
    with pytest.raises((nbrmm.CudaError, nbrmm.LogicError)):  # no GPU: librmm refuses it
        nbrmm.mr.CudaAsyncViewMemoryResource(owner)
    del owner
    gc.collect()
    assert ref() is None


@pytest.mark.gpu
def test_gpu_async_view_cpp_copies_own_the_pool_owner():
    out = run_python(
        """
        import gc, weakref
        import nbrmm, nbrmm.mr
        owner = nbrmm.mr.CudaAsyncMemoryResource(1 << 20)
        handle = owner.pool_handle()
        ref = weakref.ref(owner)
        nbrmm.mr.set_current_device_resource(nbrmm.mr.CudaAsyncViewMemoryResource(owner))
        del owner
        gc.collect()
        assert ref() is not None, "the map's C++ copy must own the pool's owner"
        buf = nbrmm.Buffer(1000)
        nbrmm.mr.reset_per_device_resource(nbrmm.get_current_device())
        gc.collect()
        assert ref() is not None  # the buffer's copy
        del buf
        gc.collect()
        assert ref() is None
        # At exit, C++ lets go of the owner's Python object but keeps its pool.
        owner = nbrmm.mr.CudaAsyncMemoryResource(1 << 20)
        handle = owner.pool_handle()
        ref = weakref.ref(owner)
        nbrmm.mr.set_current_device_resource(nbrmm.mr.CudaAsyncViewMemoryResource(owner))
        del owner
        nbrmm._nbrmm._release_python_objects()  # what interpreter exit does
        gc.collect()
        assert ref() is None
        current = nbrmm.mr.get_current_device_resource()
        assert type(current) is nbrmm.mr.CudaAsyncViewMemoryResource, type(current)
        assert current.pool_handle() == handle
        buf = nbrmm.Buffer(1000)  # the pool is alive
        buf.copy_from_host(b"m" * 1000)
        assert buf.tobytes() == b"m" * 1000
        print("ok")
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok" and "leaked" not in out.stderr, out.stdout + out.stderr


@pytest.mark.gpu
def test_gpu_async_view_cycle_through_its_pool_owner_is_collected():
    class Owner:
        def __init__(self):
            self.pool = nbrmm.mr.CudaAsyncMemoryResource(POOL_SIZE)

        def pool_handle(self):
            return self.pool.pool_handle()

    owner = Owner()
    owner.view = nbrmm.mr.CudaAsyncViewMemoryResource(owner)
    buf = nbrmm.Buffer(100, mr=owner.view)  # its copy is shared by the view's Buffers
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is not None  # the buffer keeps the view, which keeps the owner
    buf.copy_from_host(b"o" * 100)
    assert buf.tobytes() == b"o" * 100
    del buf
    gc.collect()
    assert ref() is None


@pytest.mark.gpu
def test_gpu_pool_default_initial_size_is_half_the_free_memory():
    free, _ = nbrmm.available_device_memory()
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    pool = nbrmm.mr.PoolMemoryResource(stats, maximum_pool_size=POOL_SIZE)
    assert pool.pool_size() == POOL_SIZE  # half the free memory, capped by the maximum
    assert stats.allocation_counts.current_bytes == POOL_SIZE
    del pool
    assert stats.allocation_counts.current_bytes == 0
    assert free // 2 > POOL_SIZE


@pytest.mark.gpu
def test_gpu_arena_takes_its_arena_from_the_upstream():
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    arena = nbrmm.mr.ArenaMemoryResource(stats, arena_size=4 * POOL_SIZE)
    assert stats.allocation_counts.current_bytes == 4 * POOL_SIZE
    ptrs = [arena.allocate(1000) for _ in range(10)]
    assert stats.allocation_counts.total_count == 1  # served from the arena
    for p in ptrs:
        arena.deallocate(p, 1000)
    with pytest.raises(MemoryError):
        arena.allocate(8 * POOL_SIZE)
    del arena
    gc.collect()
    assert stats.allocation_counts.current_bytes == 0


@pytest.mark.gpu
def test_gpu_pool_grows_from_the_device():
    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    pool = nbrmm.mr.PoolMemoryResource(stats, POOL_SIZE, 4 * POOL_SIZE)
    bufs = [nbrmm.Buffer(POOL_SIZE // 2, mr=pool) for _ in range(3)]
    assert pool.pool_size() > POOL_SIZE
    assert stats.allocation_counts.current_count == 2
    del bufs, pool
    gc.collect()
    assert stats.allocation_counts.current_bytes == 0
