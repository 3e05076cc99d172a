"""Worker metrics and statistics: what a worker's nbrmm resources hold, read from librmm's map."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, overload

import nbrmm.mr as _mr
from nbrmm import _nbrmm
from nbrmm._typing import StatisticsRow, TagRow

if TYPE_CHECKING:
    import pandas as _pandas
    from distributed import Client, Worker


#: Columns of :func:`gather_statistics`, in order.
COLUMNS = tuple(StatisticsRow.__annotations__)
#: Columns of :func:`gather_memory_by_tag`, in order.
TAG_COLUMNS = tuple(TagRow.__annotations__)

#: A worker metric: ``metric(worker)`` -> ``{name: bytes}``.
_Metric = Callable[["Worker"], dict[str, int]]


def _devices() -> list[int]:
    """The devices with an entry in librmm's per-device map, and the current device."""
    return sorted(set(_nbrmm._devices_with_resource()) | {_nbrmm.get_current_device()})


def _chain(res: _mr.DeviceMemoryResource | None) -> Iterator[_mr.DeviceMemoryResource]:
    """``res`` and its upstream resources, top first (as far as they are known)."""
    seen: set[int] = set()
    while res is not None and id(res) not in seen:
        seen.add(id(res))
        yield res
        res = res.upstream_mr if isinstance(res, _mr.UpstreamResourceAdaptor) else None


def _used_and_total(res: _mr.DeviceMemoryResource) -> tuple[int, int]:
    """Bytes in use through ``res`` and bytes it holds, from the first adaptor of its
    chain that counts them (statistics, tracking or limiting) and the first pool."""
    used: int | None = None
    pool: int | None = None
    for r in _chain(res):
        if used is None:
            if isinstance(r, _mr.StatisticsResourceAdaptor):
                used = r.allocation_counts.current_bytes
            elif isinstance(r, (_mr.TrackingResourceAdaptor, _mr.LimitingResourceAdaptor)):
                used = r.get_allocated_bytes()
        if pool is None and isinstance(r, _mr.PoolMemoryResource):
            pool = r.pool_size()
    in_use = used or 0
    return in_use, max(in_use, pool or 0)


def memory_usage() -> tuple[int, int]:
    """Bytes in use and bytes held by this process's current device resources.

    Summed over the devices that have a resource in librmm's per-device map (and the
    current device). Bytes in use come from the first statistics, tracking or limiting
    adaptor in each resource's chain (0 without one); bytes held are the larger of that
    and the size of the first pool in the chain.

    Returns
    -------
    tuple of int
        ``(used, total)``.
    """
    used = total = 0
    for device in _devices():
        u, t = _used_and_total(_mr.get_per_device_resource(device))
        used += u
        total += t
    return used, total


def nbrmm_metric(worker: Worker | None = None) -> dict[str, int]:
    """The ``nbrmm`` worker metric: ``{"nbrmm-used": bytes, "nbrmm-total": bytes}``."""
    used, total = memory_usage()
    return {"nbrmm-used": used, "nbrmm-total": total}


def rmm_metric(worker: Worker | None = None) -> dict[str, int]:
    """The same figures under the keys of distributed's ``rmm`` metric, which its
    dashboard plots (``{"rmm-used": bytes, "rmm-total": bytes}``)."""
    used, total = memory_usage()
    return {"rmm-used": used, "rmm-total": total}


_METRICS: dict[str, _Metric] = {"nbrmm": nbrmm_metric, "rmm": rmm_metric}
# What the plugin replaced in each worker's metrics (distributed's rmm metric reads
# rmm's own record of the current resource, which does not see librmm's map).
_replaced: weakref.WeakKeyDictionary[Worker, Callable[[Worker], Any]] = (
    weakref.WeakKeyDictionary()
)


def add_metrics(worker: Worker) -> None:
    """Add the ``nbrmm`` metric to ``worker.metrics``, and put nbrmm's figures under
    ``rmm`` (remembering the metric that was there)."""
    metrics = worker.metrics
    if "rmm" in metrics and metrics["rmm"] is not rmm_metric:
        _replaced[worker] = metrics["rmm"]
    metrics.update(_METRICS)


