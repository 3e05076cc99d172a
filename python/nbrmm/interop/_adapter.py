"""nbrmm resources as cuda.core resources: :class:`NbrmmMemoryResource`."""

from __future__ import annotations

import operator
import weakref
from typing import TYPE_CHECKING, Any, NoReturn, SupportsIndex

import cuda.core as cc

import nbrmm
from nbrmm import mr as nbrmm_mr
from nbrmm.interop._args import check_ptr, check_size, stream_handle, type_name
from nbrmm.memory import _register_hook
from nbrmm.interop._streams import CUDA_CORE_STREAM_TYPES, to_cuda_core_stream

if TYPE_CHECKING:
    from nbrmm._typing import CudaStreamLike

_from_handle = cc.Buffer.from_handle
#: DeviceMemoryResource.allocate as nbrmm defines it (a resource written in Python
#: overrides it, and takes nbrmm Streams).
_NBRMM_ALLOCATE = nbrmm_mr.DeviceMemoryResource.allocate

_MANAGED_TYPES = (nbrmm_mr.ManagedMemoryResource, nbrmm_mr.experimental.CudaAsyncManagedMemoryResource)
#: How far the properties are looked for along ``upstream_mr`` (a Python resource may say
#: anything).
_CHAIN_LIMIT = 1000


def _mirrored_properties(mr: nbrmm_mr.DeviceMemoryResource) -> tuple[int, bool, bool, bool]:
    """(device_id, is_device_accessible, is_host_accessible, is_managed) of the memory
    that the nbrmm resource ``mr`` hands out.

    Adaptors hand out their upstream's memory, so the chain of ``upstream_mr`` is followed
    down to a cuda.core resource (which says what its memory is) or to a managed-memory
    resource.
    """
    managed = False
    link: object = mr
    for _ in range(_CHAIN_LIMIT):
        if link is None:
            break
        if isinstance(link, cc.MemoryResource):
            try:
                device_id = link.device_id
            except Exception:  # noqa: BLE001 - e.g. pinned host memory is bound to no device
                device_id = -1
            return (device_id, bool(link.is_device_accessible), bool(link.is_host_accessible),
                    managed or bool(link.is_managed))
        managed = managed or isinstance(link, _MANAGED_TYPES)
        link = getattr(link, "upstream_mr", None)
    host = bool(mr.is_host_accessible) or managed
    return mr.device, bool(mr.is_device_accessible), host, managed


