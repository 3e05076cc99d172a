"""The safety rules of test_safety.py on GPU memory: managed and pinned (host-accessible)
memory for exports, and every CUDA resource for sizes and alignments."""

import gc

import numpy as np
import pytest

import nbrmm
import nbrmm.mr as mr
from helpers import POOL_SIZE

pytestmark = pytest.mark.gpu


def collect():
    for _ in range(3):
        gc.collect()


HOST_ACCESSIBLE = {
    "managed": mr.ManagedMemoryResource,
    "pinned": mr.PinnedHostMemoryResource,
    "pool_over_managed": lambda: mr.PoolMemoryResource(mr.ManagedMemoryResource(), POOL_SIZE),
}

EXPORTS = {
    "memoryview": memoryview,
    "numpy.frombuffer": lambda b: np.frombuffer(b, dtype=np.uint8),
    "numpy.from_dlpack": np.from_dlpack,
}


@pytest.mark.parametrize("kind", sorted(HOST_ACCESSIBLE))
@pytest.mark.parametrize("export", sorted(EXPORTS))
def test_views_of_gpu_memory_never_outlive_it(kind, export):
    res = HOST_ACCESSIBLE[kind]()
    buf = nbrmm.Buffer(1 << 20, mr=res)
    view = EXPORTS[export](buf)
    view[0] = 42
    with pytest.raises(BufferError, match="live export"):
        buf.close()
    with pytest.raises(BufferError, match="live export"):
        buf.resize(2 << 20)  # would move the memory
    with pytest.raises(BufferError, match="live export"):
        buf.reserve(4 << 20)
    buf.resize(16)  # within the capacity: allowed
    with pytest.raises(BufferError, match="live export"):
        buf.shrink_to_fit()
    assert view[0] == 42 and buf.copy_to_host()[0] == 42
    del view
    collect()
    buf.shrink_to_fit()  # moves (and copies) now that nothing shows the memory
    assert buf.capacity() == 16 and buf.copy_to_host()[0] == 42
    buf.close()


def test_cupy_dlpack_export_counts():
    cupy = pytest.importorskip("cupy")
    buf = nbrmm.Buffer(1024, mr=mr.CudaMemoryResource())
    arr = cupy.from_dlpack(buf)
    arr[:] = 7
    with pytest.raises(BufferError):
        buf.close()
    del arr
    collect()
    assert bytes(buf.copy_to_host()[:4]) == b"\x07" * 4
    buf.close()


def test_closed_small_buffers_never_show_other_buffers_bytes():
    pool = mr.PoolMemoryResource(mr.ManagedMemoryResource(), POOL_SIZE)
    kept = []
    for i in range(16):
        buf = nbrmm.Buffer(256, mr=pool)
        view = memoryview(buf)
        view[:] = bytes([i]) * 256
        with pytest.raises(BufferError):
            buf.close()
        kept.append((view, buf))
        nbrmm.Buffer(256, mr=pool)  # would reuse a freed block
    assert all(v.tobytes() == bytes([i]) * 256 for i, (v, _) in enumerate(kept))


CUDA_RESOURCES = {
    "cuda": mr.CudaMemoryResource,
    "managed": mr.ManagedMemoryResource,
    "pinned": mr.PinnedHostMemoryResource,
    "async": lambda: mr.CudaAsyncMemoryResource(),
    "pool": lambda: mr.PoolMemoryResource(mr.CudaMemoryResource(), POOL_SIZE),
    "arena": lambda: mr.ArenaMemoryResource(mr.CudaMemoryResource(), arena_size=64 << 20),
    "binning": lambda: mr.BinningMemoryResource(mr.CudaMemoryResource(), 8, 12),
    "fixed_size": lambda: mr.FixedSizeMemoryResource(mr.CudaMemoryResource(), 1 << 20, 4),
    "limiting": lambda: mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), 64 << 20),
}


@pytest.mark.parametrize("kind", sorted(CUDA_RESOURCES))
@pytest.mark.parametrize("size", [2**64 - 1, 2**63, 2**63 - 1, 2**62, 1 << 50])
def test_huge_sizes_raise_on_gpu_resources(kind, size):
    res = CUDA_RESOURCES[kind]()
    keep = nbrmm.Buffer(256, mr=res)
    with pytest.raises(MemoryError):
        nbrmm.Buffer(size, mr=res)
    with pytest.raises(MemoryError):
        res.allocate(size)
    other = nbrmm.Buffer(256, mr=res)
    assert other.ptr != keep.ptr  # nothing handed out twice


ALIGNMENT_CASES = [
    (kind, alignment)
    for kind in sorted(CUDA_RESOURCES)
    for alignment in [1, 64, 256, 512, 4096, 1 << 16, 1 << 21]
    # a 1 MiB block cannot hold the larger block that a 2 MiB alignment needs
    if not (kind == "fixed_size" and alignment > (1 << 19))
]


@pytest.mark.parametrize(("kind", "alignment"), ALIGNMENT_CASES)
def test_alignment_is_honoured_by_gpu_resources(kind, alignment):
    res = CUDA_RESOURCES[kind]()
    bufs = [nbrmm.Buffer(n, mr=res, alignment=alignment) for n in (1, 1000, 100_000)]
    assert all(b.ptr % alignment == 0 for b in bufs)
    data = bytes(range(256)) * 4
    bufs[1].copy_from_host(data[:1000])
    assert bufs[1].tobytes() == data[:1000]
    ptr = res.allocate(300, alignment=alignment)
    assert ptr % alignment == 0
    res.deallocate(ptr, 300, alignment=alignment)
    for b in bufs:
        b.close()