def remove_metrics(worker: Worker) -> None:
    """Undo :func:`add_metrics` (entries replaced since by others are left alone)."""
    metrics = worker.metrics
    for key, metric in _METRICS.items():
        if metrics.get(key) is metric:
            del metrics[key]
    previous = _replaced.pop(worker, None)
    if previous is not None and "rmm" not in metrics:
        metrics["rmm"] = previous


def worker_statistics(dask_worker: Worker | None = None) -> list[StatisticsRow]:
    """One row per device of this process: its current resource and the counters of the
    first statistics adaptor in that resource's chain (None without one)."""
    rows = []
    for device in _devices():
        res = _mr.get_per_device_resource(device)
        counts = None
        for r in _chain(res):
            if isinstance(r, _mr.StatisticsResourceAdaptor):
                counts = r.allocation_counts
                break
        rows.append(
            StatisticsRow(
                worker=getattr(dask_worker, "address", None),
                name=getattr(dask_worker, "name", None),
                device=device,
                resource=type(res).__name__,
                current_bytes=None if counts is None else counts.current_bytes,
                current_count=None if counts is None else counts.current_count,
                peak_bytes=None if counts is None else counts.peak_bytes,
                peak_count=None if counts is None else counts.peak_count,
                total_bytes=None if counts is None else counts.total_bytes,
                total_count=None if counts is None else counts.total_count,
            )
        )
    return rows


@overload
def gather_statistics(client: Client, *, frame: Literal[False]) -> list[StatisticsRow]: ...
@overload
def gather_statistics(client: Client, *, frame: Literal[True]) -> _pandas.DataFrame: ...
@overload
def gather_statistics(
    client: Client, *, frame: bool | None = None
) -> _pandas.DataFrame | list[StatisticsRow]: ...


def gather_statistics(
    client: Client, *, frame: bool | None = None
) -> _pandas.DataFrame | list[StatisticsRow]:
    """Every worker's nbrmm statistics, one row per worker and device.

    Each worker reports, for each device with a resource in its librmm map, the counters
    of the first ``StatisticsResourceAdaptor`` in the chain of that resource (the one
    :class:`~nbrmm.dask.NbrmmSetup` puts on top, unless ``statistics=False``).

    Parameters
    ----------
    client : distributed.Client
        A connected (not asynchronous) client.
    frame : bool, optional
        True: return a ``pandas.DataFrame`` (pandas must be installed). False: a list of
        dicts. None (the default): a DataFrame when pandas can be imported, else a list.

    Returns
    -------
    pandas.DataFrame or list of dict
        Columns ``worker`` (address), ``name``, ``device``, ``resource`` (the class of the
        current resource), ``current_bytes``, ``current_count``, ``peak_bytes``,
        ``peak_count``, ``total_bytes`` and ``total_count``. The counters are None (NaN
        in a DataFrame) where the resource has no statistics adaptor. Rows are sorted by
        worker address and device.

    Raises
    ------
    TypeError
        If ``client`` is not a ``distributed.Client``, is asynchronous, or ``frame`` is
        not a bool or None.
    ImportError
        If ``frame=True`` and pandas is not installed.
    """
    return _gather(client, worker_statistics, frame, COLUMNS, ("worker", "device"))


def _check_client(client: object, worker_function: str) -> None:
    from distributed import Client

    if not isinstance(client, Client):
        raise TypeError(f"client: expected a distributed.Client, got {type(client).__name__}")
    if client.asynchronous:
        raise TypeError(
            "client: an asynchronous Client is not supported; use "
            f"`await client.run(nbrmm.dask.{worker_function})`"
        )


def _gather(
    client: Client,
    function: Callable[..., list[Any]],
    frame: bool | None,
    columns: tuple[str, ...],
    order: tuple[str, ...],
) -> Any:
    """The rows ``function`` gives on every worker, sorted by ``order``: a DataFrame or a
    list (``frame``, as in :func:`gather_statistics`)."""
    _check_client(client, function.__name__)
    if frame is not None and not isinstance(frame, bool):
        raise TypeError(f"frame: expected True, False or None, got {type(frame).__name__}")
    data_frame: type[_pandas.DataFrame] | None = None
    if frame is not False:
        try:
            from pandas import DataFrame
        except ImportError as exc:
            if frame:
                raise ImportError(
                    f"frame: True needs pandas, which cannot be imported ({exc})", name="pandas"
                ) from exc
        else:
            data_frame = DataFrame
    by_worker: dict[str, list[Any]] = client.run(function)
    rows = sorted(
        (row for rows in by_worker.values() for row in rows),
        key=lambda r: tuple(str(r[k]) if k == "worker" else r[k] for k in order),
    )
    if data_frame is None:
        return rows
    return data_frame(rows, columns=list(columns))


