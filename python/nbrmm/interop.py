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

from __future__ import annotations

import atexit as _atexit
import operator as _operator
import weakref as _weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, SupportsIndex, cast

try:
    import cuda.core as _cc
except ImportError as exc:
    raise ImportError(
        "nbrmm.interop needs cuda.core 1.2 or later: pip install 'nbrmm[cuda-core]'. "
        f"Importing it failed: {exc}",
        name="cuda.core",
    ) from exc

import nbrmm as _nbrmm
from nbrmm import _nbrmm as _ext
from nbrmm import mr as _mr

if TYPE_CHECKING:
    from nbrmm._typing import CudaStreamLike

#: This module. Its namespace refers to it, so that the interpreter clears the namespace at
#: exit (letting go of the Streams in it) also where something of it outlives the module,
#: such as a function that another library keeps.
_this_module = __import__("sys").modules[__name__]

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

# cuda.core has no type information: for type checkers its classes (_cc.Buffer, ...) are Any.
_CCBuffer = _cc.Buffer
_CCMemoryResource = _cc.MemoryResource
_CCStream = _cc.Stream
_from_handle = _cc.Buffer.from_handle
_LEGACY = _cc.LEGACY_DEFAULT_STREAM
_PER_THREAD = _cc.PER_THREAD_DEFAULT_STREAM
_graph: Any = getattr(_cc, "graph", None)
#: What cuda.core accepts as a ``stream``: its Stream, and a GraphBuilder (stream capture).
_CC_STREAM_TYPES = (_CCStream,) + (
    (_graph.GraphBuilder,) if getattr(_graph, "GraphBuilder", None) is not None else ()
)
#: cuda.core's memory pool resources, which expose the pool's handle.
_POOL_TYPES = tuple(
    getattr(_cc, name)
    for name in ("DeviceMemoryResource", "ManagedMemoryResource", "PinnedMemoryResource")
    if hasattr(_cc, name)
)
_MANAGED_TYPES = (_mr.ManagedMemoryResource, _mr.experimental.CudaAsyncManagedMemoryResource)

_NB_LEGACY = _nbrmm.LEGACY_DEFAULT_STREAM
#: nbrmm's streams for the handles of the default streams (0 is the legacy default stream
#: for the CUDA runtime, as for nbrmm).
_NB_DEFAULTS: dict[int, _nbrmm.Stream] = {
    0: _nbrmm.DEFAULT_STREAM,
    1: _NB_LEGACY,
    2: _nbrmm.PER_THREAD_DEFAULT_STREAM,
}
#: nbrmm Streams by handle: non-owning views of the handles cuda.core passes, made once.
#: A view refers to whichever stream has the handle, exactly as the handle itself does.
_nb_by_handle = dict(_NB_DEFAULTS)
_NB_BY_HANDLE_LIMIT = 256


class _StreamHandle:
    """A raw stream handle with the ``__cuda_stream__`` protocol (owns nothing)."""

    __slots__ = ("handle",)

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def _type_name(obj: object) -> str:
    return type(obj).__name__


def _stream_handle(stream: object, param: str = "stream") -> int:
    """The ``cudaStream_t`` of any stream-like object, as an int."""
    if isinstance(stream, _nbrmm.Stream):
        return stream.handle
    proto = getattr(stream, "__cuda_stream__", None)
    if stream is None or proto is None:
        raise TypeError(
            f"{param}: expected a cuda.core Stream or an object implementing "
            f"__cuda_stream__, got {_type_name(stream)}"
        )
    value = proto()
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or isinstance(value[1], bool)
        or not isinstance(value[1], int)
    ):
        raise TypeError(f"{param}: __cuda_stream__() must return a (version, handle) tuple")
    handle = value[1]
    if not 0 <= handle < 1 << 64:
        raise ValueError(f"{param}: __cuda_stream__() returned {handle}, not a stream handle")
    return handle


def _nb_stream(stream: object) -> _nbrmm.Stream:
    """An nbrmm Stream for the handle of ``stream`` (a view, cached by handle)."""
    handle = _stream_handle(stream)
    nb = _nb_by_handle.get(handle)
    if nb is None:
        if len(_nb_by_handle) >= _NB_BY_HANDLE_LIMIT:
            _nb_by_handle.clear()
            _nb_by_handle.update(_NB_DEFAULTS)
        nb = _nb_by_handle[handle] = _nbrmm.Stream(_StreamHandle(handle))
    return nb


