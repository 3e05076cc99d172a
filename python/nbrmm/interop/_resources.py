"""cuda.core resources as nbrmm resources (:class:`CudaCorePoolResource`,
:class:`CudaCoreMemoryResource`), and the conversions of resources both ways."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, NoReturn, cast

import cuda.core as cc

import nbrmm
from nbrmm import mr as nbrmm_mr
from nbrmm.interop._adapter import NbrmmMemoryResource
from nbrmm.interop._args import check_ptr, check_size, stream_handle, type_name
from nbrmm.interop._streams import cuda_core_stream_for_nbrmm

if TYPE_CHECKING:
    from nbrmm._typing import CudaStreamLike

#: cuda.core's memory pool resources, which expose the pool's handle.
POOL_TYPES: tuple[Any, ...] = tuple(
    getattr(cc, name)
    for name in ("DeviceMemoryResource", "ManagedMemoryResource", "PinnedMemoryResource")
    if hasattr(cc, name)
)


class _PoolOwner:
    """What ``CudaAsyncViewMemoryResource`` keeps, in every C++ copy: the cuda.core pool
    resource, whose pool it allocates from."""

    __slots__ = ("resource",)

    def __init__(self, resource: cc.MemoryResource) -> None:
        self.resource = resource

    def pool_handle(self) -> int:
        return int(self.resource.handle)


class CudaCorePoolResource(nbrmm_mr.CudaAsyncViewMemoryResource):
    """An nbrmm resource that allocates from the memory pool of a cuda.core resource.

    C++ allocates with ``cudaMallocFromPoolAsync`` on the pool of a cuda.core
    ``DeviceMemoryResource``, ``ManagedMemoryResource`` or ``PinnedMemoryResource``, with
    no Python call per allocation. The cuda.core resource is kept alive by this object
    and by every C++ copy of it (in librmm's per-device map, buffers, adaptors), so the
    pool outlives every use; memory allocated by either library returns to the pool
    through either.

    Parameters
    ----------
    mr : cuda.core.DeviceMemoryResource, ManagedMemoryResource or PinnedMemoryResource
        The pool's resource. A ``DeviceMemoryResource`` must be on the current device.

    Raises
    ------
    TypeError
        If ``mr`` is not one of those.
    ValueError
        If ``mr`` is closed, is a mapping of another process's pool (which cannot
        allocate), or is on another device.

    Notes
    -----
    Do not ``close()`` ``mr`` while nbrmm uses the pool: closing releases cuda.core's
    handle of the pool (a pool that cuda.core owns is destroyed once its allocations are
    freed), and nbrmm's allocations would then fail.
    """

    def __init__(self, mr: cc.MemoryResource) -> None:
        if not isinstance(mr, POOL_TYPES):
            raise TypeError(
                "mr: expected a cuda.core DeviceMemoryResource, ManagedMemoryResource or "
                f"PinnedMemoryResource, got {type_name(mr)}"
            )
        if mr.is_closed:
            raise ValueError("mr: the cuda.core resource is closed")
        if mr.is_mapped:
            raise ValueError(
                "mr: the resource maps another process's pool, which cannot allocate"
            )
        device = nbrmm.get_current_device()
        if isinstance(mr, cc.DeviceMemoryResource) and mr.device_id != device:
            raise ValueError(
                f"mr: the pool is on device {mr.device_id} but the current device is "
                f"{device} (make it current with nbrmm.set_current_device)"
            )
        super().__init__(_PoolOwner(mr))
        self._cuda_core_resource = mr

    @property
    def upstream_mr(self) -> cc.MemoryResource:
        """The cuda.core resource whose pool this resource allocates from."""
        return self._cuda_core_resource

    @property
    def is_managed(self) -> bool:
        """Whether the pool's memory is managed (unified) memory."""
        return bool(self._cuda_core_resource.is_managed)


def _is_cuda_out_of_memory(exc: Exception) -> bool:
    """Whether ``exc`` is cuda.core's error for CUDA_ERROR_OUT_OF_MEMORY."""
    kind = type(exc)
    return (
        kind.__name__ == "CUDAError"
        and kind.__module__.startswith("cuda.")
        and "CUDA_ERROR_OUT_OF_MEMORY" in str(exc)
    )


#: Every CudaCoreMemoryResource, to let go of its cuda.core Buffers at exit (exit_all).
_cuda_core_resources: weakref.WeakSet[CudaCoreMemoryResource] = weakref.WeakSet()


def exit_all() -> None:
    """At interpreter exit, every CudaCoreMemoryResource lets go of its cuda.core Buffers.

    A cuda.core Buffer keeps its memory resource from C++, where the garbage collector
    cannot see it; one kept by an nbrmm resource (kept by a Buffer in a module's globals,
    which the cuda.core resource's class refers to) would form a cycle nothing breaks.
    The buffers are closed or kept as cuda.core does at exit; nbrmm frees nothing of
    theirs afterwards, and allocates from cuda.core no more.
    """
    for resource in list(_cuda_core_resources):
        resource._exit()


