# cython: language_level=3
# distutils: language = c++
"""A Cython extension that is not nbrmm, written as cuDF's wrappers of libcudf are: it
calls a C++ library (cython_lib.hpp) that knows only librmm, and reaches nbrmm only
through the declarations nbrmm installs (``nbrmm/nbrmm.pxd``, ``nbrmm/librmm.pxd``).
"""

from libc.stdint cimport uint8_t, uint64_t, uintptr_t
from libcpp.memory cimport unique_ptr
from libcpp.utility cimport move

from nbrmm.librmm cimport cudaStream_t, device_async_resource_ref, device_buffer, stream_ref
from nbrmm.nbrmm cimport (
    buffer_from_python,
    buffer_to_python,
    buffer_view,
    device_resource,
    raise_current_exception,
    resource_from_python,
    resource_to_python,
    stream_from_python,
)


cdef extern from "cython_lib.hpp" namespace "cython_lib" nogil:
    unique_ptr[device_buffer] filled(
        size_t nbytes, uint8_t value, stream_ref stream, device_async_resource_ref mr
    ) except +raise_current_exception
    device_buffer filled_from_current(
        size_t nbytes, uint8_t value, stream_ref stream
    ) except +raise_current_exception
    uint64_t byte_sum(
        const void* ptr, size_t nbytes, stream_ref stream
    ) except +raise_current_exception


def full(size_t nbytes, uint8_t value, mr=None, stream=None):
    """A Buffer of ``nbytes`` bytes set to ``value``, allocated in C++ from ``mr`` (None:
    the current device resource) on ``stream`` (None: the default stream)."""
    cdef device_resource c_mr
    cdef cudaStream_t c_stream
    cdef unique_ptr[device_buffer] c_buf
    resource_from_python(mr, &c_mr)
    stream_from_python(stream, &c_stream)
    with nogil:
        c_buf = filled(nbytes, value, stream_ref(c_stream), device_async_resource_ref(c_mr))
    return buffer_to_python(move(c_buf), stream)


def full_from_current(size_t nbytes, uint8_t value, stream=None):
    """The same from whatever resource is current when C++ reads it, handed over by value."""
    cdef cudaStream_t c_stream
    cdef device_buffer c_buf
    stream_from_python(stream, &c_stream, "stream")
    with nogil:
        c_buf = filled_from_current(nbytes, value, stream_ref(c_stream))
    return buffer_to_python(move(c_buf), stream)


def total(buf):
    """The sum of a Buffer's bytes, read in C++ through the buffer's pointer, size and
    stream."""
    cdef buffer_view view
    cdef uint64_t result
    buffer_from_python(buf, &view, "buf")
    with nogil:
        result = byte_sum(view.data, view.size, stream_ref(view.stream))
    return result


def describe(buf):
    """``(ptr, size, stream handle)`` of a Buffer as C++ sees them."""
    cdef buffer_view view
    buffer_from_python(buf, &view)
    return <uintptr_t>view.data, view.size, <uintptr_t>view.stream


def stream_handle(stream):
    """The handle C++ gets for a Python stream object."""
    cdef cudaStream_t handle
    stream_from_python(stream, &handle)
    return <uintptr_t>handle


def round_trip(mr):
    """An nbrmm resource to C++ (an owning handle) and back to Python."""
    return resource_to_python(resource_from_python(mr))
