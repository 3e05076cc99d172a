"""Plot the memory timeline recorded by a :class:`nbrmm.mr.LoggingResourceAdaptor`.

The adaptor (librmm's ``logging_resource_adaptor``) writes one CSV line per event::

    Thread,Time,Action,Pointer,Size,Stream
    140234,14:02:11.123456,allocate,0x7f3a40000000,1048576,0x0
    140234,14:02:11.123901,free,0x7f3a40000000,1048576,0x0

``Action`` is ``allocate``, ``free`` or ``allocate failure``. :func:`read_log` parses such
a file, :func:`memory_timeline` turns it into the bytes in use after each event, and
:func:`plot_log` draws that timeline (with the peak marked) and, given the records of
:func:`nbrmm.statistics.profiler`, the peak bytes of each profiled function or block.

From the command line::

    python -m nbrmm.plot LOG.csv [MORE.csv ...] -o timeline.png [--profile PROFILE.json]

Only drawing needs matplotlib (``pip install 'nbrmm[plot]'``); parsing does not.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from nbrmm.statistics import ProfilerRecords

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: A path argument.
_Path: TypeAlias = str | os.PathLike[str]
#: Profiler records as plain data: ``{name: {"num_calls": ..., "memory_total": ...,
#: "memory_peak": ...}}``.
_Records: TypeAlias = dict[str, dict[str, int]]
#: What :func:`write_profile` and :func:`plot_log` take as records.
_RecordsLike: TypeAlias = (
    ProfilerRecords | Mapping[str, ProfilerRecords.MemoryRecord | Mapping[str, int]]
)

__all__ = [
    "LogEvent",
    "Timeline",
    "main",
    "memory_timeline",
    "plot_log",
    "read_log",
    "read_profile",
    "write_profile",
]

_COLUMNS = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")
_ACTIONS = ("allocate", "free", "allocate failure")


@dataclass(frozen=True)
class LogEvent:
    """One line of a logging adaptor's CSV log.

    Attributes
    ----------
    thread : str
        The id of the thread that made the call.
    time : float
        Seconds since the first event of the log.
    action : str
        ``"allocate"``, ``"free"`` or ``"allocate failure"``.
    pointer : int
        The pointer allocated or freed (0 for a failure).
    size : int
        Bytes requested or freed.
    stream : str
        The stream, as logged.
    """

    thread: str
    time: float
    action: str
    pointer: int
    size: int
    stream: str


def _parse_time(text: str, where: str) -> float:
    try:
        hours, minutes, seconds = text.strip().split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    except ValueError:
        raise ValueError(
            f"{where}: cannot parse the time {text!r} (expected HH:MM:SS.ffffff)"
        ) from None


def _parse_pointer(text: str, where: str) -> int:
    text = text.strip()
    if text in ("(nil)", "nil", "0", "", "nullptr"):
        return 0
    try:
        return int(text, 16)  # printf's %p: 0x-prefixed hexadecimal
    except ValueError:
        raise ValueError(f"{where}: cannot parse the pointer {text!r}") from None


def read_log(path: _Path) -> list[LogEvent]:
    """Parse a logging adaptor's CSV log.

    Parameters
    ----------
    path : str or os.PathLike
        The log file.

    Returns
    -------
    list of LogEvent
        The events in file order, times relative to the first event (a log that runs
        past midnight keeps increasing).

    Raises
    ------
    ValueError
        If the file is not such a log (the error names the file and line).
    """
    path = os.fspath(path)
    events: list[LogEvent] = []
    with open(path, newline="") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header is None:
            raise ValueError(f"{path}: empty file, not a memory log")
        header = [h.strip() for h in header]
        missing = [c for c in _COLUMNS[1:5] if c not in header]
        if missing:
            raise ValueError(
                f"{path}: not a logging adaptor log; the header lacks {', '.join(missing)} "
                f"(expected {','.join(_COLUMNS)})"
            )
        col = {name: header.index(name) for name in _COLUMNS if name in header}
        start: float | None = None
        day = 0.0
        previous: float | None = None
        for lineno, row in enumerate(rows, start=2):
            if not row or not any(cell.strip() for cell in row):
                continue
            where = f"{path}:{lineno}"
            if len(row) < len(header):
                raise ValueError(f"{where}: expected {len(header)} columns, got {len(row)}")
            action = row[col["Action"]].strip()
            if action not in _ACTIONS:
                raise ValueError(f"{where}: unknown action {action!r}")
            clock = _parse_time(row[col["Time"]], where)
            if previous is not None and clock + day < previous - 12 * 3600:
                day += 24 * 3600  # the clock passed midnight
            clock += day
            previous = clock
            if start is None:
                start = clock
            try:
                size = int(row[col["Size"]])
            except ValueError:
                raise ValueError(f"{where}: cannot parse the size {row[col['Size']]!r}") from None
            events.append(
                LogEvent(
                    thread=row[col["Thread"]].strip() if "Thread" in col else "",
                    time=clock - start,
                    action=action,
                    pointer=_parse_pointer(row[col["Pointer"]], where),
                    size=size,
                    stream=row[col["Stream"]].strip() if "Stream" in col else "",
                )
            )
    return events


@dataclass
class Timeline:
    """Bytes in use over time, from :func:`memory_timeline`.

    Attributes
    ----------
    times : list of float
        Seconds since the first event; one entry per allocation or free.
    bytes_in_use : list of int
        Bytes allocated (in the log) and not freed, after each event.
    peak_bytes : int
        The highest value of ``bytes_in_use`` (0 for an empty log).
    peak_time : float
        When the peak was first reached.
    allocations : int
        Successful allocations.
    frees : int
        Frees of memory allocated in the log.
    failures : list of tuple of (float, int)
        Failed allocations: time and requested size.
    unmatched_frees : int
        Frees of pointers not allocated in the log (memory allocated before logging
        started); they do not change ``bytes_in_use``.
    """

    times: list[float]
    bytes_in_use: list[int]
    peak_bytes: int
    peak_time: float
    allocations: int
    frees: int
    failures: list[tuple[float, int]]
    unmatched_frees: int


def memory_timeline(events: Iterable[LogEvent]) -> Timeline:
    """The bytes in use after each allocation and free of a log.

    Parameters
    ----------
    events : iterable of LogEvent
        From :func:`read_log`.

    Returns
    -------
    Timeline
    """
    live: dict[int, int] = {}
    in_use = 0
    times: list[float] = []
    values: list[int] = []
    failures: list[tuple[float, int]] = []
    peak, peak_time = 0, 0.0
    allocations = frees = unmatched = 0
    for e in events:
        if e.action == "allocate":
            allocations += 1
            in_use += e.size - live.get(e.pointer, 0)
            live[e.pointer] = e.size
        elif e.action == "free":
            if e.pointer not in live:
                unmatched += 1
                continue
            frees += 1
            in_use -= live.pop(e.pointer)
        else:
            failures.append((e.time, e.size))
            continue
        times.append(e.time)
        values.append(in_use)
        if in_use > peak:
            peak, peak_time = in_use, e.time
    return Timeline(times, values, peak, peak_time, allocations, frees, failures, unmatched)


def _records_dict(records: _RecordsLike) -> _Records:
    """{name: {num_calls, memory_total, memory_peak}} from ProfilerRecords or a dict."""
    if hasattr(records, "records"):
        records = records.records
    out: _Records = {}
    for name, r in dict(records).items():
        if isinstance(r, dict):
            out[str(name)] = {k: int(r[k]) for k in ("num_calls", "memory_total", "memory_peak")}
        else:
            out[str(name)] = {
                "num_calls": int(r.num_calls),
                "memory_total": int(r.memory_total),
                "memory_peak": int(r.memory_peak),
            }
    return out


def write_profile(records: _RecordsLike, path: _Path) -> None:
    """Save profiler records as JSON, for :func:`plot_log` or ``--profile``.

    Parameters
    ----------
    records : ProfilerRecords or dict
        :class:`nbrmm.statistics.ProfilerRecords`, or its ``records`` dict.
    path : str or os.PathLike
        The JSON file to write.
    """
    with open(os.fspath(path), "w") as f:
        json.dump({"records": _records_dict(records)}, f, indent=1, sort_keys=True)
        f.write("\n")


def read_profile(path: _Path) -> _Records:
    """Load profiler records saved by :func:`write_profile`.

    Returns
    -------
    dict
        ``{name: {"num_calls": int, "memory_total": int, "memory_peak": int}}``.
    """
    path = os.fspath(path)
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("records"), dict):
        raise ValueError(f"{path}: not a profile written by nbrmm.plot.write_profile")
    keys = ("num_calls", "memory_total", "memory_peak")
    for name, record in data["records"].items():
        values = [record.get(k) for k in keys] if isinstance(record, dict) else [None]
        if not all(type(v) is int and v >= 0 for v in values):
            raise ValueError(
                f"{path}: record {name!r} is not a profile record (non-negative ints "
                f"{', '.join(keys)})"
            )
    return _records_dict(data["records"])


def _byte_unit(peak: float) -> tuple[int, str]:
    for factor, unit in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if peak >= 2 * factor:
            return factor, unit
    return 1, "B"


def _short_name(name: str, width: int = 48) -> str:
    """``file:line(qualname)`` shortened to ``basename:line(qualname)`` and ``width``."""
    if "(" in name and ":" in name:
        head, _, rest = name.partition("(")
        head = os.path.basename(head)
        name = f"{head}({rest}"
    return name if len(name) <= width else "..." + name[-(width - 3):]


def _import_matplotlib() -> type[Figure]:
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            "nbrmm.plot needs matplotlib to draw plots: pip install 'nbrmm[plot]' "
            "(or pip install matplotlib)"
        ) from e
    return Figure


def plot_log(
    logs: _Path | Sequence[_Path],
    output: _Path,
    *,
    profile: _RecordsLike | _Path | None = None,
    title: str | None = None,
    top: int = 12,
) -> list[Timeline]:
    """Draw the bytes in use over time of one or more logs into an image file.

    Parameters
    ----------
    logs : str, os.PathLike or list of them
        Logging adaptor CSV files (e.g. one per device); each is a line of the plot.
    output : str or os.PathLike
        The image to write; the format follows the suffix (``.png``, ``.svg``, ...).
    profile : ProfilerRecords, dict, str or os.PathLike, optional
        Profiler records (or a JSON file from :func:`write_profile`): adds a panel with
        the peak bytes of each profiled function or block.
    title : str, optional
        The title; by default the log's file name.
    top : int, optional
        How many profiled names to show, largest peak first.

    Returns
    -------
    list of Timeline
        The timeline of each log.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    """
    Figure = _import_matplotlib()
    if isinstance(logs, (str, os.PathLike)):
        logs = [logs]
    paths = [os.fspath(p) for p in logs]
    if not paths:
        raise ValueError("logs: expected at least one log file")
    timelines = [memory_timeline(read_log(p)) for p in paths]
    if isinstance(profile, (str, os.PathLike)):
        profile = read_profile(profile)
    records = _records_dict(profile) if profile is not None else {}

    peak = max(t.peak_bytes for t in timelines)
    factor, unit = _byte_unit(peak)
    end = max([t.times[-1] for t in timelines if t.times] + [0.0])
    time_units = ((1e-3, 1e6, "µs"), (1.0, 1e3, "ms"), (float("inf"), 1.0, "s"))
    tscale, tunit = next((scale, name) for limit, scale, name in time_units if end < limit)
    panels = 2 if records else 1
    fig = Figure(figsize=(10, 4.2 * panels), layout="constrained")
    axes = fig.subplots(panels, 1, squeeze=False)[:, 0]

    ax = axes[0]
    for path, tl in zip(paths, timelines):
        label = os.path.basename(path)
        if tl.times:
            xs = [0.0] + [t * tscale for t in tl.times]
            ys = [0.0] + [v / factor for v in tl.bytes_in_use]
            line = ax.step(xs, ys, where="post", linewidth=1.2, label=label)[0]
            ax.fill_between(xs, ys, step="post", alpha=0.2, color=line.get_color())
            at = (tl.peak_time * tscale, tl.peak_bytes / factor)
            ax.plot([at[0]], [at[1]], "v", color=line.get_color())
            ax.annotate(
                f"peak {tl.peak_bytes / factor:,.1f} {unit}",
                at,
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=9,
            )
        if tl.failures:
            ax.plot(
                [t * tscale for t, _ in tl.failures],
                [0.0] * len(tl.failures),
                "x",
                color="red",
                markersize=8,
                label=f"{label}: failed allocations ({len(tl.failures)})",
            )
    ax.set_xlabel(f"time since the first event ({tunit})")
    ax.set_ylabel(f"bytes in use ({unit})")
    ax.set_ylim(0, max(peak / factor * 1.12, 1.0))
    ax.grid(True, alpha=0.3)
    counts = ", ".join(f"{t.allocations:,} allocations, {t.frees:,} frees" for t in timelines)
    names = ", ".join(os.path.basename(p) for p in paths)
    ax.set_title(title if title is not None else f"{names}: {counts}")
    if len(paths) > 1 or any(t.failures for t in timelines):
        ax.legend(loc="upper left", fontsize=9)

    if records:
        bx = axes[1]
        ordered = sorted(records.items(), key=lambda kv: kv[1]["memory_peak"], reverse=True)[:top]
        ordered.reverse()  # largest on top
        pfactor, punit = _byte_unit(max(r["memory_peak"] for _, r in ordered) if ordered else 0)
        bar_names = [_short_name(n) for n, _ in ordered]
        peaks = [r["memory_peak"] / pfactor for _, r in ordered]
        bars = bx.barh(bar_names, peaks, color="tab:orange")
        for bar, (_, r) in zip(bars, ordered):
            bx.annotate(
                f" {r['num_calls']:,} call{'s' if r['num_calls'] != 1 else ''}",
                (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                va="center",
                fontsize=8,
            )
        bx.set_xlabel(f"peak bytes in use during one call, the highest of all calls ({punit})")
        bx.set_title("peak memory by profiled function or block")
        bx.grid(True, axis="x", alpha=0.3)

    fig.savefig(os.fspath(output), dpi=120)
    return timelines


def main(argv: list[str] | None = None) -> int:
    """``python -m nbrmm.plot``: see the module documentation."""
    parser = argparse.ArgumentParser(
        prog="python -m nbrmm.plot",
        description="Plot the bytes in use over time from LoggingResourceAdaptor CSV logs.",
    )
    parser.add_argument("logs", nargs="+", help="CSV log file(s) written by LoggingResourceAdaptor")
    parser.add_argument(
        "-o", "--output", help="image to write (default: the first log with suffix .png)"
    )
    parser.add_argument(
        "--profile", help="profiler records (JSON from nbrmm.plot.write_profile) to add"
    )
    parser.add_argument("--title", help="plot title")
    args = parser.parse_args(argv)
    output = args.output or os.path.splitext(args.logs[0])[0] + ".png"
    try:
        timelines = plot_log(args.logs, output, profile=args.profile, title=args.title)
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for path, tl in zip(args.logs, timelines):
        print(
            f"{path}: {tl.allocations} allocations, {tl.frees} frees, "
            f"{len(tl.failures)} failures, peak {tl.peak_bytes} bytes at {tl.peak_time:.6f} s"
        )
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
