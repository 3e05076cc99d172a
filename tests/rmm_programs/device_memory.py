"""An rmm program (written for rmm 26.10, never naming nbrmm) that uses GPU memory. Run by
tests/test_rmm_compat.py through ``python -m nbrmm.compat``; prints ``ok`` at the end."""

import numpy as np

import rmm
import rmm.mr
import rmm.statistics
from rmm.pylibrmm.device_buffer import (
    copy_device_to_ptr,
    copy_host_to_ptr,
    copy_ptr_to_host,
    to_device,
)
from rmm.pylibrmm.stream import Stream

rmm.reinitialize(pool_allocator=True, initial_pool_size=1 << 20, maximum_pool_size=4 << 20)
assert isinstance(rmm.mr.get_current_device_resource(), rmm.mr.PoolMemoryResource)

payload = bytes(range(256)) * 4
buf = rmm.DeviceBuffer.to_device(payload)
assert bytes(buf) == payload and buf.tobytes() == payload
assert bytes(buf.copy_to_host()) == payload
assert buf.copy().tobytes() == payload

other = rmm.DeviceBuffer(size=len(payload))
copy_device_to_ptr(buf.ptr, other.ptr, buf.size)
host = bytearray(len(payload))
copy_ptr_to_host(other.ptr, host)
assert bytes(host) == payload
copy_host_to_ptr(b"\x07" * 16, other.ptr)
assert other.tobytes()[:16] == b"\x07" * 16

stream = Stream()
db = to_device(payload, stream)
out = np.empty(len(payload), dtype="u1")
db.copy_to_host(out, stream)
stream.synchronize()
assert out.tobytes() == payload

cuda = rmm.mr.CudaMemoryResource()
rmm.mr.set_current_device_resource(rmm.mr.StatisticsResourceAdaptor(cuda))
with rmm.statistics.statistics():
    big = rmm.DeviceBuffer(size=1 << 16)
    assert rmm.statistics.get_statistics().current_bytes == 1 << 16
    del big
rmm.mr.set_current_device_resource(cuda)
del buf, other, db
rmm.reinitialize()
print("ok")