def _optional_bool(value: bool | None, param: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{param}: expected a bool or None, got {type_name(value)}")
    return value


#: Every NbrmmMemoryResource, to detach from nbrmm at interpreter exit (see detach_all).
_adapters: weakref.WeakSet[NbrmmMemoryResource] = weakref.WeakSet()


def detach_all() -> None:
    """At interpreter exit, detaches every adapter from its nbrmm resource: it allocates
    no more, and frees nothing (memory cuda.core still holds then goes with the process).

    cuda.core never frees the buffers still alive when the interpreter shuts down, and so
    keeps their memory resources for good; an adapter kept that way would keep its nbrmm
    resource (and all it refers to) past nbrmm's own teardown.
    """
    for adapter in list(_adapters):
        cc.MemoryResource.__setattr__(adapter, "upstream_mr", None)


class NbrmmMemoryResource(cc.MemoryResource):  # type: ignore[misc]  # a base of type Any
    """A cuda.core ``MemoryResource`` that allocates from an nbrmm resource.

    ``allocate(size, stream=s)`` takes ``size`` bytes from ``mr`` ordered on ``s`` and
    returns a cuda.core ``Buffer`` whose ``memory_resource`` is this object; closing or
    collecting the buffer gives the memory back to ``mr``, ordered on the stream cuda.core
    orders it on (the allocation's stream, or the one given to ``Buffer.close``). Use it
    as a cuda.core ``Device``'s ``memory_resource`` to make code written for cuda.core
    allocate from nbrmm.

    Parameters
    ----------
    mr : nbrmm.mr.DeviceMemoryResource, optional
        The resource. By default the current device resource, read from librmm's
        per-device map now (later changes of the current resource do not apply).
    device_id, is_device_accessible, is_host_accessible, is_managed : optional
        What cuda.core reports for the memory. By default they mirror ``mr``:
        ``device_id`` is ``mr.device`` (-1 where ``is_device_accessible=False`` is
        given), the memory is device-accessible, host-accessible when ``mr`` says so,
        and managed when ``mr`` is (or adapts) a managed-memory resource or wraps a
        cuda.core resource that is. Give them for resources nbrmm
        cannot see into, e.g. a ``CallbackMemoryResource`` over host memory.

    Attributes
    ----------
    upstream_mr : nbrmm.mr.DeviceMemoryResource
        The nbrmm resource (kept alive by this object and by every buffer it returns).
    device_id : int
    is_device_accessible, is_host_accessible, is_managed : bool

    Raises
    ------
    TypeError, ValueError
        If an argument is not of the kind described (the message names it).

    Notes
    -----
    Each allocation is one call of ``mr.allocate`` and each free one of
    ``mr.deallocate``. For nbrmm's own resources these record each allocation with ``mr``
    until it is freed, so a pointer is freed once, to the resource that allocated it,
    whatever ``deallocate`` is called with; a resource written in Python serves both
    itself.

    ``stream`` may also be any object implementing ``__cuda_stream__`` (an
    ``nbrmm.Stream``, a CuPy or PyTorch stream); it is converted with
    :func:`to_cuda_core_stream`. As with cuda.core's own resources, a buffer allocated on
    the default stream records that stream for its deallocation, which needs a CUDA
    context current in the calling thread (``Device.set_current()``) unless
    ``is_device_accessible`` is False.
    """

    __slots__ = (
        "upstream_mr",
        "device_id",
        "is_device_accessible",
        "is_host_accessible",
        "is_managed",
        "_handing_over",
        "_takes_nbrmm_streams",
        "__weakref__",
    )
    upstream_mr: nbrmm_mr.DeviceMemoryResource | None
    device_id: int
    is_device_accessible: bool
    is_host_accessible: bool
    is_managed: bool
    #: Memory ``allocate`` is handing to cuda.core's ``Buffer.from_handle`` while that call
    #: runs: True, or False once cuda.core gave it back through ``deallocate`` (it made a
    #: Buffer and dropped it), so that ``allocate`` does not give it back again when
    #: ``from_handle`` raises. (A dict's single operations are atomic, with the GIL and in
    #: free-threaded builds; one address is live in one allocation at a time.)
    _handing_over: dict[int, bool]
    #: ``mr`` is written in Python: its methods take ``nbrmm.Stream`` objects, as nbrmm
    #: passes them (nbrmm's own methods read any stream object).
    _takes_nbrmm_streams: bool

    def __init__(
        self,
        mr: nbrmm_mr.DeviceMemoryResource | None = None,
        *,
        device_id: int | None = None,
        is_device_accessible: bool | None = None,
        is_host_accessible: bool | None = None,
        is_managed: bool | None = None,
    ) -> None:
        if mr is None:
            mr = nbrmm_mr.get_current_device_resource()
        elif not isinstance(mr, nbrmm_mr.DeviceMemoryResource):
            hint = (
                " (a cuda.core resource is used as it is; nbrmm takes it through "
                "from_cuda_core_memory_resource)"
                if isinstance(mr, cc.MemoryResource)
                else ""
            )
            raise TypeError(
                f"mr: expected an nbrmm.mr.DeviceMemoryResource, got {type_name(mr)}{hint}"
            )
        if device_id is not None:
            if isinstance(device_id, bool) or not isinstance(device_id, int):
                raise TypeError(
                    f"device_id: expected an int >= -1 or None, got {type_name(device_id)}"
                )
            if not -1 <= device_id < 1 << 31:
                raise ValueError(f"device_id: expected -1 or a device ordinal, got {device_id}")
        mirrored = _mirrored_properties(mr)
        given = (
            device_id,
            _optional_bool(is_device_accessible, "is_device_accessible"),
            _optional_bool(is_host_accessible, "is_host_accessible"),
            _optional_bool(is_managed, "is_managed"),
        )
        values: list[Any] = [m if g is None else g for m, g in zip(mirrored, given)]
        if device_id is None and not values[1]:
            values[0] = -1  # memory no device can access belongs to no device
        init = super().__setattr__
        init("upstream_mr", mr)
        for name, value in zip(
            ("device_id", "is_device_accessible", "is_host_accessible", "is_managed"), values
        ):
            init(name, value)
        init("_handing_over", {})
        init("_takes_nbrmm_streams", type(mr).allocate is not _NBRMM_ALLOCATE)
        _adapters.add(self)

    def allocate(self, size: int, *, stream: CudaStreamLike) -> cc.Buffer:
        """Allocate ``size`` bytes from the nbrmm resource, ordered on ``stream``.

        Parameters
        ----------
        size : int
            Bytes to allocate.
        stream : cuda.core.Stream, cuda.core.graph.GraphBuilder or stream-like object
            The stream the allocation is ordered on; the buffer's deallocation is ordered
            on it too unless ``Buffer.close`` is given another.

        Returns
        -------
        cuda.core.Buffer
            The memory; its ``memory_resource`` is this object.

        Raises
        ------
        TypeError, ValueError
            If ``size`` is not an int in ``[0, 2**64)``, or ``stream`` is not stream-like
            (nothing is allocated then).
        MemoryError
            If the nbrmm resource cannot allocate (``nbrmm.OutOfMemory`` when out of
            memory).
        RuntimeError
            If the interpreter is shutting down.
        """
        if type(size) is not int or not 0 <= size < 1 << 64:
            size = check_size(size)  # a str, bool, float... is refused; NumPy's ints taken
        if not isinstance(stream, CUDA_CORE_STREAM_TYPES):
            device = self.device_id
            stream = to_cuda_core_stream(stream, device=device if device >= 0 else None)
        mr = self.upstream_mr
        if mr is None:
            raise RuntimeError(
                "the interpreter is shutting down: nbrmm no longer allocates for cuda.core"
            )
        # nbrmm's own methods read any stream object (the stub says Stream: Any here).
        on: Any = nbrmm.Stream(stream) if self._takes_nbrmm_streams else stream
        if size == 0:
            ptr = 0  # (as nbrmm's resources give 0 bytes: no memory, no call of the resource)
        else:
            ptr = mr.allocate(size, on)
        if self._takes_nbrmm_streams:  # a resource in Python: its pointer, checked
            ptr = _pointer_from(mr, ptr, size, on)
        handing_over = self._handing_over
        handing_over[ptr] = True
        try:
            buffer = _from_handle(ptr, size, self, stream=stream)
        except BaseException:
            if handing_over.pop(ptr, False):
                _give_back(mr, ptr, size, on)  # memory cuda.core never took
            raise
        del handing_over[ptr]
        return buffer

    def deallocate(self, ptr: int, size: int, *, stream: CudaStreamLike) -> None:
        """Give memory back to the nbrmm resource, ordered on ``stream``.

        cuda.core calls this when a buffer from :meth:`allocate` is closed or collected.

        Parameters
        ----------
        ptr : int
            The buffer's pointer.
        size : int
            The buffer's size.
        stream : cuda.core.Stream or stream-like object
            The stream the deallocation is ordered on.

        Raises
        ------
        TypeError, ValueError
            If an argument is not of its kind, or ``ptr`` is not memory of this resource
            that is still allocated, or ``size`` is not its size (nothing is freed then).
        """
        if type(ptr) is not int or not 0 <= ptr < 1 << 64:
            ptr = check_ptr(ptr)
        if type(size) is not int or not 0 <= size < 1 << 64:
            size = check_size(size)
        if type(stream) is not cc.Stream:
            stream_handle(stream)  # a clear error naming the parameter
        mr = self.upstream_mr
        if mr is None:
            return  # detached at interpreter exit: nbrmm frees nothing more for cuda.core
        if size == 0 and ptr == 0:
            return  # what allocate(0) gave: nothing to free
        handing_over = self._handing_over
        noted = handing_over and ptr in handing_over
        if noted:
            handing_over[ptr] = False  # given back: allocate must not give it back again
        on: Any = nbrmm.Stream(stream) if self._takes_nbrmm_streams else stream
        try:
            mr.deallocate(ptr, size, on)
        except BaseException:
            if noted:
                handing_over[ptr] = True  # nothing was freed
            raise

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        # cuda.core's base pickles only its own state: a copy would have no nbrmm resource.
        raise TypeError(f"cannot pickle or copy {type(self).__name__!r} object")

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} attributes are read-only ({name})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} attributes are read-only ({name})")

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} over {self.upstream_mr!r} device_id={self.device_id}>"
        )


