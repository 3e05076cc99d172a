"""A pool of CUDA streams (rmm's ``rmm.pylibrmm.cuda_stream_pool``)."""

from nbrmm._nbrmm import CudaStreamPool

__all__ = ["CudaStreamPool"]
