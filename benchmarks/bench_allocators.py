"""CuPy and PyTorch allocations through the nbrmm hooks, beside the alternatives.

Every case times one create + destroy of a 256-byte array (the result is dropped at
once). The CuPy cases share one run: nbrmm's hook over an arena, CuPy's own MemoryPool
and rmm's ``rmm_cupy_allocator`` over rmm's arena. torch's allocator can be replaced only
once per process and before its first use, so the raw nbrmm torch hook is timed in a
child process (its results are merged into this run's JSON); in this process torch's
caching allocator is compared with the hook behind a ``torch.cuda.MemPool``.
"""

import json
import os
import subprocess
import sys

import pytest

import nbrmm
import nbrmm.mr

pytestmark = pytest.mark.gpu

ARENA_SIZE = 1 << 30
NBYTES = 256
_CHILD_ENV = "NBRMM_BENCH_TORCH_HOOK_CHILD"


def _nbrmm_arena():
    return nbrmm.mr.ArenaMemoryResource(nbrmm.mr.CudaMemoryResource(), arena_size=ARENA_SIZE)


@pytest.fixture(scope="module")
def cupy():
    import cupy

    return cupy


def _time_cupy_empty(benchmark, cupy, allocator):
    empty, uint8 = cupy.empty, cupy.uint8
    with cupy.cuda.using_allocator(allocator):
        for _ in range(100):
            empty(NBYTES, dtype=uint8)
        benchmark(empty, NBYTES, dtype=uint8)
    cupy.cuda.Device().synchronize()


def bench_cupy_empty_nbrmm_arena(benchmark, cupy):
    from nbrmm.allocators.cupy import cupy_allocator

    _time_cupy_empty(benchmark, cupy, cupy_allocator(mr=_nbrmm_arena()))


def bench_cupy_empty_nbrmm_current_arena(benchmark, cupy):
    from nbrmm.allocators.cupy import rmm_cupy_allocator

    with nbrmm.mr.using_device_resource(_nbrmm_arena()):
        _time_cupy_empty(benchmark, cupy, rmm_cupy_allocator)


def bench_cupy_empty_cupy_memory_pool(benchmark, cupy):
    pool = cupy.cuda.MemoryPool()
    _time_cupy_empty(benchmark, cupy, pool.malloc)
    pool.free_all_blocks()


def bench_cupy_empty_rmm_arena(benchmark, cupy):
    rmm = pytest.importorskip("rmm")
    from rmm.allocators.cupy import rmm_cupy_allocator

    previous = rmm.mr.get_current_device_resource()
    arena = rmm.mr.ArenaMemoryResource(rmm.mr.CudaMemoryResource(), arena_size=ARENA_SIZE)
    rmm.mr.set_current_device_resource(arena)
    try:
        _time_cupy_empty(benchmark, cupy, rmm_cupy_allocator)
    finally:
        rmm.mr.set_current_device_resource(previous)


def _time_torch_empty(benchmark, torch):
    empty, uint8 = torch.empty, torch.uint8
    for _ in range(100):
        empty(NBYTES, dtype=uint8, device="cuda")
    benchmark(empty, NBYTES, dtype=uint8, device="cuda")
    torch.cuda.synchronize()


@pytest.mark.skipif(os.environ.get(_CHILD_ENV) == "1", reason="timed by the parent process")
def bench_torch_empty_caching_allocator(benchmark):
    import torch

    _time_torch_empty(benchmark, torch)


@pytest.mark.skipif(os.environ.get(_CHILD_ENV) == "1", reason="timed by the parent process")
def bench_torch_empty_nbrmm_mem_pool(benchmark):
    import torch

    from nbrmm.allocators.torch import torch_allocator

    pool = torch.cuda.MemPool(torch_allocator(_nbrmm_arena()).allocator())
    with torch.cuda.use_mem_pool(pool):
        _time_torch_empty(benchmark, torch)


@pytest.mark.skipif(os.environ.get(_CHILD_ENV) != "1", reason="runs in a child process")
def bench_torch_empty_nbrmm_hook(benchmark):
    import torch

    from nbrmm.allocators.torch import torch_allocator

    torch.cuda.memory.change_current_allocator(torch_allocator(_nbrmm_arena()))
    _time_torch_empty(benchmark, torch)


@pytest.mark.skipif(os.environ.get(_CHILD_ENV) == "1", reason="this is the parent")
def bench_torch_empty_nbrmm_hook_in_child_process(request, tmp_path):
    """Times ``bench_torch_empty_nbrmm_hook`` in a fresh process (torch's allocator is set
    once per process) and adds its result to this run's benchmark JSON."""
    pytest.importorskip("torch")
    out = tmp_path / "child.json"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        f"{__file__}::bench_torch_empty_nbrmm_hook",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--benchmark-json={out}",
    ]
    if request.config.getoption("benchmark_disable", False):
        cmd.append("--benchmark-disable")
    child = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, _CHILD_ENV: "1"}
    )
    print(child.stdout[-4000:])
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-4000:]
    if out.exists():
        results = json.loads(out.read_text())["benchmarks"]
        assert [b["name"] for b in results] == ["bench_torch_empty_nbrmm_hook"]
        request.config.nbrmm_child_benchmarks.extend(results)
