"""nbrmm's C++ API from Cython, tested against a separate Cython extension.

``cython_ext`` (tests/ext/cython_ext.pyx, built by tests/extensions.py) wraps a C++ library
that knows only librmm (tests/ext/cython_lib.hpp), as cuDF wraps libcudf, and reaches nbrmm
only through the declarations nbrmm installs (``nbrmm/nbrmm.pxd``, ``nbrmm/librmm.pxd``).
"""

import gc
import os
import weakref

import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap, read_host, write_host

pytest.importorskip("Cython", reason="the Cython test extension needs Cython (test extra)")

from extensions import cython_ext  # noqa: E402


class ForeignStream:
    """A stream of another library: only the ``__cuda_stream__`` protocol."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_cython_declarations_are_installed():
    for name in ("nbrmm.pxd", "librmm.pxd"):
        assert os.path.exists(os.path.join(nbrmm.get_include(), "nbrmm", name))


def test_cpp_allocates_from_exactly_the_resource_passed():
    heap = HostHeap()
    mr = nbrmm.mr.StatisticsResourceAdaptor(heap.resource())
    buf = cython_ext.full(100, 7, mr=mr)
    assert isinstance(buf, nbrmm.Buffer)
    assert buf.mr is mr and buf.size == 100
    assert mr.allocation_counts.current_bytes == 100 and mr.allocation_counts.total_count == 1
    assert read_host(buf.ptr, 100) == bytes([7]) * 100  # filled in C++
    assert heap.live == {buf.ptr: 100}
    del buf
    gc.collect()
    assert mr.allocation_counts.current_bytes == 0  # freed back to the same resource
    assert heap.bytes_in_use == 0


def test_none_is_the_current_resource_read_at_the_call():
    heap = HostHeap()
    mr = heap.resource()
    with nbrmm.mr.using_device_resource(mr):
        buf = cython_ext.full(16, 1)
    assert buf.mr is mr and heap.bytes_in_use == 16
    del buf
    assert heap.bytes_in_use == 0


def test_cpp_code_allocates_from_the_current_resource_set_in_python():
    heap = HostHeap()
    mr = nbrmm.mr.StatisticsResourceAdaptor(heap.resource())
    nbrmm.mr.set_current_device_resource(mr)
    buf = cython_ext.full_from_current(48, 3)  # C++ reads librmm's current resource itself
    assert buf.mr is mr and buf.size == 48
    assert mr.allocation_counts.current_bytes == 48
    assert read_host(buf.ptr, 48) == bytes([3]) * 48
    nbrmm.mr.set_current_device_resource(HostHeap().resource())
    del buf  # freed to the resource that allocated it, not to the current one
    assert mr.allocation_counts.current_bytes == 0 and heap.bytes_in_use == 0


def test_the_buffer_keeps_its_resource_alive():
    heap = HostHeap()
    mr = heap.resource()
    mr_ref = weakref.ref(mr)
    buf = cython_ext.full(40, 0, mr)
    del mr
    gc.collect()
    assert mr_ref() is buf.mr
    del buf
    gc.collect()
    assert mr_ref() is None and heap.bytes_in_use == 0


def test_the_buffer_is_on_the_stream_passed():
    heap = HostHeap()
    buf = cython_ext.full(8, 0, heap.resource(), ForeignStream(0x1234))
    assert buf.stream.handle == 0x1234
    assert cython_ext.describe(buf)[2] == 0x1234
    default = cython_ext.full(8, 0, heap.resource())
    assert default.stream == nbrmm.DEFAULT_STREAM


def test_the_buffer_keeps_the_stream_object_passed_alive():
    # As rmm's c_from_unique_ptr(ptr, stream) does: a stream the caller made and dropped
    # must not be destroyed while the buffer is still ordered on it.
    heap = HostHeap()
    stream = ForeignStream(0x1234)
    ref = weakref.ref(stream)
    buf = cython_ext.full(8, 0, heap.resource(), stream)
    del stream
    gc.collect()
    assert ref() is not None and buf.stream.owner is ref()
    del buf
    gc.collect()
    assert ref() is None and heap.bytes_in_use == 0


def test_cpp_reads_a_buffers_pointer_size_and_stream():
    heap = HostHeap()
    buf = nbrmm.Buffer(4, mr=heap.resource())
    write_host(buf.ptr, b"\x01\x02\x03\x04")
    assert cython_ext.describe(buf) == (buf.ptr, 4, buf.stream.handle)
    assert cython_ext.total(buf) == 10
    other = cython_ext.full(5, 9, heap.resource())
    assert cython_ext.total(other) == 45


def test_reading_a_buffer_refuses_other_objects_and_closed_buffers():
    with pytest.raises(TypeError, match="^buf: expected an nbrmm.Buffer, got bytes"):
        cython_ext.total(b"abc")
    buf = cython_ext.full(4, 0, HostHeap().resource())
    buf.close()
    with pytest.raises(ValueError, match="^buf: the buffer is closed"):
        cython_ext.total(buf)


def test_cpp_gets_the_handle_of_any_stream_object():
    assert cython_ext.stream_handle(None) == 0
    assert cython_ext.stream_handle(nbrmm.DEFAULT_STREAM) == 0
    assert cython_ext.stream_handle(nbrmm.PER_THREAD_DEFAULT_STREAM) == 2
    assert cython_ext.stream_handle(ForeignStream(0xABC0)) == 0xABC0
    assert cython_ext.stream_handle(nbrmm.Stream(ForeignStream(0x40))) == 0x40


def test_stream_errors_name_the_parameter():
    with pytest.raises(TypeError, match="^stream: expected None, an nbrmm.Stream or an object"):
        cython_ext.stream_handle(object())
    with pytest.raises(TypeError, match="^stream: expected"):
        cython_ext.full(8, 0, HostHeap().resource(), "not a stream")

    class Version1:
        def __cuda_stream__(self):
            return (1, 0)

    with pytest.raises(TypeError, match="^stream: .*version 1"):
        cython_ext.stream_handle(Version1())


def test_a_non_resource_is_a_type_error_naming_mr():
    with pytest.raises(TypeError, match="^mr: expected an nbrmm memory resource or None, got int"):
        cython_ext.full(8, 0, 5)


def test_a_resource_goes_to_cpp_and_comes_back_as_itself():
    mr = HostHeap().resource()
    assert cython_ext.round_trip(mr) is mr


def test_an_allocation_failure_reaches_python_as_a_memory_error():
    def refuse(nbytes, stream):
        raise MemoryError("no room")

    mr = nbrmm.mr.CallbackMemoryResource(refuse, lambda ptr, nbytes, stream: None)
    with pytest.raises(MemoryError):
        cython_ext.full(64, 0, mr)
    nbrmm.mr.set_current_device_resource(mr)
    with pytest.raises(MemoryError):
        cython_ext.full_from_current(64, 0)


def test_librmm_errors_reach_python_as_nbrmm_exceptions():
    limited = nbrmm.mr.LimitingResourceAdaptor(HostHeap().resource(), allocation_limit=256)
    with pytest.raises(nbrmm.OutOfMemory):
        cython_ext.full(1024, 0, limited)


@pytest.mark.gpu
def test_cython_allocates_device_memory_on_a_stream():
    stream = nbrmm.Stream()
    mr = nbrmm.mr.StatisticsResourceAdaptor(
        nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource(), initial_pool_size="4MiB")
    )
    buf = cython_ext.full(1 << 20, 5, mr, stream)
    assert buf.mr is mr and buf.stream is stream
    assert mr.allocation_counts.current_bytes == 1 << 20
    assert cython_ext.total(buf) == 5 << 20  # read back in C++ through the buffer's stream
    assert buf.tobytes() == bytes([5]) * (1 << 20)
    del buf
    assert mr.allocation_counts.current_bytes == 0


@pytest.mark.gpu
def test_cython_allocates_from_the_current_device_resource():
    mr = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    with nbrmm.mr.using_device_resource(mr):
        buf = cython_ext.full_from_current(4096, 1)
    assert buf.mr is mr and mr.allocation_counts.current_bytes == 4096
    assert buf.tobytes() == bytes([1]) * 4096
    default = cython_ext.full(256, 2)  # mr=None: the current resource, a CUDA one
    assert default.tobytes() == bytes([2]) * 256
