"""Buffer create+destroy round trips."""

import pytest

import nbrmm
import nbrmm.mr


def _host_resource():
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return nbrmm.mr.CallbackMemoryResource(
        lambda n, s: libc.malloc(max(n, 1)), lambda p, n, s: libc.free(p)
    )


def bench_buffer_over_python_callbacks(benchmark):
    mr = _host_resource()
    benchmark(nbrmm.Buffer, 256, mr=mr)


def bench_buffer_zero_size(benchmark):
    mr = _host_resource()
    benchmark(nbrmm.Buffer, 0, mr=mr)


@pytest.mark.gpu
def bench_buffer_cuda_1mib(benchmark):
    mr = nbrmm.mr.CudaMemoryResource()
    benchmark(nbrmm.Buffer, 1 << 20, mr=mr)