class CudaCoreMemoryResource(nbrmm_mr.DeviceMemoryResource):
    """An nbrmm resource that allocates from any cuda.core ``MemoryResource``, calling it
    from Python.

    Each allocation is a cuda.core ``Buffer`` from ``mr.allocate(nbytes, stream=...)``,
    kept by this resource until nbrmm frees the memory, which closes the buffer on the
    stream nbrmm frees it on. Like any Python resource, it can be a buffer's ``mr``, the
    upstream of any adaptor and the current device resource. For cuda.core's memory
    pools, :class:`CudaCorePoolResource` does the same in C++, without Python calls.

    Parameters
    ----------
    mr : cuda.core.MemoryResource
        The resource; kept alive by this object (and by every C++ copy of it).

    Raises
    ------
    TypeError
        If ``mr`` is not a cuda.core ``MemoryResource``.
    """

    def __init__(self, mr: cc.MemoryResource) -> None:
        if not isinstance(mr, cc.MemoryResource):
            raise TypeError(f"mr: expected a cuda.core.MemoryResource, got {type_name(mr)}")
        self._setup(mr)

    def _setup(self, mr: cc.MemoryResource | None) -> None:
        super().__init__()
        self._upstream = mr
        # pointer -> (the cuda.core Buffer that owns it, its stream's handle, that stream
        # for cuda.core)
        self._live: dict[int, tuple[cc.Buffer, int, cc.Stream]] = {}
        self._exited = False
        _cuda_core_resources.add(self)

    def _exit(self) -> None:
        """At interpreter exit: lets go of the cuda.core Buffers (see exit_all)."""
        self._exited = True
        self._live = {}

    @property
    def upstream_mr(self) -> cc.MemoryResource | None:
        """The cuda.core resource this resource allocates from."""
        return self._upstream

    @property
    def is_managed(self) -> bool:
        """Whether the memory is managed (unified) memory, as the cuda.core resource says."""
        return self._upstream is not None and bool(self._upstream.is_managed)

    @property
    def outstanding(self) -> int:
        """Number of allocations not yet freed."""
        return len(self._live)

    def allocate(self, nbytes: int, stream: CudaStreamLike | None = None) -> int:
        """Allocate ``nbytes`` bytes from the cuda.core resource, ordered on ``stream``.

        Parameters
        ----------
        nbytes : int
            Bytes to allocate (0 allocates nothing and returns 0).
        stream : nbrmm.Stream or stream-like object, optional
            The stream the allocation is ordered on; None (the default) is
            ``nbrmm.DEFAULT_STREAM``.

        Returns
        -------
        int
            The pointer.

        Raises
        ------
        TypeError, ValueError
            If ``nbytes`` is not an int in ``[0, 2**64)``, or the cuda.core resource
            returns something else than a cuda.core ``Buffer``.
        MemoryError
            If the cuda.core resource cannot allocate (``nbrmm.OutOfMemory`` for
            cuda.core's out-of-memory error) or returns an invalid buffer.
        RuntimeError
            If the interpreter is shutting down.
        """
        nbytes = check_size(nbytes, "nbytes")
        if nbytes == 0:
            return 0
        if stream is None:
            stream = nbrmm.DEFAULT_STREAM
        if self._upstream is None:
            raise MemoryError(
                "this resource lends one cuda.core Buffer and cannot allocate more (the "
                "Buffer has no memory_resource)"
            )
        if self._exited:
            raise RuntimeError(
                "the interpreter is shutting down: nbrmm no longer allocates from cuda.core"
            )
        cc_stream = cuda_core_stream_for_nbrmm(stream, self.device)
        try:
            buf = self._upstream.allocate(nbytes, stream=cc_stream)
        except MemoryError:
            raise
        except Exception as exc:
            if _is_cuda_out_of_memory(exc):
                raise nbrmm.OutOfMemory(f"the cuda.core resource is out of memory: {exc}") from exc
            raise
        if not isinstance(buf, cc.Buffer):
            raise TypeError(
                f"the cuda.core resource's allocate returned {type_name(buf)}, not a "
                "cuda.core.Buffer"
            )
        ptr, size = int(buf.handle), buf.size
        if ptr == 0 or ptr in self._live or size < nbytes:
            buf.close()  # on the stream it was allocated on
            raise MemoryError(
                f"the cuda.core resource returned an invalid buffer for {nbytes} bytes "
                f"(pointer {ptr:#x}, {size} bytes)"
            )
        self._live[ptr] = (buf, stream_handle(stream), cc_stream)
        return ptr

    def deallocate(self, ptr: int, nbytes: int, stream: CudaStreamLike | None = None) -> None:
        """Free memory from :meth:`allocate`: close its cuda.core Buffer on ``stream``.

        Parameters
        ----------
        ptr : int
            The pointer.
        nbytes : int
            The size given to :meth:`allocate`.
        stream : nbrmm.Stream or stream-like object, optional
            The stream the deallocation is ordered on; None (the default) is
            ``nbrmm.DEFAULT_STREAM``.

        Raises
        ------
        ValueError
            If ``ptr`` is not an allocation of this resource that is still live.
        """
        # nbrmm also frees here the buffers alive at interpreter exit, after the module's
        # globals are cleared: the common path uses none.
        entry = self._live.pop(ptr, None)
        if entry is None:
            if (ptr == 0 and nbytes == 0) or self._exited:
                return  # after exit, memory let go with its cuda.core Buffer
            self._not_live(ptr)
        buf, allocated_on, cc_stream = entry
        if stream is None:
            stream = nbrmm.DEFAULT_STREAM
        if not buf.is_device_accessible:
            buf.close()  # host memory: no stream to order on
            return
        if getattr(stream, "handle", None) != allocated_on:
            try:
                cc_stream = cuda_core_stream_for_nbrmm(stream, self.device)
            except BaseException:
                nbrmm.Stream(stream).synchronize()  # its work is done: any stream will do
                buf.close(cc_stream)
                raise
        buf.close(cc_stream)

    def _not_live(self, ptr: int) -> NoReturn:
        check_ptr(ptr)
        raise ValueError(f"ptr: {ptr:#x} is not a live allocation of this resource")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} over {self._upstream!r} device={self.device}>"