def _pointer_from(
    mr: nbrmm_mr.DeviceMemoryResource, ptr: object, size: int, stream: Any
) -> int:
    """What a resource written in Python returned from ``allocate``, checked as nbrmm checks
    it on its own paths: an int, a pointer value, not null, aligned to 256 bytes (a
    misaligned block is given back first)."""
    name = f"{type(mr).__name__}.allocate()"
    value: int | None = None
    if not isinstance(ptr, bool):
        try:
            value = operator.index(ptr)  # type: ignore[arg-type]
        except TypeError:
            pass
    if value is None:
        raise TypeError(f"{name} must return the pointer as an int, got {type_name(ptr)}")
    if not 0 <= value < 1 << 64:
        raise nbrmm.InvalidArgumentError(f"{name} returned {value}, which is not a pointer value")
    if value == 0 and size != 0:
        raise nbrmm.InvalidArgumentError(
            f"{name} returned a null pointer for {size} bytes (raise MemoryError when it "
            "cannot allocate)"
        )
    if value % 256 != 0:
        _give_back(mr, value, size, stream)
        raise nbrmm.InvalidArgumentError(
            f"{name} returned {value:#x}, which is not aligned to 256 bytes (librmm's "
            "resources guarantee 256-byte alignment)"
        )
    return value


def _give_back(
    mr: nbrmm_mr.DeviceMemoryResource, ptr: int, size: int, stream: Any
) -> None:
    """Frees memory that no Buffer took, on ``stream`` or, where that stream is no
    longer readable, on the default stream (no work ever used the memory)."""
    try:
        mr.deallocate(ptr, size, stream)
    except Exception:  # noqa: BLE001 - the caller's error is the one to report
        try:
            mr.deallocate(ptr, size, nbrmm.DEFAULT_STREAM)
        except Exception:  # noqa: BLE001 - freed after all, or lost with the first error
            pass


# The memory history attributes what this adapter allocates to cuda.core.
_register_hook(NbrmmMemoryResource.allocate, "cuda.core")
