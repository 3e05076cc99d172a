"""Bad input and the exception class rmm 26.10 raises for it (rule: nbrmm raises an instance).

Each case is a call made with the package under test (``rmm`` or ``nbrmm``, which have the
same module layout) and a host-memory resource of that package, so the very same table
runs against nbrmm (tests/test_rmm_compat.py) and against rmm 26.10
(``scripts/check_rmm_cases.py``, which checks that the table records rmm's behaviour).

This module imports neither package.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Case:
    id: str
    call: Callable[[Any, Any], Any]  # (package, host resource) -> anything
    rmm_raises: type[BaseException]  # what rmm 26.10 raises
    match: str | None = None  # a regex nbrmm's message matches
    rmm_cpu: bool = True  # rmm raises this class without a GPU too (checked by the script)


class V1Stream:
    """A stream object that speaks a protocol version rmm and nbrmm do not know."""

    def __cuda_stream__(self):
        return (1, 0)


def _buf(m, r, size=16):
    return m.pylibrmm.device_buffer.DeviceBuffer(size=size, mr=r)


def _stream(m):
    return m.pylibrmm.stream


def _allocate_from(resource, nbytes):
    # A local keeps the resource alive until the exception has been handled: rmm frees a
    # resource's upstream blocks through Python callbacks, which must not run while an
    # exception propagates.
    return resource.allocate(nbytes)


def _logging_without_file(m, r):
    saved = os.environ.pop("RMM_LOG_FILE", None)
    try:
        return m.mr.LoggingResourceAdaptor(r)
    finally:
        if saved is not None:
            os.environ["RMM_LOG_FILE"] = saved


NONE_STREAM = "^stream: stream argument cannot be None"

CASES = [
    # stream=None anywhere: TypeError "stream argument cannot be None"
    Case("allocate-stream-None", lambda m, r: r.allocate(8, None), TypeError, NONE_STREAM),
    Case("deallocate-stream-None", lambda m, r: r.deallocate(0, 0, None), TypeError, NONE_STREAM),
    Case("DeviceBuffer-stream-None",
         lambda m, r: m.DeviceBuffer(size=8, stream=None, mr=r), TypeError, NONE_STREAM),
    Case("copy_to_host-stream-None",
         lambda m, r: _buf(m, r).copy_to_host(None, None), TypeError, NONE_STREAM),
    Case("copy_from_host-stream-None",
         lambda m, r: _buf(m, r).copy_from_host(b"x", None), TypeError, NONE_STREAM),
    Case("copy_from_device-stream-None",
         lambda m, r: _buf(m, r).copy_from_device(_buf(m, r), None), TypeError, NONE_STREAM),
    Case("tobytes-stream-None", lambda m, r: _buf(m, r).tobytes(None), TypeError, NONE_STREAM),
    Case("reserve-stream-None", lambda m, r: _buf(m, r).reserve(32, None), TypeError, NONE_STREAM),
    Case("resize-stream-None", lambda m, r: _buf(m, r).resize(8, None), TypeError, NONE_STREAM),
    Case("DeviceBuffer.to_device-stream-None",
         lambda m, r: m.DeviceBuffer.to_device(b"abc", None), TypeError, NONE_STREAM),
    Case("to_device-stream-None",
         lambda m, r: m.pylibrmm.device_buffer.to_device(b"abc", None), TypeError, NONE_STREAM),
    Case("copy_ptr_to_host-stream-None",
         lambda m, r: m.pylibrmm.device_buffer.copy_ptr_to_host(0, bytearray(1), None),
         TypeError, NONE_STREAM),
    Case("copy_host_to_ptr-stream-None",
         lambda m, r: m.pylibrmm.device_buffer.copy_host_to_ptr(b"x", 0, None),
         TypeError, NONE_STREAM),
    Case("copy_device_to_ptr-stream-None",
         lambda m, r: m.pylibrmm.device_buffer.copy_device_to_ptr(0, 0, 0, None),
         TypeError, NONE_STREAM),
    # other stream arguments
    Case("allocate-stream-int", lambda m, r: r.allocate(8, 5), TypeError, "^stream:"),
    Case("DeviceBuffer-stream-protocol-v1",
         lambda m, r: m.DeviceBuffer(size=8, stream=V1Stream(), mr=r), TypeError, "version 1"),
    Case("Stream-protocol-v1", lambda m, r: _stream(m).Stream(V1Stream()),
         NotImplementedError, "version 1"),
    Case("Stream-int", lambda m, r: _stream(m).Stream(5), TypeError, "^obj:"),
    Case("Stream-str", lambda m, r: _stream(m).Stream("x"), TypeError, "^obj:"),
    Case("Stream-flags-with-existing",
         lambda m, r: _stream(m).Stream(_stream(m).DEFAULT_STREAM,
                                        flags=_stream(m).CudaStreamFlags.NON_BLOCKING),
         ValueError, "flags may only be specified when obj is None"),
    Case("Stream-flags-unknown-int", lambda m, r: _stream(m).Stream(flags=7), RuntimeError,
         "^flags: 7 is not a CudaStreamFlags"),
    Case("Stream-flags-str", lambda m, r: _stream(m).Stream(flags="x"), TypeError, "^flags:"),
    Case("CudaStreamPool-empty", lambda m, r: m.pylibrmm.CudaStreamPool(0), RuntimeError,
         "^pool_size: must be positive"),
    Case("CudaStreamPool-negative", lambda m, r: m.pylibrmm.CudaStreamPool(-1), OverflowError,
         "^pool_size: must be non-negative"),
    Case("CudaStreamPool-flags-unknown-int", lambda m, r: m.pylibrmm.CudaStreamPool(4, 7),
         RuntimeError, "^flags: 7 is not"),
    # sizes, pointers and other integers out of range: OverflowError
    Case("allocate-negative", lambda m, r: r.allocate(-1), OverflowError, "^nbytes: must be non-negative"),
    Case("allocate-2**64", lambda m, r: r.allocate(2**64), OverflowError, "^nbytes: .* 64 bits"),
    Case("allocate-2**63", lambda m, r: r.allocate(2**63), MemoryError),
    Case("deallocate-negative-ptr", lambda m, r: r.deallocate(-1, 0), OverflowError, "^ptr:"),
    Case("deallocate-None-ptr", lambda m, r: r.deallocate(None, 0), TypeError, "^ptr:"),
    Case("DeviceBuffer-negative-size", lambda m, r: m.DeviceBuffer(size=-1, mr=r),
         OverflowError, "^size:"),
    Case("DeviceBuffer-negative-ptr", lambda m, r: m.DeviceBuffer(ptr=-1, size=1, mr=r),
         OverflowError, "^ptr:"),
    Case("DeviceBuffer-positional", lambda m, r: m.DeviceBuffer(10), TypeError),
    Case("DeviceBuffer-mr-int", lambda m, r: m.DeviceBuffer(size=1, mr=5), TypeError, "^mr:"),
    Case("reserve-negative", lambda m, r: _buf(m, r).reserve(-1), OverflowError, "^new_capacity:"),
    Case("resize-negative", lambda m, r: _buf(m, r).resize(-1), OverflowError, "^new_size:"),
    Case("Pool-negative", lambda m, r: m.mr.PoolMemoryResource(r, -1), OverflowError,
         "^initial_pool_size:"),
    Case("Pool-string-2**64", lambda m, r: m.mr.PoolMemoryResource(r, "99999999999999999999 PB"),
         OverflowError, "^initial_pool_size:"),
    Case("Limiting-negative", lambda m, r: m.mr.LimitingResourceAdaptor(r, -1), OverflowError,
         "^allocation_limit:"),
    Case("FixedSize-negative", lambda m, r: m.mr.FixedSizeMemoryResource(r, -1), OverflowError,
         "^block_size:"),
    Case("SamHeadroom-negative", lambda m, r: m.mr.SamHeadroomMemoryResource(-1), OverflowError,
         "^headroom:"),
    Case("Binning-exponent-beyond-int8", lambda m, r: m.mr.BinningMemoryResource(r, 200, 300),
         OverflowError, "^min_size_exponent:"),
    Case("Binning-add_bin-negative", lambda m, r: m.mr.BinningMemoryResource(r).add_bin(-1),
         OverflowError, "^allocation_size:"),
    Case("copy_ptr_to_host-negative",
         lambda m, r: m.pylibrmm.device_buffer.copy_ptr_to_host(-1, bytearray(1)),
         OverflowError, "^db:"),
    Case("copy_host_to_ptr-negative",
         lambda m, r: m.pylibrmm.device_buffer.copy_host_to_ptr(b"x", -1), OverflowError, "^db:"),
    Case("copy_device_to_ptr-negative-count",
         lambda m, r: m.pylibrmm.device_buffer.copy_device_to_ptr(0, 0, -1), OverflowError,
         "^count:"),
    # pool sizes librmm rejects: RuntimeError
    Case("Pool-initial-exceeds-maximum", lambda m, r: m.mr.PoolMemoryResource(r, 8192, 4096),
         RuntimeError, "exceeds the maximum pool size"),
    Case("Pool-initial-not-aligned", lambda m, r: m.mr.PoolMemoryResource(r, 1000), RuntimeError,
         "^initial_pool_size: must be a multiple of 256"),
    Case("Pool-maximum-not-aligned", lambda m, r: m.mr.PoolMemoryResource(r, 1024, 2000),
         RuntimeError, "^maximum_pool_size: must be a multiple of 256"),
    # size strings: ValueError "Could not parse"
    Case("Pool-size-2k", lambda m, r: m.mr.PoolMemoryResource(r, "2k"), ValueError,
         "Could not parse '2k'"),
    Case("Pool-size-float", lambda m, r: m.mr.PoolMemoryResource(r, 1.5), TypeError,
         "^initial_pool_size:"),
    Case("Pool-size-list", lambda m, r: m.mr.PoolMemoryResource(r, []), TypeError,
         "^initial_pool_size:"),
    Case("Pool-size-exponent", lambda m, r: m.mr.PoolMemoryResource(r, "1e30"), ValueError,
         "Could not parse"),
    Case("Arena-size-x", lambda m, r: m.mr.ArenaMemoryResource(r, "x"), ValueError,
         "Could not parse 'x'"),
    Case("CudaAsync-size-2k", lambda m, r: m.mr.CudaAsyncMemoryResource(initial_pool_size="2k"),
         ValueError, "Could not parse"),
    Case("reinitialize-size-2k",
         lambda m, r: m.reinitialize(pool_allocator=True, initial_pool_size="2k"), ValueError,
         "Could not parse"),
    # logger levels: TypeError for anything but a level_enum member
    Case("set_logging_level-int", lambda m, r: m.set_logging_level(3), TypeError, "^level:"),
    Case("set_logging_level-None", lambda m, r: m.set_logging_level(None), TypeError, "^level:"),
    Case("set_flush_level-int", lambda m, r: m.set_flush_level(3), TypeError, "^level:"),
    Case("should_log-int", lambda m, r: m.should_log(3), TypeError, "^level:"),
    # host buffers
    Case("copy_to_host-too-small", lambda m, r: _buf(m, r).copy_to_host(bytearray(2)),
         ValueError, "^ary:"),
    Case("copy_to_host-read-only", lambda m, r: _buf(m, r).copy_to_host(b"x" * 16),
         BufferError, "^ary:"),
    Case("copy_to_host-int", lambda m, r: _buf(m, r).copy_to_host(5), TypeError, "^ary:"),
    Case("copy_from_host-too-big", lambda m, r: _buf(m, r).copy_from_host(b"x" * 17),
         ValueError, "^ary:"),
    Case("copy_from_host-None", lambda m, r: _buf(m, r).copy_from_host(None), TypeError, "^ary:"),
    Case("copy_from_host-int", lambda m, r: _buf(m, r).copy_from_host(5), TypeError, "^ary:"),
    Case("copy_from_device-no-interface", lambda m, r: _buf(m, r).copy_from_device(5),
         ValueError, "^cuda_ary:"),
    Case("to_device-None", lambda m, r: m.pylibrmm.device_buffer.to_device(None), TypeError, "^b:"),
    Case("to_device-str", lambda m, r: m.DeviceBuffer.to_device("abc"), TypeError, "^b:"),
    Case("to_device-not-contiguous",
         lambda m, r: m.pylibrmm.device_buffer.to_device(memoryview(bytearray(4))[::2]),
         BufferError, "^b:"),
    Case("copy_ptr_to_host-None", lambda m, r: m.pylibrmm.device_buffer.copy_ptr_to_host(0, None),
         TypeError, "^hb:"),
    Case("copy_ptr_to_host-read-only",
         lambda m, r: m.pylibrmm.device_buffer.copy_ptr_to_host(0, b"x"), BufferError, "^hb:"),
    Case("copy_host_to_ptr-None", lambda m, r: m.pylibrmm.device_buffer.copy_host_to_ptr(None, 0),
         TypeError, "^hb:"),
    Case("copy_host_to_ptr-int", lambda m, r: m.pylibrmm.device_buffer.copy_host_to_ptr(5, 0),
         TypeError, "^hb:"),
    Case("copy_device_to_ptr-None",
         lambda m, r: m.pylibrmm.device_buffer.copy_device_to_ptr(None, 0, 0), TypeError,
         "^d_src:"),
    # resources
    Case("Pool-upstream-None", lambda m, r: m.mr.PoolMemoryResource(None, 1024), Exception),
    Case("Pool-upstream-int", lambda m, r: m.mr.PoolMemoryResource(5, 1024), TypeError),
    Case("Limiting-upstream-None", lambda m, r: m.mr.LimitingResourceAdaptor(None, 1024), Exception),
    Case("Binning-add_bin-resource-int",
         lambda m, r: m.mr.BinningMemoryResource(r).add_bin(1024, 5), TypeError, "^bin_resource:"),
    Case("CudaAsyncView-handle-str", lambda m, r: m.mr.CudaAsyncViewMemoryResource("pool"),
         ValueError, "^pool_handle:"),
    Case("Logging-no-file", _logging_without_file, ValueError, "RMM_LOG_FILE"),
    Case("Logging-file-cannot-open",
         lambda m, r: m.mr.LoggingResourceAdaptor(r, os.path.join(os.devnull, "log.csv")),
         RuntimeError, "^log_file_name: cannot open"),
    Case("set_current_device_resource-int", lambda m, r: m.mr.set_current_device_resource(5),
         TypeError, "^mr:"),
    Case("set_per_device_resource-device-str", lambda m, r: m.mr.set_per_device_resource("0", r),
         TypeError),
    Case("get_per_device_resource-device-str", lambda m, r: m.mr.get_per_device_resource("0"),
         TypeError),
    Case("get_per_device_resource-device-2**40",
         lambda m, r: m.mr.get_per_device_resource(2**40), OverflowError, "^device:"),
    Case("set_per_device_resource-device-2**40",
         lambda m, r: m.mr.set_per_device_resource(2**40, r), OverflowError, "^device:"),
    Case("Statistics-pop-last-counters",
         lambda m, r: m.mr.StatisticsResourceAdaptor(r).pop_counters(), IndexError),
    Case("profiler-context-without-name",
         lambda m, r: m.statistics.ProfilerContext(m.statistics.default_profiler_records,
                                                   "").__enter__(), ValueError, "name"),
    Case("RMMError-without-arguments", lambda m, r: m.RMMError(), TypeError),
    # running out of memory: MemoryError
    Case("Limiting-out-of-memory", lambda m, r: m.mr.LimitingResourceAdaptor(r, 100).allocate(200),
         MemoryError),
    Case("Pool-out-of-memory", lambda m, r: _allocate_from(m.mr.PoolMemoryResource(r, 1024, 2048),
                                                            4096), MemoryError),
    Case("FixedSize-too-large",
         lambda m, r: _allocate_from(m.mr.FixedSizeMemoryResource(r, 1024, 2), 2048), MemoryError),
    # without a GPU: CUDA errors are RuntimeErrors (nbrmm: the missing GPU is what it says)
    Case("reinitialize-device-missing",
         lambda m, r: m.reinitialize(devices=[_device_count(m)]), RuntimeError,
         "^devices:|^reinitialize\\(\\) needs a GPU"),
]


def _device_count(m):
    """The number of CUDA devices, asked through the package under test."""
    if hasattr(m, "get_device_count"):
        return m.get_device_count()
    from rmm._cuda import gpu  # rmm's own (private) helper, for scripts/check_rmm_cases.py

    try:
        return gpu.getDeviceCount()
    except gpu.CUDARuntimeError:
        return 0
