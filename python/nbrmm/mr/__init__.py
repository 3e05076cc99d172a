"""Memory resources and the current device resource (rmm.mr-compatible namespace)."""

from __future__ import annotations

import contextlib as _contextlib
from collections.abc import Iterator as _Iterator
from typing import TypeVar as _TypeVar

from nbrmm._nbrmm import get_current_device as _get_current_device
from nbrmm._public import publish as _publish

from nbrmm._nbrmm import (
    AlignedResourceAdaptor,
    ArenaMemoryResource,
    BinningMemoryResource,
    CallbackMemoryResource,
    CudaAsyncMemoryResource,
    CudaAsyncViewMemoryResource,
    CudaMemoryResource,
    DeviceMemoryResource,
    FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource,
    LimitingResourceAdaptor,
    LoggingResourceAdaptor,
    ManagedMemoryResource,
    PinnedHostMemoryResource,
    PoolMemoryResource,
    PrefetchResourceAdaptor,
    SamHeadroomMemoryResource,
    StatisticsResourceAdaptor,
    SystemMemoryResource,
    ThreadSafeResourceAdaptor,
    TrackingResourceAdaptor,
    UpstreamResourceAdaptor,
    available_device_memory,
    get_current_device_resource,
    get_per_device_resource,
    is_initialized,
    reset_per_device_resource,
    set_current_device_resource,
    set_per_device_resource,
)
from nbrmm.logger import disable_logging, enable_logging, get_log_filenames
from nbrmm.mr import experimental

_MR = _TypeVar("_MR", bound=DeviceMemoryResource)


@_contextlib.contextmanager
def using_device_resource(mr: _MR, device: int | None = None) -> _Iterator[_MR]:
    """Make ``mr`` the resource of ``device`` for the duration of a ``with`` block.

    The previous resource is restored on exit, also when the block raises. Both Python
    and C++ see ``mr`` inside the block (it is written to librmm's per-device map).

    Parameters
    ----------
    mr : DeviceMemoryResource
        The resource to use.
    device : int, optional
        The device; the current device when omitted.

    Yields
    ------
    DeviceMemoryResource
        ``mr``.
    """
    dev = _get_current_device() if device is None else device
    previous = get_per_device_resource(dev)
    set_per_device_resource(dev, mr)
    try:
        yield mr
    finally:
        set_per_device_resource(dev, previous)


def get_current_device_resource_type() -> type[DeviceMemoryResource]:
    """The class of the current device resource (read from librmm's per-device map)."""
    return type(get_current_device_resource())


__all__ = [
    "AlignedResourceAdaptor",
    "ArenaMemoryResource",
    "BinningMemoryResource",
    "CallbackMemoryResource",
    "CudaAsyncMemoryResource",
    "CudaAsyncViewMemoryResource",
    "CudaMemoryResource",
    "DeviceMemoryResource",
    "FailureCallbackResourceAdaptor",
    "FixedSizeMemoryResource",
    "LimitingResourceAdaptor",
    "LoggingResourceAdaptor",
    "ManagedMemoryResource",
    "PinnedHostMemoryResource",
    "PoolMemoryResource",
    "PrefetchResourceAdaptor",
    "SamHeadroomMemoryResource",
    "StatisticsResourceAdaptor",
    "SystemMemoryResource",
    "ThreadSafeResourceAdaptor",
    "TrackingResourceAdaptor",
    "UpstreamResourceAdaptor",
    "available_device_memory",
    "disable_logging",
    "enable_logging",
    "experimental",
    "get_current_device_resource",
    "get_current_device_resource_type",
    "get_log_filenames",
    "get_per_device_resource",
    "is_initialized",
    "reset_per_device_resource",
    "set_current_device_resource",
    "set_per_device_resource",
    "using_device_resource",
]

_publish(__name__, globals(), __all__)
