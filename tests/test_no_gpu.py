"""Without a usable CUDA driver or GPU, whatever needs one raises
``nbrmm.CudaUnavailableError`` in nbrmm's own words, and nothing is printed.

The calls run in a child process that sees no GPU (``CUDA_VISIBLE_DEVICES=""``; on a
machine without a driver, none is usable anyway), so the test runs on every machine.
"""

import json
import os
import subprocess
import sys

import pytest

# (id, call): each needs a GPU for what it was asked to do.
CALLS = [
    ("pool-initial-size", "mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size='1GiB')"),
    ("pool-default-size", "mr.PoolMemoryResource(mr.CudaMemoryResource())"),
    ("pool-empty", "mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=0)"),
    ("pool-over-an-adaptor",
     "mr.PoolMemoryResource(mr.StatisticsResourceAdaptor(mr.ManagedMemoryResource()), 0)"),
    ("pool-over-host-default-size", "mr.PoolMemoryResource(host)"),
    ("arena", "mr.ArenaMemoryResource(mr.CudaMemoryResource(), arena_size='1MiB')"),
    ("arena-over-host-default-size", "mr.ArenaMemoryResource(host)"),
    ("fixed-size", "mr.FixedSizeMemoryResource(mr.CudaMemoryResource(), 256, 1)"),
    ("binning-bins", "mr.BinningMemoryResource(mr.CudaMemoryResource(), 10, 12)"),
    ("binning-add_bin", "mr.BinningMemoryResource(mr.CudaMemoryResource()).add_bin(1024)"),
    ("Buffer-current", "nbrmm.Buffer(10)"),
    ("Buffer-cuda", "nbrmm.Buffer(10, mr=mr.CudaMemoryResource())"),
    ("Buffer-managed", "nbrmm.Buffer(10, mr=mr.ManagedMemoryResource())"),
    ("Buffer-pinned", "nbrmm.Buffer(10, mr=mr.PinnedHostMemoryResource())"),
    ("Buffer-adaptors",
     "nbrmm.Buffer(10, mr=mr.TrackingResourceAdaptor(mr.StatisticsResourceAdaptor("
     "mr.CudaMemoryResource())))"),
    ("Buffer-binning-no-bins", "nbrmm.Buffer(10, mr=mr.BinningMemoryResource(mr.CudaMemoryResource()))"),
    ("allocate", "mr.CudaMemoryResource().allocate(10)"),
    ("current-allocate", "mr.get_current_device_resource().allocate(10)"),
    ("to_device", "nbrmm.to_device(b'abc')"),
    ("copy_to_host", "nbrmm.Buffer(8, mr=host).copy_to_host()"),
    ("Buffer-copy", "nbrmm.Buffer(8, mr=host).copy()"),
    ("Stream", "nbrmm.Stream()"),
    ("CudaStreamPool", "nbrmm.CudaStreamPool()"),
    ("synchronize", "nbrmm.DEFAULT_STREAM.synchronize()"),
    ("CudaAsyncMemoryResource", "mr.CudaAsyncMemoryResource()"),
    ("CudaAsyncManagedMemoryResource", "mr.experimental.CudaAsyncManagedMemoryResource()"),
    ("SystemMemoryResource", "mr.SystemMemoryResource()"),
    ("SamHeadroomMemoryResource", "mr.SamHeadroomMemoryResource(0)"),
    ("available_device_memory", "nbrmm.available_device_memory()"),
    ("available_device_memory-0", "nbrmm.available_device_memory(0)"),
    ("get_device_info", "nbrmm.get_device_info(0)"),
    ("set_current_device", "nbrmm.set_current_device(0)"),
    ("set_per_device_resource", "mr.set_per_device_resource(0, host)"),
    ("reinitialize", "nbrmm.reinitialize()"),
    ("reinitialize-pool", "nbrmm.reinitialize(pool_allocator=True, initial_pool_size='1GiB')"),
]

#: librmm's wording that says something else than "no GPU" (or that shows its build).
MISLEADING = ("Maximum pool size", "maximum pool size", "/__w/", "RMM failure", "std::",
              "CUDA error", "failed to allocate", "devices:")

CHILD = """
import ctypes, json, sys
import nbrmm, nbrmm.mr as mr, nbrmm.mr.experimental

libc = ctypes.CDLL(None)
libc.aligned_alloc.restype = ctypes.c_void_p
libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
host = mr.CallbackMemoryResource(
    lambda n, s: libc.aligned_alloc(256, max(256, (n + 255) // 256 * 256)),
    lambda p, n, s: libc.free(p))
results = {}
for name, call in json.loads(sys.argv[1]):
    try:
        eval(call)
        results[name] = ["returned", ""]
    except BaseException as e:
        results[name] = [
            type(e).__name__, str(e),
            isinstance(e, nbrmm.CudaError) and isinstance(e, MemoryError),
        ]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def outcome():
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(CALLS)], capture_output=True, text=True,
        timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def test_nothing_is_printed(outcome):
    _, stderr = outcome
    assert stderr == ""


@pytest.mark.parametrize(("name", "call"), CALLS, ids=[c[0] for c in CALLS])
def test_what_needs_a_gpu_says_so(outcome, name, call):
    results, _ = outcome
    kind, message, *rest = results[name]
    assert kind == "CudaUnavailableError", (call, kind, message)
    assert rest == [True]  # a CudaError, and a MemoryError as rmm raises for allocations
    assert "needs a GPU, and there is no usable CUDA driver or GPU: " in message, message
    for text in MISLEADING:
        assert text not in message, message
    # A parameter is blamed only where the call passed it.
    blamed = message.split(":", 1)[0]
    if blamed.isidentifier():
        assert blamed in call, message
