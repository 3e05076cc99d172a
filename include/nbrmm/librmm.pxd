# Cython declarations of the librmm 26.10 types that nbrmm's C++ API (nbrmm/nbrmm.pxd)
# takes and returns, and that code using it needs: CUDA stream handles and references, the
# owning and non-owning resource handles, and rmm::device_buffer. They declare librmm's
# own C++ API, nothing of nbrmm's; a library with declarations of its own for these types
# can use them instead.
#
# Found on Cython's include path as nbrmm.get_include(): `from nbrmm.librmm cimport ...`.

from libcpp cimport bool


cdef extern from "cuda_runtime_api.h" nogil:
    cdef struct CUstream_st
    ctypedef CUstream_st* cudaStream_t


cdef extern from "cuda/stream_ref" nogil:
    # A non-owning reference to a CUDA stream (what librmm 26.10 takes as `stream`; its
    # rmm::cuda_stream_view is deprecated): `stream_ref(handle)`.
    cdef cppclass stream_ref "cuda::stream_ref":
        stream_ref(cudaStream_t stream)
        cudaStream_t get()
        void sync() except +


cdef extern from "cuda/memory_resource" nogil:
    # The owning, type-erased resource handle librmm uses everywhere (nbrmm::device_resource):
    # copies share the resource's state and keep it alive.
    cdef cppclass device_resource "cuda::mr::any_resource<cuda::mr::device_accessible>":
        device_resource()
        device_resource(const device_resource&)
        void* allocate(stream_ref stream, size_t bytes, size_t alignment) except +
        void deallocate(stream_ref stream, void* ptr, size_t bytes,
                        size_t alignment) noexcept


cdef extern from "rmm/resource_ref.hpp" namespace "rmm" nogil:
    # A non-owning reference to a resource (what librmm's and most libraries' functions
    # take as `mr`): `device_async_resource_ref(res)` refers to a device_resource `res`,
    # which must outlive it.
    cdef cppclass device_async_resource_ref:
        device_async_resource_ref(device_resource&)
        void* allocate(stream_ref stream, size_t bytes, size_t alignment) except +
        void deallocate(stream_ref stream, void* ptr, size_t bytes,
                        size_t alignment) noexcept


cdef extern from "rmm/device_buffer.hpp" namespace "rmm" nogil:
    # Untyped device memory that frees itself, on its stream, to the resource that
    # allocated it (a copy of the resource passed to the constructor).
    cdef cppclass device_buffer:
        device_buffer()
        device_buffer(size_t size, stream_ref stream, device_async_resource_ref mr) except +
        device_buffer(size_t size, stream_ref stream, device_resource mr) except +
        device_buffer(const void* source_data, size_t size, stream_ref stream,
                      device_async_resource_ref mr) except +
        device_buffer(const void* source_data, size_t size, stream_ref stream,
                      device_resource mr) except +
        void* data()
        size_t size()
        size_t capacity()
        bool is_empty()
        stream_ref stream()
        void set_stream(stream_ref stream)
        void reserve(size_t new_capacity, stream_ref stream) except +
        void resize(size_t new_size, stream_ref stream) except +
        void shrink_to_fit(stream_ref stream) except +
