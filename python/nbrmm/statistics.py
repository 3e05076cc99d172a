"""Allocation statistics and a memory profiler (``rmm.statistics``-compatible).

Statistics come from a :class:`nbrmm.mr.StatisticsResourceAdaptor`. Every function here
works on the resource given as ``mr=``, or, when ``mr`` is None, on the current device
resource read from librmm's per-device map at the time of the call. That map is the one
C++ code uses too, so the statistics describe what C++ allocates through the current
resource, and they follow any change of the current resource, from Python or from C++.

The counter stack
-----------------
Each ``StatisticsResourceAdaptor`` keeps one stack of counters for the whole process
(librmm's ``statistics_resource_adaptor`` holds it under a lock). It is **not** per
thread:

* allocations and frees from every thread are counted in the counters on top of the
  stack, exactly (each update happens under the adaptor's lock);
* :func:`push_statistics` and :func:`pop_statistics` act on that one stack, so pushes and
  pops from several threads interleave. Profile concurrent threads with one enclosing
  :func:`statistics` block (or one profiled function), not with a push/pop per thread.

Popping a level adds its counters into the level below: the outer level's totals include
everything counted inside, and its peak includes the inner peak on top of the outer
level's bytes in use when the inner level started.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, ParamSpec, Self, TypeVar

import nbrmm.mr as _mr
from nbrmm._nbrmm import get_current_device as _get_current_device

_P = ParamSpec("_P")
_R = TypeVar("_R")

__all__ = [
    "ProfilerContext",
    "ProfilerRecords",
    "Statistics",
    "default_profiler_records",
    "disable_statistics",
    "enable_statistics",
    "get_statistics",
    "pop_statistics",
    "profiler",
    "push_statistics",
    "statistics",
]


@dataclass
class Statistics:
    """Allocation counters of a :class:`nbrmm.mr.StatisticsResourceAdaptor`.

    Attributes
    ----------
    current_bytes : int
        Bytes allocated and not yet freed.
    current_count : int
        Allocations not yet freed.
    peak_bytes : int
        Highest ``current_bytes`` seen.
    peak_count : int
        Highest ``current_count`` seen.
    total_bytes : int
        Bytes allocated in all.
    total_count : int
        Allocations made in all.
    """

    current_bytes: int
    current_count: int
    peak_bytes: int
    peak_count: int
    total_bytes: int
    total_count: int


def _resource(mr: _mr.DeviceMemoryResource | None) -> _mr.DeviceMemoryResource:
    """``mr``, or the current device resource when ``mr`` is None."""
    if mr is None:
        return _mr.get_current_device_resource()
    if not isinstance(mr, _mr.DeviceMemoryResource):
        raise TypeError(
            f"mr: expected an nbrmm.mr.DeviceMemoryResource or None, got {type(mr).__name__}"
        )
    return mr


def _stats_adaptor(
    mr: _mr.DeviceMemoryResource | None,
) -> _mr.StatisticsResourceAdaptor | None:
    """The resolved ``mr`` if it is a StatisticsResourceAdaptor, else None."""
    res = _resource(mr)
    return res if isinstance(res, _mr.StatisticsResourceAdaptor) else None


def _same(a: _mr.DeviceMemoryResource, b: _mr.DeviceMemoryResource) -> bool:
    """Whether ``a`` and ``b`` are the same resource (the same object, or two objects over
    the same librmm resource, as when C++ set it and Python reads it back)."""
    return a is b or a == b


def enable_statistics(
    mr: _mr.DeviceMemoryResource | None = None,
) -> _mr.StatisticsResourceAdaptor:
    """Collect statistics of every allocation made through the current device resource.

    Wraps ``mr`` (by default the current device resource) in a
    :class:`~nbrmm.mr.StatisticsResourceAdaptor` and makes the adaptor the current device
    resource, in librmm's per-device map, so C++ allocations are counted too. Nothing is
    wrapped when ``mr`` already is a ``StatisticsResourceAdaptor``: it is made current.

    Parameters
    ----------
    mr : DeviceMemoryResource, optional
        The resource to count allocations of; the current device resource when None.
        It must belong to the current device.

    Returns
    -------
    StatisticsResourceAdaptor
        The adaptor, now the current device resource.

    See Also
    --------
    disable_statistics : restores the wrapped resource.
    """
    res = _resource(mr)
    if not isinstance(res, _mr.StatisticsResourceAdaptor):
        res = _mr.StatisticsResourceAdaptor(res)
    if not _same(res, _mr.get_current_device_resource()):
        _mr.set_current_device_resource(res)
    return res


def disable_statistics() -> Statistics | None:
    """Stop collecting statistics on the current device.

    If the current device resource is a :class:`~nbrmm.mr.StatisticsResourceAdaptor`, its
    upstream resource (the very object that :func:`enable_statistics` wrapped) becomes the
    current device resource again.

    Returns
    -------
    Statistics or None
        The adaptor's final counters (top of its stack), or None when the current device
        resource did not collect statistics.
    """
    res = _stats_adaptor(None)
    if res is None:
        return None
    upstream = res.upstream_mr
    if upstream is None:
        raise ValueError(
            "the current StatisticsResourceAdaptor has no known upstream resource to restore"
        )
    counts = res.allocation_counts
    _mr.set_current_device_resource(upstream)
    return counts


def get_statistics(mr: _mr.DeviceMemoryResource | None = None) -> Statistics | None:
    """The counters on top of the statistics stack.

    Parameters
    ----------
    mr : DeviceMemoryResource, optional
        The resource to read; the current device resource when None.

    Returns
    -------
    Statistics or None
        None when the resource is not a :class:`~nbrmm.mr.StatisticsResourceAdaptor`.
    """
    res = _stats_adaptor(mr)
    return None if res is None else res.allocation_counts


def push_statistics(mr: _mr.DeviceMemoryResource | None = None) -> Statistics | None:
    """Push a new level of zeroed counters onto the statistics stack.

    Parameters
    ----------
    mr : DeviceMemoryResource, optional
        The resource; the current device resource when None.

    Returns
    -------
    Statistics or None
        The counters of the level below (the top before the push), or None (and nothing
        is done) when the resource is not a :class:`~nbrmm.mr.StatisticsResourceAdaptor`.
    """
    res = _stats_adaptor(mr)
    return None if res is None else res.push_counters()


def pop_statistics(mr: _mr.DeviceMemoryResource | None = None) -> Statistics | None:
    """Pop the top level of the statistics stack.

    The popped counters are added into the level below (see the module notes).

    Parameters
    ----------
    mr : DeviceMemoryResource, optional
        The resource; the current device resource when None.

    Returns
    -------
    Statistics or None
        The popped counters, or None (and nothing is done) when the resource is not a
        :class:`~nbrmm.mr.StatisticsResourceAdaptor`.

    Raises
    ------
    IndexError
        If only the bottom level is left (more pops than pushes).
    """
    res = _stats_adaptor(mr)
    return None if res is None else res.pop_counters()


@contextlib.contextmanager
def statistics(
    mr: _mr.DeviceMemoryResource | None = None,
) -> Iterator[_mr.StatisticsResourceAdaptor]:
    """Count the allocations made in a ``with`` block.

    If the resource (``mr``, by default the current device resource) is a
    :class:`~nbrmm.mr.StatisticsResourceAdaptor`, a level is pushed onto its stack for
    the block and popped at the end. Otherwise the resource is wrapped in a new adaptor
    that is the current device resource during the block, and the resource that was
    current before is restored at the end (the very same object).

    Parameters
    ----------
    mr : DeviceMemoryResource, optional
        The resource; the current device resource when None.

    Yields
    ------
    StatisticsResourceAdaptor
        The adaptor whose counters the block uses (``allocation_counts``).

    Raises
    ------
    ValueError
        At the end of the block, if the current device resource was replaced inside the
        block (the replacement is left in place, as no safe choice exists).
    """
    res = _resource(mr)
    device = _get_current_device()
    if isinstance(res, _mr.StatisticsResourceAdaptor):
        current = res if mr is None else None  # the block must not change the current one
        res.push_counters()
        try:
            yield res
        finally:
            # The level belongs to this adaptor: pop it there whatever became current.
            res.pop_counters()
            if current is not None and not _same(current, _mr.get_per_device_resource(device)):
                raise ValueError(
                    "the current device resource was changed inside a statistics() block"
                )
        return

    previous = _mr.get_per_device_resource(device)
    adaptor = _mr.StatisticsResourceAdaptor(res)
    _mr.set_per_device_resource(device, adaptor)
    try:
        yield adaptor
    finally:
        if not _same(adaptor, _mr.get_per_device_resource(device)):
            raise ValueError(
                "the current device resource was changed inside a statistics() block"
            )
        _mr.set_per_device_resource(device, previous)


class ProfilerRecords:
    """Memory statistics of profiled functions and code blocks, by name.

    Thread-safe: records may be added from several threads.
    """

    @dataclass
    class MemoryRecord:
        """The memory used by one profiled function or code block.

        Attributes
        ----------
        num_calls : int
            How many times it ran.
        memory_total : int
            Bytes allocated by all runs together.
        memory_peak : int
            The highest peak of bytes in use of a single run.
        """

        num_calls: int = 0
        memory_total: int = 0
        memory_peak: int = 0

        def add(self, memory_total: int, memory_peak: int) -> None:
            """Record one more run that allocated ``memory_total`` bytes in all and had
            ``memory_peak`` bytes in use at its peak."""
            self.num_calls += 1
            self.memory_total += memory_total
            self.memory_peak = max(self.memory_peak, memory_peak)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: defaultdict[str, ProfilerRecords.MemoryRecord] = defaultdict(
            ProfilerRecords.MemoryRecord
        )

    def add(self, name: str, data: Statistics) -> None:
        """Record one run of ``name`` with the statistics ``data``.

        Parameters
        ----------
        name : str
            The function or code block.
        data : Statistics
            Its statistics (``total_bytes`` and ``peak_bytes`` are used).
        """
        with self._lock:
            self._records[name].add(memory_total=data.total_bytes, memory_peak=data.peak_bytes)

    @property
    def records(self) -> dict[str, ProfilerRecords.MemoryRecord]:
        """dict of str to MemoryRecord: a snapshot of the records, by name."""
        with self._lock:
            return {
                name: ProfilerRecords.MemoryRecord(r.num_calls, r.memory_total, r.memory_peak)
                for name, r in self._records.items()
            }

    def clear(self) -> None:
        """Remove every record."""
        with self._lock:
            self._records.clear()

    def report(
        self, ordered_by: Literal["memory_peak", "memory_total", "num_calls"] = "memory_peak"
    ) -> str:
        """A table of the records, one line each, largest first.

        Parameters
        ----------
        ordered_by : {"memory_peak", "memory_total", "num_calls"}
            The column to sort by.

        Returns
        -------
        str
            The report.
        """
        if ordered_by not in ("memory_peak", "memory_total", "num_calls"):
            raise ValueError(
                "ordered_by: expected 'memory_peak', 'memory_total' or 'num_calls', "
                f"got {ordered_by!r}"
            )
        records = self.records
        lines = ["Memory Profiling", "================", ""]
        if not records:
            lines.append("No data, maybe profiling wasn't enabled?")
            return "\n".join(lines)
        lines += [
            "Legends:",
            "  ncalls       - number of times the function or code block was called",
            "  memory_peak  - peak memory allocated in function or code block (in bytes)",
            "  memory_total - total memory allocated in function or code block (in bytes)",
            "",
            f"Ordered by: {ordered_by}",
            "",
            "ncalls     memory_peak    memory_total  filename:lineno(function)",
        ]
        ordered = sorted(records.items(), key=lambda kv: getattr(kv[1], ordered_by), reverse=True)
        for name, r in ordered:
            lines.append(f"{r.num_calls:6,d} {r.memory_peak:15,d} {r.memory_total:15,d}  {name}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(records={self.records})"

    def __str__(self) -> str:
        return self.report()


default_profiler_records = ProfilerRecords()
"""The :class:`ProfilerRecords` that :func:`profiler` uses by default."""


def _descriptive_name(func: Callable[..., object]) -> str:
    """``file:line(qualified name)`` of a function, or its qualified name alone."""
    qualname = getattr(func, "__qualname__", None) or repr(func)
    try:
        filename = inspect.getsourcefile(func)
        _, line = inspect.getsourcelines(func)
    except (OSError, TypeError):
        return qualname
    return f"{filename}:{line}({qualname})"


class ProfilerContext:
    """Records the memory statistics of a function (as a decorator) or of a ``with``
    block, into a :class:`ProfilerRecords`. Create it with :func:`profiler`.

    Each call or block pushes a level onto the statistics stack of the resource and pops
    it at the end (see :mod:`nbrmm.statistics`). Nothing is recorded when the resource
    does not collect statistics (see :func:`enable_statistics`).

    Parameters
    ----------
    records : ProfilerRecords, optional
        Where to record; :data:`default_profiler_records` by default.
    name : str, optional
        The record's name. Required for ``with`` blocks; a decorated function is named
        ``file:line(qualified name)`` when empty.
    mr : DeviceMemoryResource, optional
        The resource to profile; the current device resource (read at each call) when
        None.
    """

    def __init__(
        self,
        records: ProfilerRecords = default_profiler_records,
        name: str = "",
        *,
        mr: _mr.DeviceMemoryResource | None = None,
    ) -> None:
        if not isinstance(records, ProfilerRecords):
            raise TypeError(f"records: expected a ProfilerRecords, got {type(records).__name__}")
        if not isinstance(name, str):
            raise TypeError(f"name: expected a str, got {type(name).__name__}")
        if mr is not None:
            _resource(mr)
        self.records = records
        self.name = name
        self.mr = mr
        self._active = threading.local()  # per thread: the adaptors of open blocks

    def _begin(self) -> _mr.StatisticsResourceAdaptor | None:
        res = _stats_adaptor(self.mr)
        if res is not None:
            res.push_counters()
        return res

    def _end(self, res: _mr.StatisticsResourceAdaptor | None, name: str) -> None:
        if res is not None:
            self.records.add(name=name, data=res.pop_counters())

    def __call__(self, func: Callable[_P, _R]) -> Callable[_P, _R]:
        if not callable(func):
            raise TypeError(f"profiler: expected a callable to decorate, got {type(func).__name__}")
        name = self.name or _descriptive_name(func)

        @functools.wraps(func)
        def profiled(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            res = self._begin()
            try:
                return func(*args, **kwargs)
            finally:
                self._end(res, name)

        return profiled

    def __enter__(self) -> Self:
        if not self.name:
            raise ValueError("name: a profiler used as a context manager needs a name")
        stack = self._active.__dict__.setdefault("stack", [])
        stack.append(self._begin())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        self._end(self._active.stack.pop(), self.name)
        return False


def profiler(
    *,
    records: ProfilerRecords = default_profiler_records,
    name: str = "",
    mr: _mr.DeviceMemoryResource | None = None,
) -> ProfilerContext:
    """Profile the memory of a function (decorator) or of a ``with`` block.

    Parameters
    ----------
    records : ProfilerRecords, optional
        Where to record; :data:`default_profiler_records` by default.
    name : str, optional
        The record's name; required for ``with`` blocks. A decorated function is named
        ``file:line(qualified name)`` when empty.
    mr : DeviceMemoryResource, optional
        The resource to profile; the current device resource (read at each call) when
        None.

    Returns
    -------
    ProfilerContext
        Use it as ``@profiler()`` or ``with profiler(name="step"):``.

    Examples
    --------
    >>> import nbrmm, nbrmm.statistics as st
    >>> st.enable_statistics()  # doctest: +SKIP
    >>> @st.profiler()
    ... def work():
    ...     return nbrmm.Buffer(1 << 20)
    >>> print(st.default_profiler_records.report())  # doctest: +SKIP
    """
    return ProfilerContext(records=records, name=name, mr=mr)