def _check_size(size: SupportsIndex, param: str = "size") -> int:
    """``size`` as an int (a non-negative integer below 2**64), or the error for it."""
    if isinstance(size, bool):
        raise TypeError(f"{param}: expected an int, got bool")
    try:
        size = _operator.index(size)  # an int exactly, also for int subclasses and NumPy's
    except TypeError:
        raise TypeError(f"{param}: expected an int, got {_type_name(size)}") from None
    if size < 0:
        raise ValueError(f"{param}: must be non-negative, got {size}")
    if size >= 1 << 64:
        raise ValueError(f"{param}: {size} bytes is too large")
    return size


def _check_ptr(ptr: SupportsIndex) -> int:
    """``ptr`` as an int (a pointer value in ``[0, 2**64)``), or the error for it."""
    if isinstance(ptr, bool):
        raise TypeError("ptr: expected the pointer as an int, got bool")
    try:
        ptr = _operator.index(ptr)  # an int exactly, also for int subclasses and NumPy's
    except TypeError:
        raise TypeError(f"ptr: expected the pointer as an int, got {_type_name(ptr)}") from None
    if not 0 <= ptr < 1 << 64:
        raise ValueError(f"ptr: not a pointer value: {ptr}")
    return ptr


# --------------------------------------------------------------------------------------
# Streams
# --------------------------------------------------------------------------------------


def to_cuda_core_stream(
    stream: CudaStreamLike, *, device: int | _cc.Device | None = None
) -> _cc.Stream:
    """A cuda.core ``Stream`` for any stream-like object.

    Parameters
    ----------
    stream : nbrmm.Stream or object implementing ``__cuda_stream__``
        The stream. A cuda.core ``Stream`` is returned as it is, and so is the cuda.core
        stream an ``nbrmm.Stream`` wraps.
    device : int or cuda.core.Device, optional
        The device whose ``create_stream`` wraps the stream; by default cuda.core's
        current device. Not used for the default streams.

    Returns
    -------
    cuda.core.Stream
        ``LEGACY_DEFAULT_STREAM`` or ``PER_THREAD_DEFAULT_STREAM`` for the default streams
        (handles 0 and 1, and 2); otherwise a stream made by ``Device.create_stream``,
        which keeps ``stream`` alive. cuda.core needs that device to have been made
        current in the calling thread (``Device.set_current()``).

    Raises
    ------
    TypeError
        If ``stream`` is not stream-like.
    """
    if isinstance(stream, _CCStream):
        return stream
    if isinstance(stream, _nbrmm.Stream) and isinstance(stream.owner, _CCStream):
        return stream.owner
    handle = _stream_handle(stream)
    if handle in (0, 1):
        return _LEGACY
    if handle == 2:
        return _PER_THREAD
    dev = device if isinstance(device, _cc.Device) else _cc.Device(device)
    return dev.create_stream(stream)


def from_cuda_core_stream(stream: CudaStreamLike) -> _nbrmm.Stream:
    """An ``nbrmm.Stream`` for a cuda.core ``Stream`` (or any stream-like object).

    nbrmm takes cuda.core streams directly wherever it takes a ``stream``; this is the
    same conversion, for code that wants an ``nbrmm.Stream`` object.

    Parameters
    ----------
    stream : cuda.core.Stream or object implementing ``__cuda_stream__``
        The stream; an ``nbrmm.Stream`` is returned as it is.

    Returns
    -------
    nbrmm.Stream
        A view of the stream that keeps ``stream`` alive (``.owner`` is ``stream``).
    """
    if isinstance(stream, _nbrmm.Stream):
        return stream
    _stream_handle(stream)  # a clear error naming the parameter
    return _nbrmm.Stream(stream)


def _cc_stream_for_nbrmm(stream: CudaStreamLike, device: int) -> _cc.Stream:
    """A cuda.core stream for a stream nbrmm passes to a resource (a view of a handle,
    valid for the call)."""
    handle = _stream_handle(stream)
    if handle in (0, 1):
        return _LEGACY
    if handle == 2:
        return _PER_THREAD
    owner = stream.owner if isinstance(stream, _nbrmm.Stream) else stream
    if isinstance(owner, _CCStream):
        return owner
    try:
        return _cc.Device(device if device >= 0 else None).create_stream(_StreamHandle(handle))
    except Exception:  # noqa: BLE001 - cuda.core's device is not set up in this thread
        return _CCStream.from_handle(handle)


# --------------------------------------------------------------------------------------
# nbrmm resources for cuda.core
# --------------------------------------------------------------------------------------


