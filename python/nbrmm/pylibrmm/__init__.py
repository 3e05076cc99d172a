"""rmm's ``rmm.pylibrmm`` namespace: the same classes and functions as nbrmm's own.

Every module of ``rmm.pylibrmm`` exists here under the same dotted path, and each name in
it is the very object nbrmm exports elsewhere (``nbrmm.pylibrmm.DeviceBuffer is
nbrmm.DeviceBuffer``), so code written against rmm's module layout runs unchanged.
"""

from nbrmm.pylibrmm import (
    cuda_stream_pool,
    device_buffer,
    helper,
    logger,
    memory_resource,
    stream,
    utils,
)
from nbrmm.pylibrmm.cuda_stream_pool import CudaStreamPool
from nbrmm.pylibrmm.device_buffer import DeviceBuffer
from nbrmm.pylibrmm.stream import CudaStreamFlags

__all__ = [
    "CudaStreamFlags",
    "CudaStreamPool",
    "DeviceBuffer",
    "cuda_stream_pool",
    "device_buffer",
    "helper",
    "logger",
    "memory_resource",
    "stream",
    "utils",
]
