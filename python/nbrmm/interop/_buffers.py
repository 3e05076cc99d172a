"""Buffers both ways, without copying: an nbrmm ``Buffer`` as a cuda.core ``Buffer``
(:class:`BufferOwner`) and a cuda.core ``Buffer`` as an nbrmm ``Buffer``."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import cuda.core as cc

import nbrmm
from nbrmm.interop._args import stream_handle, type_name
from nbrmm.interop._resources import CudaCoreMemoryResource

if TYPE_CHECKING:
    from nbrmm._typing import CudaStreamLike


class _LendingResource(CudaCoreMemoryResource):
    """The resource of an nbrmm Buffer over a cuda.core Buffer's memory: its first
    allocation is that memory (the Buffer is kept, not closed, until nbrmm frees it);
    later ones (growth, copies) come from the Buffer's own resource."""

    def __init__(self, buffer: cc.Buffer) -> None:
        self._setup(buffer.memory_resource)
        self._lent: cc.Buffer | None = buffer
        self._lent_ptr = int(buffer.handle)
        self._lent_pending = True

    def allocate(self, nbytes: int, stream: CudaStreamLike | None = None) -> int:
        if self._lent_pending and self._lent is not None and nbytes == self._lent.size:
            self._lent_pending = False
            return self._lent_ptr
        return super().allocate(nbytes, stream)

    def deallocate(self, ptr: int, nbytes: int, stream: CudaStreamLike | None = None) -> None:
        if self._lent is not None and not self._lent_pending and ptr == self._lent_ptr:
            self._lent = None  # cuda.core frees it when its last owner lets it go
            return
        super().deallocate(ptr, nbytes, stream)

    def _exit(self) -> None:
        super()._exit()
        self._lent = None

    def lent(self, buffer: nbrmm.Buffer) -> cc.Buffer | None:
        """The cuda.core Buffer behind the nbrmm ``buffer``, or None."""
        if (
            self._lent is not None
            and not self._lent_pending
            and not buffer.closed
            and buffer.ptr == self._lent_ptr
            and buffer.size == self._lent.size
        ):
            return self._lent
        return None


class BufferOwner:
    """The ``owner`` of a cuda.core Buffer made by :func:`to_cuda_core_buffer`: it keeps
    the nbrmm Buffer (its ``buffer``) alive.

    At interpreter exit nbrmm lets go of the nbrmm Buffer, as cuda.core never releases the
    owners of buffers still alive then.

    Parameters
    ----------
    buffer : nbrmm.Buffer
        The buffer to keep alive.
    """

    __slots__ = ("buffer", "__weakref__")

    def __init__(self, buffer: nbrmm.Buffer) -> None:
        self.buffer: nbrmm.Buffer | None = buffer

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.buffer!r}>"


#: Every BufferOwner, to let go of its nbrmm Buffer at interpreter exit.
_owners: weakref.WeakSet[BufferOwner] = weakref.WeakSet()


def release_owners() -> None:
    """At interpreter exit, every BufferOwner lets go of its nbrmm Buffer."""
    for owner in list(_owners):
        owner.buffer = None


def to_cuda_core_buffer(buffer: nbrmm.Buffer) -> cc.Buffer:
    """A cuda.core ``Buffer`` over the memory of an nbrmm ``Buffer``, without copying.

    The cuda.core Buffer keeps ``buffer`` alive (``owner.buffer``, see
    :class:`BufferOwner`) and frees nothing itself: the memory goes back to ``buffer.mr``
    on ``buffer.stream`` once neither object is referenced. Order work that other streams
    do on the memory before that, as with any consumer of ``__cuda_array_interface__``.
    Closing, resizing or growing ``buffer`` while the cuda.core Buffer is in use
    invalidates it.

    Parameters
    ----------
    buffer : nbrmm.Buffer
        An open buffer.

    Returns
    -------
    cuda.core.Buffer
        Same pointer and size; for a buffer made by :func:`from_cuda_core_buffer`, the
        cuda.core Buffer it was made from.

    Raises
    ------
    TypeError
        If ``buffer`` is not an ``nbrmm.Buffer``.
    ValueError
        If ``buffer`` is closed.
    """
    if not isinstance(buffer, nbrmm.Buffer):
        raise TypeError(f"buffer: expected an nbrmm.Buffer, got {type_name(buffer)}")
    if buffer.closed:
        raise ValueError("buffer: the buffer is closed")
    lender = buffer.mr
    if isinstance(lender, _LendingResource):
        original = lender.lent(buffer)
        if original is not None:
            return original
    owner = BufferOwner(buffer)
    _owners.add(owner)
    return cc.Buffer.from_handle(buffer.ptr, buffer.size, owner=owner)


def from_cuda_core_buffer(
    buffer: cc.Buffer, *, stream: CudaStreamLike | None = None
) -> nbrmm.Buffer:
    """An ``nbrmm.Buffer`` over the memory of a cuda.core ``Buffer``, without copying.

    The nbrmm Buffer keeps ``buffer`` alive until it is closed or collected, and then only
    lets go of it: cuda.core frees the memory, as it would have, once nothing references
    ``buffer`` any more. The nbrmm Buffer's ``mr`` is an nbrmm resource that takes further
    memory (growth, ``copy()``) from ``buffer.memory_resource``.

    Parameters
    ----------
    buffer : cuda.core.Buffer
        An open buffer.
    stream : nbrmm.Stream or stream-like object (e.g. a cuda.core Stream), optional
        The nbrmm Buffer's stream (the default stream when omitted).

    Returns
    -------
    nbrmm.Buffer
        Same pointer and size; for a buffer made by :func:`to_cuda_core_buffer`, the
        nbrmm Buffer it was made from.

    Raises
    ------
    TypeError
        If ``buffer`` is not a cuda.core ``Buffer`` or ``stream`` is not stream-like.
    ValueError
        If ``buffer`` is closed.
    """
    if not isinstance(buffer, cc.Buffer):
        raise TypeError(f"buffer: expected a cuda.core.Buffer, got {type_name(buffer)}")
    if buffer.is_closed:
        raise ValueError("buffer: the cuda.core Buffer is closed")
    owner = buffer.owner
    original = owner.buffer if isinstance(owner, BufferOwner) else None
    if (
        original is not None
        and not original.closed
        and original.ptr == int(buffer.handle)
        and original.size == buffer.size
    ):
        return original
    if stream is None:
        stream = nbrmm.DEFAULT_STREAM
    else:
        stream_handle(stream)  # a clear error naming the parameter
    return nbrmm.Buffer(buffer.size, mr=_LendingResource(buffer), stream=stream)