def _mirrored_properties(mr: _mr.DeviceMemoryResource) -> tuple[int, bool, bool, bool]:
    """(device_id, is_device_accessible, is_host_accessible, is_managed) of the memory
    that the nbrmm resource ``mr`` hands out.

    Adaptors hand out their upstream's memory, so the chain of ``upstream_mr`` is followed
    down to a resource over cuda.core (whose resource says what its memory is) or to a
    managed-memory resource.
    """
    managed = False
    link: object = mr
    for _ in range(_CHAIN_LIMIT):
        if link is None:
            break
        if isinstance(link, (CudaCorePoolResource, CudaCoreMemoryResource)):
            cc = link.upstream_mr
            if cc is None:
                break
            try:
                device_id = cc.device_id
            except Exception:  # noqa: BLE001 - e.g. pinned host memory is bound to no device
                device_id = -1
            return (device_id, bool(cc.is_device_accessible), bool(cc.is_host_accessible),
                    managed or bool(cc.is_managed))
        managed = managed or isinstance(link, _MANAGED_TYPES)
        link = getattr(link, "upstream_mr", None)
    host = bool(mr.is_host_accessible) or managed
    return mr.device, bool(mr.is_device_accessible), host, managed


#: How far _mirrored_properties follows upstream_mr (a Python resource may say anything).
_CHAIN_LIMIT = 1000


