"""The Dask workload of ``bench_dask.py``, in a module of its own: the workers import it
by name (the benchmarks folder is on their ``sys.path``), so it imports nothing heavy.

A chunked array pipeline with many small and medium allocations per task: each block is
made on the worker, added to its transpose, relaxed for ``steps`` iterations (each one
allocates several block-sized arrays and a row of means), passed through elementwise
functions and reduced along one axis.
"""

import numpy as np


def _xp(name):
    if name == "cupy":
        import cupy

        return cupy
    return np


def wave_block(xp_name, round_id, block_info=None):
    """The block of ``sin(0.01 i) + cos(0.02 j)`` at the block's location (``round_id``
    only makes each round's task keys new)."""
    xp = _xp(xp_name)
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    i = xp.arange(r0, r1, dtype=xp.float32)[:, None]
    j = xp.arange(c0, c1, dtype=xp.float32)[None, :]
    return xp.sin(i * 0.01) + xp.cos(j * 0.02)


def relax(block, steps):
    """``steps`` rounds of damping and centring, allocating as array code does."""
    for _ in range(steps):
        block = block * 0.999 + 0.001
        block = block - block.mean(axis=0)
    return block


def to_host(block):
    """A NumPy copy of a CuPy or NumPy block."""
    if isinstance(block, np.ndarray):
        return block
    import cupy

    return cupy.asnumpy(block)


def pipeline(da, xp_name, meta, n, chunk, steps, round_id):
    """The dask.array graph of one round: an ``n`` x ``n`` float32 array in ``chunk`` x
    ``chunk`` blocks, reduced to ``n`` sums (a NumPy array)."""
    blocks = n // chunk
    x = da.map_blocks(wave_block, xp_name, round_id, chunks=((chunk,) * blocks,) * 2,
                      dtype=np.float32, meta=meta)
    y = ((x + x.T) * 0.5).map_blocks(relax, steps, dtype=np.float32, meta=meta)
    z = da.exp(-(y * y)) + da.sqrt(da.abs(y))
    return z.sum(axis=0).map_blocks(to_host, dtype=np.float32, meta=np.empty((0,), np.float32))


def expected(n, chunk, steps):
    """What :func:`pipeline` computes, with NumPy on the host, block by block."""
    i = np.arange(n, dtype=np.float32)
    x = np.sin(i * 0.01)[:, None] + np.cos(i * 0.02)[None, :]
    y = (x + x.T) * 0.5
    for r in range(0, n, chunk):
        for c in range(0, n, chunk):
            y[r:r + chunk, c:c + chunk] = relax(y[r:r + chunk, c:c + chunk], steps)
    return (np.exp(-(y * y)) + np.sqrt(np.abs(y))).sum(axis=0)


def host_resource():
    """An nbrmm resource over host memory (``aligned_alloc``/``free``, 256-byte aligned as
    librmm's resources are), for the workers of the smoke run without a GPU."""
    import ctypes

    import nbrmm.mr

    libc = ctypes.CDLL(None)
    libc.aligned_alloc.restype = ctypes.c_void_p
    libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def allocate(nbytes, stream):
        ptr = libc.aligned_alloc(256, (max(nbytes, 1) + 255) // 256 * 256)
        if not ptr:
            raise MemoryError(f"aligned_alloc of {nbytes} bytes failed")
        return ptr

    def deallocate(ptr, nbytes, stream):
        libc.free(ptr)

    return nbrmm.mr.CallbackMemoryResource(allocate, deallocate)


def current_resource():
    """The class name of the worker's current nbrmm resource."""
    import nbrmm.mr

    return type(nbrmm.mr.get_current_device_resource()).__name__
