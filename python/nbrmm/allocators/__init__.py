"""Allocator hooks that make CuPy, PyTorch and Numba allocate through nbrmm.

Each framework has its own module, imported explicitly (``import nbrmm`` imports none
of them, nor any framework):

- :mod:`nbrmm.allocators.cupy`: ``rmm_cupy_allocator`` and ``cupy_allocator(mr=None,
  stream=None)`` for ``cupy.cuda.set_allocator`` / ``cupy.cuda.using_allocator``.
- :mod:`nbrmm.allocators.torch`: ``rmm_torch_allocator`` and ``torch_allocator(mr=None)``,
  ``torch.cuda.memory.CUDAPluggableAllocator`` objects.
- :mod:`nbrmm.allocators.numba`: ``RMMNumbaManager`` and ``numba_manager(mr=None)``, Numba
  external memory managers (``NUMBA_CUDA_MEMORY_MANAGER=nbrmm.allocators.numba``).

Every hook frees each allocation to the resource that made it, on the stream it was made
on, even when the current device resource changes in between.
"""

__all__: list[str] = []
