"""Interoperability with cuda.core: nbrmm's resources, buffers and streams as cuda.core's,
and cuda.core's as nbrmm's, without copying memory.

Resources
    :func:`to_cuda_core_memory_resource` (:class:`NbrmmMemoryResource`) makes any nbrmm
    resource a ``cuda.core.MemoryResource``, usable as a cuda.core ``Device``'s
    ``memory_resource``. :func:`from_cuda_core_memory_resource` makes a cuda.core resource
    an nbrmm one: a memory pool (``DeviceMemoryResource``, ``ManagedMemoryResource``,
    ``PinnedMemoryResource``) is used in C++ through its pool handle
    (:class:`CudaCorePoolResource`), any other resource through its Python methods
    (:class:`CudaCoreMemoryResource`).
Buffers
    :func:`to_cuda_core_buffer` and :func:`from_cuda_core_buffer` hand a buffer to the
    other library; each result keeps the original (and so its memory) alive.
Streams
    nbrmm accepts cuda.core streams wherever it takes a ``stream``, and cuda.core accepts
    ``nbrmm.Stream`` through :func:`to_cuda_core_stream` (both implement
    ``__cuda_stream__``).

Examples
--------
>>> import cuda.core, nbrmm, nbrmm.interop
>>> dev = cuda.core.Device(0)
>>> dev.set_current()
>>> arena = nbrmm.mr.ArenaMemoryResource(nbrmm.mr.CudaMemoryResource())
>>> dev.memory_resource = nbrmm.interop.to_cuda_core_memory_resource(arena)
>>> buf = dev.allocate(1 << 20, stream=dev.default_stream)   # from the arena
"""

import atexit as _atexit

try:
    import cuda.core as _cuda_core  # noqa: F401
except ImportError as exc:
    raise ImportError(
        "nbrmm.interop needs cuda.core 1.2 or later: pip install 'nbrmm[cuda-core]'. "
        f"Importing it failed: {exc}",
        name="cuda.core",
    ) from exc

from nbrmm._public import publish as _publish
from nbrmm.interop import _adapter, _buffers, _resources
from nbrmm.interop._adapter import NbrmmMemoryResource
from nbrmm.interop._buffers import BufferOwner, from_cuda_core_buffer, to_cuda_core_buffer
from nbrmm.interop._resources import (
    CudaCoreMemoryResource,
    CudaCorePoolResource,
    from_cuda_core_memory_resource,
    to_cuda_core_memory_resource,
)
from nbrmm.interop._streams import from_cuda_core_stream, to_cuda_core_stream

__all__ = [
    "BufferOwner",
    "CudaCoreMemoryResource",
    "CudaCorePoolResource",
    "NbrmmMemoryResource",
    "from_cuda_core_buffer",
    "from_cuda_core_memory_resource",
    "from_cuda_core_stream",
    "to_cuda_core_buffer",
    "to_cuda_core_memory_resource",
    "to_cuda_core_stream",
]


def _at_exit() -> None:
    """What nbrmm.interop lets go of at interpreter exit (before nbrmm's own teardown,
    whose exit handler was registered earlier), in this order: the nbrmm Buffers that
    cuda.core Buffers own go back to their resources (a CudaCoreMemoryResource still
    closes its cuda.core Buffers then); every CudaCoreMemoryResource lets go of the
    cuda.core Buffers it keeps; every NbrmmMemoryResource lets go of its nbrmm resource."""
    _buffers.release_owners()
    _resources.exit_all()
    _adapter.detach_all()


_atexit.register(_at_exit)

_publish("nbrmm.interop", globals(), __all__)
