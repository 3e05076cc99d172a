"""An rmm program (written for rmm 26.10, never naming nbrmm) that needs no GPU: its
device memory is host memory behind a CallbackMemoryResource. Run by
tests/test_rmm_compat.py through ``python -m nbrmm.compat``; prints ``ok`` at the end."""

import ctypes
import sys

import rmm
import rmm.mr
import rmm.statistics
from rmm.allocators.cupy import rmm_cupy_allocator  # imports without CuPy
from rmm.pylibrmm.device_buffer import DeviceBuffer
from rmm.pylibrmm.memory_resource import CallbackMemoryResource, StatisticsResourceAdaptor
from rmm.pylibrmm.stream import DEFAULT_STREAM, Stream

libc = ctypes.CDLL(None)
libc.aligned_alloc.restype = ctypes.c_void_p
libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
live = {}


def allocate(nbytes, stream):
    assert isinstance(stream, Stream)
    ptr = libc.aligned_alloc(256, (max(nbytes, 1) + 255) // 256 * 256)
    live[ptr] = nbytes
    return ptr


def deallocate(ptr, nbytes, stream):
    assert live.pop(ptr) == nbytes
    libc.free(ptr)


host = CallbackMemoryResource(allocate, deallocate)
stats = StatisticsResourceAdaptor(host)
rmm.mr.set_current_device_resource(stats)
assert rmm.mr.get_current_device_resource() is stats

buf = DeviceBuffer(size=1000)  # the current resource
assert buf.size == 1000 and len(buf) == 1000 and live == {buf.ptr: 1000}
assert stats.allocation_counts.current_bytes == 1000
buf.resize(100)
assert buf.size == 100

with rmm.statistics.statistics():
    inner = rmm.DeviceBuffer(size=64, stream=DEFAULT_STREAM)
    assert rmm.statistics.get_statistics().current_bytes == 64
    del inner

pool = rmm.mr.PoolMemoryResource(host, initial_pool_size="4 KiB", maximum_pool_size="8KiB")
assert pool.pool_size() == 4096 and isinstance(pool.get_upstream(), rmm.mr.CallbackMemoryResource)
small = rmm.DeviceBuffer(size=512, mr=pool)

# The exceptions rmm raises, caught as rmm programs catch them.
try:
    rmm.mr.PoolMemoryResource(host, initial_pool_size=8192, maximum_pool_size=4096)
except RuntimeError as e:
    assert "exceeds the maximum pool size" in str(e)
else:
    raise AssertionError("no error")
for bad, exc in [(lambda: rmm.mr.PoolMemoryResource(host, "2k"), ValueError),
                 (lambda: rmm.DeviceBuffer(size=-1), OverflowError),
                 (lambda: rmm.DeviceBuffer(size=8, stream=None), TypeError),
                 (lambda: rmm.set_logging_level(3), TypeError),
                 (lambda: Stream(DEFAULT_STREAM, flags=rmm.pylibrmm.CudaStreamFlags.NON_BLOCKING),
                  ValueError),
                 (lambda: rmm.mr.LimitingResourceAdaptor(host, 10).allocate(100), MemoryError)]:
    try:
        bad()
    except exc:
        pass
    else:
        raise AssertionError(f"{bad} did not raise {exc.__name__}")

calls = []
rmm.register_reinitialize_hook(calls.append, "hook")
rmm.unregister_reinitialize_hook(calls.append)  # bound methods match by equality
rmm.set_logging_level(rmm.level_enum.warn)
assert rmm.get_logging_level() == rmm.level_enum.warn
rmm.set_logging_level(rmm.level_enum.info)
assert isinstance(rmm.RMMError(3, "message"), Exception) and rmm.RMMError(3, "m").errcode == 3
assert callable(rmm_cupy_allocator)

del buf, small, pool
rmm.mr.set_current_device_resource(host)
del stats
assert live == {}, live
print(rmm.__name__, sys.argv[1:], "ok")