def to_cuda_core_memory_resource(
    mr: nbrmm_mr.DeviceMemoryResource | None = None,
    *,
    device_id: int | None = None,
    is_device_accessible: bool | None = None,
    is_host_accessible: bool | None = None,
    is_managed: bool | None = None,
) -> cc.MemoryResource:
    """A cuda.core ``MemoryResource`` that allocates from the nbrmm resource ``mr``.

    Parameters
    ----------
    mr : nbrmm.mr.DeviceMemoryResource, optional
        The resource; by default the current device resource (read now).
    device_id, is_device_accessible, is_host_accessible, is_managed : optional
        What cuda.core reports for the memory; see :class:`NbrmmMemoryResource`.

    Returns
    -------
    cuda.core.MemoryResource
        A :class:`NbrmmMemoryResource`; or, for a resource made by
        :func:`from_cuda_core_memory_resource` (and no property given), the cuda.core
        resource it was made from, which serves the same memory without a detour.

    Raises
    ------
    TypeError, ValueError
        If an argument is not of the kind described (the message names it).

    Examples
    --------
    >>> dev = cuda.core.Device(0)
    >>> dev.set_current()
    >>> dev.memory_resource = to_cuda_core_memory_resource(pool)
    """
    overrides = (device_id, is_device_accessible, is_host_accessible, is_managed)
    if (
        type(mr) in (CudaCorePoolResource, CudaCoreMemoryResource)
        and all(v is None for v in overrides)
    ):
        return cast("CudaCorePoolResource | CudaCoreMemoryResource", mr).upstream_mr
    return NbrmmMemoryResource(
        mr,
        device_id=device_id,
        is_device_accessible=is_device_accessible,
        is_host_accessible=is_host_accessible,
        is_managed=is_managed,
    )


def from_cuda_core_memory_resource(mr: cc.MemoryResource) -> nbrmm_mr.DeviceMemoryResource:
    """An nbrmm resource that allocates from the cuda.core resource ``mr``.

    Parameters
    ----------
    mr : cuda.core.MemoryResource
        The resource, kept alive by the result and by every C++ copy of it.

    Returns
    -------
    nbrmm.mr.DeviceMemoryResource
        For a memory pool (``DeviceMemoryResource``, ``ManagedMemoryResource``,
        ``PinnedMemoryResource``), a :class:`CudaCorePoolResource`, which allocates from
        the pool in C++; for a :class:`NbrmmMemoryResource`, the nbrmm resource it wraps;
        for any other resource, a :class:`CudaCoreMemoryResource`, which calls it.

    Raises
    ------
    TypeError
        If ``mr`` is not a cuda.core ``MemoryResource``.

    Examples
    --------
    >>> dmr = cuda.core.DeviceMemoryResource(0)
    >>> pool = nbrmm.mr.PoolMemoryResource(from_cuda_core_memory_resource(dmr), 1 << 26)
    """
    if isinstance(mr, NbrmmMemoryResource):
        upstream = mr.upstream_mr
        if upstream is None:
            raise RuntimeError(
                "mr: the interpreter is shutting down: the adapter let go of its nbrmm resource"
            )
        return upstream
    if isinstance(mr, POOL_TYPES):
        return CudaCorePoolResource(mr)
    return CudaCoreMemoryResource(mr)