def _optional_bool(value: bool | None, param: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{param}: expected a bool or None, got {_type_name(value)}")
    return value


#: Every NbrmmMemoryResource, to detach from nbrmm at interpreter exit (see _detach_all).
_adapters: _weakref.WeakSet[NbrmmMemoryResource] = _weakref.WeakSet()


def _refuse_after_exit(*args: object) -> NoReturn:
    raise RuntimeError("the interpreter is shutting down: nbrmm no longer allocates for cuda.core")


def _leak_after_exit(*args: object) -> None:
    """cuda.core frees no buffer once the interpreter shuts down; one freed by code that
    runs after nbrmm detached leaks, as cuda.core's own do then."""


def _detach(adapter: NbrmmMemoryResource) -> None:
    """Drops the adapter's references to nbrmm: it allocates no more, and frees nothing."""
    for name, value in (
        ("_core", None),
        ("_allocate", _refuse_after_exit),
        ("_deallocate", _leak_after_exit),
        ("upstream_mr", None),
    ):
        getattr(NbrmmMemoryResource, name).__set__(adapter, value)


def _detach_all() -> None:
    """At interpreter exit, detaches every adapter from nbrmm.

    cuda.core never frees the buffers still alive when the interpreter shuts down, and so
    keeps their memory resources for good; an adapter kept that way would keep its nbrmm
    resource (and all it refers to) past nbrmm's own teardown.
    """
    for adapter in list(_adapters):
        _detach(adapter)


_atexit.register(_detach_all)


class NbrmmMemoryResource(_cc.MemoryResource):  # type: ignore[misc]  # a base of type Any
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

    Notes
    -----
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
        "_core",
        "_allocate",
        "_deallocate",
        "__weakref__",
    )
    upstream_mr: _mr.DeviceMemoryResource
    device_id: int
    is_device_accessible: bool
    is_host_accessible: bool
    is_managed: bool
    #: ``upstream_mr`` where its allocate and deallocate are nbrmm's own, which the
    #: methods then call from C++ (src/cuda_core_adapter.cpp); else None.
    _core: _mr.DeviceMemoryResource | None
    _allocate: Callable[[int, _nbrmm.Stream], int]
    _deallocate: Callable[[int, int, _nbrmm.Stream], None]

    def __init__(
        self,
        mr: _mr.DeviceMemoryResource | None = None,
        *,
        device_id: int | None = None,
        is_device_accessible: bool | None = None,
        is_host_accessible: bool | None = None,
        is_managed: bool | None = None,
    ) -> None:
        if mr is None:
            mr = _mr.get_current_device_resource()
        elif not isinstance(mr, _mr.DeviceMemoryResource):
            hint = (
                " (a cuda.core resource is used as it is; nbrmm takes it through "
                "from_cuda_core_memory_resource)"
                if isinstance(mr, _CCMemoryResource)
                else ""
            )
            raise TypeError(
                f"mr: expected an nbrmm.mr.DeviceMemoryResource, got {_type_name(mr)}{hint}"
            )
        if device_id is not None:
            if isinstance(device_id, bool) or not isinstance(device_id, int):
                raise TypeError(
                    f"device_id: expected an int >= -1 or None, got {_type_name(device_id)}"
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
        values: list[int | bool] = [m if g is None else g for m, g in zip(mirrored, given)]
        device_accessible = values[1]
        if device_id is None and not device_accessible:
            values[0] = -1  # memory no device can access belongs to no device
        init = super().__setattr__
        init("upstream_mr", mr)
        for name, value in zip(
            ("device_id", "is_device_accessible", "is_host_accessible", "is_managed"), values
        ):
            init(name, value)
        base = _mr.DeviceMemoryResource
        own = type(mr).allocate is base.allocate and type(mr).deallocate is base.deallocate
        init("_core", mr if own else None)
        init("_allocate", mr.allocate)
        init("_deallocate", mr.deallocate)
        _adapters.add(self)

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        # cuda.core's base pickles only its own state: a copy would have no nbrmm resource.
        raise TypeError(f"cannot pickle or copy {type(self).__name__!r} object")

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} attributes are read-only ({name})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} attributes are read-only ({name})")

    if TYPE_CHECKING:
        # Written in src/cuda_core_adapter.cpp (with their documentation) and set on the
        # class below. Both run in C++ for a cuda.core Stream, int arguments and a
        # resource whose allocate/deallocate are nbrmm's own; else in the general
        # methods that follow.

        def allocate(self, size: int, *, stream: CudaStreamLike) -> _cc.Buffer: ...

        def deallocate(self, ptr: int, size: int, *, stream: CudaStreamLike) -> None: ...

    def _allocate_general(
        self, size: int, *, stream: CudaStreamLike
    ) -> tuple[int, CudaStreamLike, _nbrmm.Stream]:
        """The arguments of :meth:`allocate` for any arguments and resource (and every
        error of theirs): ``(size, the stream for cuda.core, the stream for nbrmm)``, with
        which the method allocates from ``_allocate`` and makes the Buffer."""
        # Checked here, not left to the resource: one written in Python may take anything.
        size = _check_size(size)  # a bool, str, float... is refused; NumPy's ints taken
        if stream is _LEGACY:
            nb_stream = _NB_LEGACY
        elif type(stream) is _CCStream:
            try:
                nb_stream = _nb_by_handle[stream.__cuda_stream__()[1]]
            except KeyError:
                nb_stream = _nb_stream(stream)
        else:
            stream, nb_stream = self._streams(stream)
        return size, stream, nb_stream

    def _deallocate_general(self, ptr: int, size: int, *, stream: CudaStreamLike) -> None:
        """:meth:`deallocate` for any arguments and resource (and every error)."""
        # Checked here, not left to the resource: one written in Python may take anything.
        ptr = _check_ptr(ptr)
        size = _check_size(size)
        # cuda.core passes a new Stream object for the stream it recorded: look up its
        # handle (the default streams' are there from the start).
        try:
            nb_stream = _nb_by_handle[stream.__cuda_stream__()[1]]
        except Exception:  # noqa: BLE001 - not cached yet, or not a stream: checked there
            nb_stream = _nb_stream(stream)
        self._deallocate(ptr, size, nb_stream)

    def _streams(self, stream: CudaStreamLike) -> tuple[_cc.Stream, _nbrmm.Stream]:
        """(the stream for cuda.core, the stream for nbrmm) of an ``allocate`` call."""
        if not isinstance(stream, _CC_STREAM_TYPES):
            stream = to_cuda_core_stream(
                stream, device=self.device_id if self.device_id >= 0 else None
            )
        return stream, _nb_stream(stream)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} over {self.upstream_mr!r} device_id={self.device_id}>"
        )


# The methods are CPython method descriptors of the class, made in C++ for it.
_methods = _ext._cuda_core_adapter_setup(NbrmmMemoryResource, _CCStream, _from_handle)
NbrmmMemoryResource.allocate = _methods[0]  # type: ignore[method-assign]
NbrmmMemoryResource.deallocate = _methods[1]  # type: ignore[method-assign]
del _methods


def to_cuda_core_memory_resource(
    mr: _mr.DeviceMemoryResource | None = None,
    *,
    device_id: int | None = None,
    is_device_accessible: bool | None = None,
    is_host_accessible: bool | None = None,
    is_managed: bool | None = None,
) -> _cc.MemoryResource:
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


# --------------------------------------------------------------------------------------
# cuda.core resources for nbrmm
# --------------------------------------------------------------------------------------


