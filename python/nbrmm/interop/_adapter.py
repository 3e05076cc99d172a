"""nbrmm resources as cuda.core resources: :class:`NbrmmMemoryResource`."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, SupportsIndex

import cuda.core as cc

import nbrmm
from nbrmm import mr as nbrmm_mr
from nbrmm.interop._args import check_ptr, check_size, stream_handle, type_name
from nbrmm.interop._streams import CUDA_CORE_STREAM_TYPES, to_cuda_core_stream

if TYPE_CHECKING:
    from nbrmm._typing import CudaStreamLike

# nbrmm's raw allocation and free, which record each allocation with its resource (and
# keep the resource alive) until it is freed: so a pointer goes back once, to the resource
# that allocated it, whatever calls deallocate with it. Called as the base class's methods,
# also for resources written in Python, whose own methods nbrmm then calls.
# (Typed loosely: they take any stream-like object, the stub names nbrmm's Stream.)
_raw_allocate: Callable[..., int] = nbrmm_mr.DeviceMemoryResource.allocate
_raw_deallocate: Callable[..., None] = nbrmm_mr.DeviceMemoryResource.deallocate
_from_handle = cc.Buffer.from_handle

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


class _Handover:
    __slots__ = ("ptr", "given_back")

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.given_back = False


class _Handovers:
    """The memory an adapter's ``allocate`` is handing to cuda.core's
    ``Buffer.from_handle``, while that call runs.

    ``from_handle`` may raise before a Buffer took the memory (allocate then gives it
    back), or make the Buffer, drop it and raise (cuda.core gave the memory back through
    ``deallocate``, which notes it here, so that allocate does not give it back again).
    """

    __slots__ = ("_lock", "open")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.open: list[_Handover] = []

    def begin(self, ptr: int) -> _Handover:
        handover = _Handover(ptr)
        with self._lock:
            self.open.append(handover)
        return handover

    def end(self, handover: _Handover) -> bool:
        """Ends ``handover``: whether its memory was given back meanwhile."""
        with self._lock:
            self.open.remove(handover)
        return handover.given_back

    def give_back(self, ptr: int) -> _Handover | None:
        """Notes that the memory at ``ptr`` was given back (the newest handover of it)."""
        with self._lock:
            for handover in reversed(self.open):
                if handover.ptr == ptr and not handover.given_back:
                    handover.given_back = True
                    return handover
        return None


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
    Each allocation is an allocation of ``mr.allocate`` as
    ``nbrmm.mr.DeviceMemoryResource`` defines it: nbrmm records it with ``mr`` until
    it is freed, so a pointer is freed once, to the resource that allocated it, whatever
    ``deallocate`` is called with.

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
        "_handovers",
        "__weakref__",
    )
    upstream_mr: nbrmm_mr.DeviceMemoryResource | None
    device_id: int
    is_device_accessible: bool
    is_host_accessible: bool
    is_managed: bool
    _handovers: _Handovers

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
        init("_handovers", _Handovers())
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
        size = check_size(size)  # a str, bool, float... is refused; NumPy's ints taken
        if not isinstance(stream, CUDA_CORE_STREAM_TYPES):
            device = self.device_id
            stream = to_cuda_core_stream(stream, device=device if device >= 0 else None)
        mr = self.upstream_mr
        if mr is None:
            raise RuntimeError(
                "the interpreter is shutting down: nbrmm no longer allocates for cuda.core"
            )
        ptr = _raw_allocate(mr, size, stream)
        handovers = self._handovers
        handover = handovers.begin(ptr)
        try:
            buffer = _from_handle(ptr, size, self, stream=stream)
        except BaseException:
            if not handovers.end(handover):
                _give_back(mr, ptr, size, stream)  # memory cuda.core never took
            raise
        handovers.end(handover)
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
        ptr = check_ptr(ptr)
        size = check_size(size)
        if type(stream) is not cc.Stream:
            stream_handle(stream)  # a clear error naming the parameter
        mr = self.upstream_mr
        if mr is None:
            return  # detached at interpreter exit: nbrmm frees nothing more for cuda.core
        handovers = self._handovers
        noted = handovers.give_back(ptr) if handovers.open else None
        try:
            _raw_deallocate(mr, ptr, size, stream)
        except BaseException:
            if noted is not None:
                noted.given_back = False  # nothing was freed
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


def _give_back(
    mr: nbrmm_mr.DeviceMemoryResource, ptr: int, size: int, stream: CudaStreamLike
) -> None:
    """Frees memory that no Buffer took, on ``stream`` or, where that stream is no
    longer readable, on the default stream (no work ever used the memory)."""
    try:
        _raw_deallocate(mr, ptr, size, stream)
    except Exception:  # noqa: BLE001 - the caller's error is the one to report
        try:
            _raw_deallocate(mr, ptr, size, nbrmm.DEFAULT_STREAM)
        except Exception:  # noqa: BLE001 - freed after all, or lost with the first error
            pass