def worker_memory_by_tag(dask_worker: Worker | None = None) -> list[TagRow]:
    """One row per device and tag of this process's memory history: the live bytes and
    allocations recorded under the tag (none unless :func:`nbrmm.memory.record_history`
    records here)."""
    from nbrmm.memory import snapshot

    totals: dict[tuple[int, str], list[int]] = {}
    for a in snapshot().allocations:
        entry = totals.setdefault((a.device, a.tag), [0, 0])
        entry[0] += a.size
        entry[1] += 1
    return [
        TagRow(
            worker=getattr(dask_worker, "address", None),
            name=getattr(dask_worker, "name", None),
            device=device,
            tag=tag,
            live_bytes=live_bytes,
            live_count=live_count,
        )
        for (device, tag), (live_bytes, live_count) in sorted(totals.items())
    ]


@overload
def gather_memory_by_tag(client: Client, *, frame: Literal[False]) -> list[TagRow]: ...
@overload
def gather_memory_by_tag(client: Client, *, frame: Literal[True]) -> _pandas.DataFrame: ...
@overload
def gather_memory_by_tag(
    client: Client, *, frame: bool | None = None
) -> _pandas.DataFrame | list[TagRow]: ...


def gather_memory_by_tag(
    client: Client, *, frame: bool | None = None
) -> _pandas.DataFrame | list[TagRow]:
    """Every worker's live memory per tag, from its memory history.

    Start recording on the workers first, e.g. ``client.run(nbrmm.memory.record_history)``
    on every worker); a worker that records nothing gives no rows.

    Parameters
    ----------
    client : distributed.Client
        A connected (not asynchronous) client.
    frame : bool, optional
        As in :func:`gather_statistics`.

    Returns
    -------
    pandas.DataFrame or list of dict
        Columns ``worker``, ``name``, ``device``, ``tag``, ``live_bytes`` and
        ``live_count``, sorted by worker, device and tag.

    Raises
    ------
    TypeError
        If ``client`` is not a ``distributed.Client``, is asynchronous, or ``frame`` is
        not a bool or None.
    ImportError
        If ``frame=True`` and pandas is not installed.
    """
    return _gather(client, worker_memory_by_tag, frame, TAG_COLUMNS, ("worker", "device", "tag"))


def _worker_file_name(name: object) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name)) or "worker"


def dump_worker_snapshot(path: str, dask_worker: Worker | None = None) -> str:
    """Write this process's memory snapshot (:meth:`nbrmm.memory.Snapshot.dump`) to
    ``path``, with ``{worker}`` replaced by the worker's name (characters other than
    letters, digits, ``-``, ``_`` and ``.`` as ``_``). Returns the path written."""
    from nbrmm.memory import snapshot

    target = path.replace("{worker}", _worker_file_name(getattr(dask_worker, "name", "local")))
    snapshot().dump(target)
    return target


def dump_snapshots(client: Client, path: str) -> dict[str, str]:
    """Have every worker write its memory snapshot to ``path`` (on the worker's file
    system), in PyTorch's memory-snapshot format.

    Parameters
    ----------
    client : distributed.Client
        A connected (not asynchronous) client.
    path : str
        Where each worker writes; it must contain ``{worker}``, which each worker replaces
        by its name, so that workers do not overwrite each other's file.

    Returns
    -------
    dict of str to str
        The path each worker wrote, by worker address.

    Raises
    ------
    TypeError
        If ``client`` is not a ``distributed.Client`` or is asynchronous, or ``path`` is
        not a str.
    ValueError
        If ``path`` has no ``{worker}``.
    """
    import os

    _check_client(client, "dump_worker_snapshot")
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"path: expected a str, got {type(path).__name__}")
    if "{worker}" not in path:
        raise ValueError(f"path: must contain '{{worker}}' (each worker's name), got {path!r}")
    written: dict[str, str] = client.run(dump_worker_snapshot, path)
    return written