class _PoolOwner:
    """What ``CudaAsyncViewMemoryResource`` keeps, in every C++ copy: the cuda.core pool
    resource, whose pool it allocates from."""

    __slots__ = ("resource",)

    def __init__(self, resource: _cc.MemoryResource) -> None:
        self.resource = resource

    def pool_handle(self) -> int:
        return int(self.resource.handle)


class CudaCorePoolResource(_mr.CudaAsyncViewMemoryResource):
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

    def __init__(self, mr: _cc.MemoryResource) -> None:
        if not isinstance(mr, _POOL_TYPES):
            raise TypeError(
                "mr: expected a cuda.core DeviceMemoryResource, ManagedMemoryResource or "
                f"PinnedMemoryResource, got {_type_name(mr)}"
            )
        if mr.is_closed:
            raise ValueError("mr: the cuda.core resource is closed")
        if mr.is_mapped:
            raise ValueError(
                "mr: the resource maps another process's pool, which cannot allocate"
            )
        device = _nbrmm.get_current_device()
        if isinstance(mr, _cc.DeviceMemoryResource) and mr.device_id != device:
            raise ValueError(
                f"mr: the pool is on device {mr.device_id} but the current device is "
                f"{device} (make it current with nbrmm.set_current_device)"
            )
        super().__init__(_PoolOwner(mr))
        self._cuda_core_resource = mr

    @property
    def upstream_mr(self) -> _cc.MemoryResource:
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


#: Every CudaCoreMemoryResource, to let go of its cuda.core Buffers at exit (_exit_all).
_cuda_core_resources: _weakref.WeakSet[CudaCoreMemoryResource] = _weakref.WeakSet()


def _exit_all() -> None:
    """At interpreter exit, every CudaCoreMemoryResource lets go of its cuda.core Buffers.

    A cuda.core Buffer keeps its memory resource from C++, where the garbage collector
    cannot see it; one kept by an nbrmm resource (kept by a Buffer in a module's globals,
    which the cuda.core resource's class refers to) would form a cycle nothing breaks.
    The buffers are closed or kept as cuda.core does at exit; nbrmm frees nothing of
    theirs afterwards, and allocates from cuda.core no more.
    """
    for resource in list(_cuda_core_resources):
        resource._exit()


_atexit.register(_exit_all)


class CudaCoreMemoryResource(_mr.DeviceMemoryResource):
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

    def __init__(self, mr: _cc.MemoryResource) -> None:
        if not isinstance(mr, _CCMemoryResource):
            raise TypeError(
                f"mr: expected a cuda.core.MemoryResource, got {_type_name(mr)}"
            )
        self._setup(mr)

    def _setup(self, mr: _cc.MemoryResource | None) -> None:
        super().__init__()
        self._upstream = mr
        # pointer -> (the cuda.core Buffer that owns it, its stream's handle, that stream
        # for cuda.core)
        self._live: dict[int, tuple[_cc.Buffer, int, _cc.Stream]] = {}
        self._exited = False
        _cuda_core_resources.add(self)

    def _exit(self) -> None:
        """At interpreter exit: lets go of the cuda.core Buffers (see _exit_all)."""
        self._exited = True
        self._live = {}

    @property
    def upstream_mr(self) -> _cc.MemoryResource | None:
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
        """
        nbytes = _check_size(nbytes, "nbytes")
        if nbytes == 0:
            return 0
        if stream is None:
            stream = _nbrmm.DEFAULT_STREAM
        if self._upstream is None:
            raise MemoryError(
                "this resource lends one cuda.core Buffer and cannot allocate more (the "
                "Buffer has no memory_resource)"
            )
        if self._exited:
            raise RuntimeError(
                "the interpreter is shutting down: nbrmm no longer allocates from cuda.core"
            )
        cc_stream = _cc_stream_for_nbrmm(stream, self.device)
        try:
            buf = self._upstream.allocate(nbytes, stream=cc_stream)
        except MemoryError:
            raise
        except Exception as exc:
            if _is_cuda_out_of_memory(exc):
                raise _nbrmm.OutOfMemory(f"the cuda.core resource is out of memory: {exc}") from exc
            raise
        if not isinstance(buf, _CCBuffer):
            raise TypeError(
                f"the cuda.core resource's allocate returned {_type_name(buf)}, not a "
                "cuda.core.Buffer"
            )
        ptr, size = int(buf.handle), buf.size
        if ptr == 0 or ptr in self._live or size < nbytes:
            buf.close()  # on the stream it was allocated on
            raise MemoryError(
                f"the cuda.core resource returned an invalid buffer for {nbytes} bytes "
                f"(pointer {ptr:#x}, {size} bytes)"
            )
        self._live[ptr] = (buf, _stream_handle(stream), cc_stream)
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
            stream = _nbrmm.DEFAULT_STREAM
        if not buf.is_device_accessible:
            buf.close()  # host memory: no stream to order on
            return
        if getattr(stream, "handle", None) != allocated_on:
            try:
                cc_stream = _cc_stream_for_nbrmm(stream, self.device)
            except BaseException:
                _nbrmm.Stream(stream).synchronize()  # its work is done: any stream will do
                buf.close(cc_stream)
                raise
        buf.close(cc_stream)

    def _not_live(self, ptr: int) -> NoReturn:
        _check_ptr(ptr)
        raise ValueError(f"ptr: {ptr:#x} is not a live allocation of this resource")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} over {self._upstream!r} device={self.device}>"


class _LendingResource(CudaCoreMemoryResource):
    """The resource of an nbrmm Buffer over a cuda.core Buffer's memory: its first
    allocation is that memory (the Buffer is kept, not closed, until nbrmm frees it);
    later ones (growth, copies) come from the Buffer's own resource."""

    def __init__(self, buffer: _cc.Buffer) -> None:
        self._setup(buffer.memory_resource)
        self._lent: _cc.Buffer | None = buffer
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

    def lent(self, buffer: _nbrmm.Buffer) -> _cc.Buffer | None:
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


