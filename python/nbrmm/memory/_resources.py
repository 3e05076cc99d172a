"""What the resources of a device's current chain know: pool sizes, bytes in use, limits.

Read through each resource's public API (``pool_size()``, ``allocation_counts``,
``get_allocated_bytes()``, ``get_allocation_limit()``), outermost first, following
``upstream_mr``.
"""

from __future__ import annotations

from collections.abc import Iterator

from nbrmm import _nbrmm
from nbrmm.memory._snapshot import ResourceInfo

#: The most resources followed down one chain (a guard against a chain that loops).
_MAX_DEPTH = 64


def describe(mr: _nbrmm.DeviceMemoryResource, device: int, depth: int) -> ResourceInfo:
    """What ``mr`` knows about its memory."""
    pool_size = bytes_in_use = limit = None
    if isinstance(mr, (_nbrmm.PoolMemoryResource,)):
        pool_size = mr.pool_size()
    if isinstance(mr, _nbrmm.StatisticsResourceAdaptor):
        bytes_in_use = mr.allocation_counts.current_bytes
    elif isinstance(mr, (_nbrmm.TrackingResourceAdaptor, _nbrmm.LimitingResourceAdaptor)):
        bytes_in_use = mr.get_allocated_bytes()
    if isinstance(mr, _nbrmm.LimitingResourceAdaptor):
        limit = mr.get_allocation_limit()
    return ResourceInfo(
        device=device,
        depth=depth,
        name=type(mr).__name__,
        pool_size=pool_size,
        bytes_in_use=bytes_in_use,
        limit=limit,
    )


def describe_chain(device: int) -> Iterator[ResourceInfo]:
    """The current resource of ``device`` and its upstreams, outermost first."""
    mr: _nbrmm.DeviceMemoryResource | None = _nbrmm.get_per_device_resource(device)
    yield from describe_from(mr, device)


def describe_from(mr: _nbrmm.DeviceMemoryResource | None, device: int) -> Iterator[ResourceInfo]:
    """``mr`` and its upstreams, outermost first."""
    depth = 0
    while mr is not None and depth < _MAX_DEPTH:
        yield describe(mr, device, depth)
        mr = getattr(mr, "upstream_mr", None)
        depth += 1
