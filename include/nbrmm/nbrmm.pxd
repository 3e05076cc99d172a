# Cython declarations of nbrmm's C++ API for extensions, <nbrmm/nbrmm.hpp> (read it for the
# full contract). Add nbrmm.get_include() to Cython's include path and to the C++
# compiler's, then `from nbrmm.nbrmm cimport ...`. Nothing here is imported at run time:
# the functions are the header's inline C++ and import `nbrmm` on first use.
#
# Every function needs the GIL. Errors are Python exceptions: the functions returning an
# int return -1 with the exception set (`except -1`), those returning `object` return NULL
# (Cython raises it), and `resource_from_python(obj)` throws std::invalid_argument
# (`except +`: a ValueError).

from libcpp cimport bool
from libcpp.memory cimport unique_ptr

from nbrmm.librmm cimport cudaStream_t, device_buffer, device_resource


cdef extern from "nbrmm/nbrmm.hpp" namespace "nbrmm":
    # 1. Python resource -> C++: an owning copy of the resource behind an nbrmm resource
    # object, None meaning the current device resource (read now). It shares the object's
    # state (pool, counters) and keeps it alive on its own. The two-argument form stores it
    # in `out` and keeps the Python exception (TypeError naming `param`, default "mr", for
    # an object that is not a resource).
    device_resource resource_from_python(object obj) except +
    int resource_from_python(object obj, device_resource* out) except -1
    int resource_from_python(object obj, device_resource* out, const char* param) except -1

    # 2. C++ device_buffer -> Python: an nbrmm.Buffer that adopts the memory without
    # copying. Its `mr` is the resource that frees it (the very Python object when it came
    # from Python). Its `stream` is `stream`, the Python stream object the buffer's stream
    # came from, which the buffer then keeps alive (its handle must be the buffer's);
    # without one the buffer only borrows its stream, which must outlive it. Pass the
    # buffer with libcpp.utility.move. nbrmm's own errors for the buffer name `buf`.
    object buffer_to_python(unique_ptr[device_buffer] buf)
    object buffer_to_python(unique_ptr[device_buffer] buf, object stream)
    object buffer_to_python(device_buffer buf)  # an rvalue: buffer_to_python(move(buf))
    object buffer_to_python(device_buffer buf, object stream)

    # 3. C++ resource -> Python: the nbrmm resource object for `res` (the very object when
    # `res` came from Python).
    object resource_to_python(device_resource res)
    object resource_to_python(device_resource res, bool host_accessible)

    # 4. What Python passes: the handle of any stream object (None: the legacy default
    # stream, 0), and a Buffer's address, size and stream. They do not own what they
    # describe: keep the Python object alive while they are used. Errors name `param`
    # ("stream" and "buf" by default).
    int stream_from_python(object obj, cudaStream_t* out) except -1
    int stream_from_python(object obj, cudaStream_t* out, const char* param) except -1

    cdef cppclass buffer_view:
        void* data
        size_t size
        cudaStream_t stream

    int buffer_from_python(object obj, buffer_view* out) except -1
    int buffer_from_python(object obj, buffer_view* out, const char* param) except -1

    # 5. The Python exception for the C++ exception being handled. Use it as the handler of
    # `except +` in declarations of C++ functions that allocate with librmm:
    #     unique_ptr[device_buffer] make(...) except +raise_current_exception
    void raise_current_exception() noexcept