def from_cuda_core_memory_resource(mr: _cc.MemoryResource) -> _mr.DeviceMemoryResource:
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

    Examples
    --------
    >>> dmr = cuda.core.DeviceMemoryResource(0)
    >>> pool = nbrmm.mr.PoolMemoryResource(from_cuda_core_memory_resource(dmr), 1 << 26)
    """
    if isinstance(mr, NbrmmMemoryResource):
        return mr.upstream_mr
    if isinstance(mr, _POOL_TYPES):
        return CudaCorePoolResource(mr)
    return CudaCoreMemoryResource(mr)


# --------------------------------------------------------------------------------------
# Buffers
# --------------------------------------------------------------------------------------


class BufferOwner:
    """The ``owner`` of a cuda.core Buffer made by :func:`to_cuda_core_buffer`: it keeps
    the nbrmm Buffer (its ``buffer``) alive.

    At interpreter exit nbrmm lets go of the nbrmm Buffer, as cuda.core never releases the
    owners of buffers still alive then.
    """

    __slots__ = ("buffer", "__weakref__")

    def __init__(self, buffer: _nbrmm.Buffer) -> None:
        self.buffer: _nbrmm.Buffer | None = buffer

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.buffer!r}>"


#: Every BufferOwner, to let go of its nbrmm Buffer at interpreter exit.
_owners: _weakref.WeakSet[BufferOwner] = _weakref.WeakSet()


def _release_owners() -> None:
    for owner in list(_owners):
        owner.buffer = None


# atexit runs the last registered first: the owners' nbrmm Buffers go back to their
# resources (a CudaCoreMemoryResource still closes their cuda.core Buffers then), before
# _exit_all lets go of the cuda.core Buffers that CudaCoreMemoryResources keep, and
# _detach_all (registered first) detaches the adapters last.
_atexit.register(_release_owners)


def to_cuda_core_buffer(buffer: _nbrmm.Buffer) -> _cc.Buffer:
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
    if not isinstance(buffer, _nbrmm.Buffer):
        raise TypeError(f"buffer: expected an nbrmm.Buffer, got {_type_name(buffer)}")
    if buffer.closed:
        raise ValueError("buffer: the buffer is closed")
    lender = buffer.mr
    if isinstance(lender, _LendingResource):
        original = lender.lent(buffer)
        if original is not None:
            return original
    owner = BufferOwner(buffer)
    _owners.add(owner)
    return _from_handle(buffer.ptr, buffer.size, owner=owner)


def from_cuda_core_buffer(
    buffer: _cc.Buffer, *, stream: CudaStreamLike | None = None
) -> _nbrmm.Buffer:
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
    if not isinstance(buffer, _CCBuffer):
        raise TypeError(f"buffer: expected a cuda.core.Buffer, got {_type_name(buffer)}")
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
        stream = _nbrmm.DEFAULT_STREAM
    else:
        _stream_handle(stream)  # a clear error naming the parameter
    return _nbrmm.Buffer(buffer.size, mr=_LendingResource(buffer), stream=stream)
