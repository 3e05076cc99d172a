"""Snapshots in PyTorch's CUDA memory-snapshot format: :meth:`Snapshot.dump` and
:meth:`Snapshot.load`.

:func:`dump` writes the dictionary that ``torch.cuda.memory._snapshot()`` returns, pickled
as ``torch.cuda.memory._dump_snapshot()`` pickles it, so that PyTorch's own tools open the
file: the viewer at https://pytorch.org/memory_viz (drag the file onto the page; nothing is
uploaded) and ``torch.cuda._memory_viz`` (``trace_plot``, ``segment_plot``, ``segsum``,
``trace``, and its command line ``python -m torch.cuda._memory_viz trace_plot FILE``).
The same file holds nbrmm's whole snapshot under the key ``"nbrmm"``, so that
:func:`load` gives back an equal :class:`~nbrmm.memory.Snapshot`. :func:`load` also reads
a pickle written by PyTorch itself.

Versions
--------
The layout is that of PyTorch 2.1 and later (the releases whose
``_record_memory_history(enabled, context, stacks, max_entries)`` records frames per
block): top-level ``segments`` and ``device_traces``; blocks that carry their ``frames``
and ``requested_size`` (PyTorch 1.13 and 2.0 kept them in a per-block ``history`` list,
which PyTorch's readers still accept); trace entries with ``time_us``. Keys that later
versions added are written too, and readers that predate them ignore them:
``allocator_settings`` (shown by the viewer's settings view), ``segment_pool_id`` and
``is_expandable`` on segments, and ``user_metadata`` on trace entries and blocks (the
string that ``torch.cuda.memory._set_memory_metadata`` records, which the viewer prints
as "User Metadata"). ``compile_context`` and ``forward_frames`` (torch.compile and
autograd information) are left out: nbrmm has nothing to put there. The file is pickled
with protocol 4 and holds only dicts, lists, tuples, strings, integers, booleans and None:
the in-browser viewer unpickles it with a small reader of its own that knows protocols 2
to 4 and no class objects. The format was checked against PyTorch 2.13's
``torch.cuda._memory_viz``.

What each field holds here
--------------------------
``device_traces``
    One list per device index, from 0 to the highest CUDA device that the snapshot
    mentions (at least one list). Host memory (nbrmm's device -1) gets the index after the
    last CUDA device, as PyTorch's own ``profile_plot`` places CPU memory: the viewers
    show it as one more device. Each event of :attr:`Snapshot.events`, oldest first,
    becomes entries of its device's list:

    - ``"alloc"`` for an allocation;
    - ``"free_requested"`` followed by ``"free_completed"`` for a free (nbrmm frees at
      once, so both carry the same time);
    - ``"oom"`` for a failed allocation, with ``device_free`` 0 (nbrmm does not know how
      much memory was free) and no ``addr``, as PyTorch writes it.

    Every entry has ``addr`` (the address), ``size`` (bytes), ``stream`` (the stream
    handle), ``time_us`` (``time_ns // 1000``), ``frames`` (see below), ``user_metadata``
    (``"tag=TAG library=LIBRARY"``) and ``category`` (the tag). The viewer's timeline
    colours allocations by ``category`` and shows the tags in a legend, as it does for
    the categories of ``profile_plot``. Each non-empty list ends with one ``"snapshot"``
    entry (the moment the snapshot was taken, given the time of the newest event) of
    category ``"unknown"``: the viewer colours blocks of no category (live allocations
    whose allocation event is not in the history) as ``"unknown"``, and stops with an
    error if categories are used and that one is missing.
``frames``
    The recorded Python frames, innermost first as in PyTorch, after one synthetic first
    frame that carries the tag where every version of the viewers shows it:
    ``{"filename": "<nbrmm tag=TAG>", "line": 0, "name": LIBRARY}``, displayed as
    ``<nbrmm tag=preprocess>:0:cupy``. The tag is in the file name because the viewers
    hide frames whose function name contains ``_start`` or ``PyEval_`` (and a few other
    names of interpreter internals). :func:`load` removes this frame again.
``segments``
    nbrmm does not see how the upstream resource carves its memory, so segments are the
    address ranges that the snapshot's allocations covered: per device, the union of the
    ranges of the live allocations and of every allocation and free in the history
    (overlapping or adjacent ranges merged). Each range is one segment (``segment_type``
    ``"large"`` from 1 MiB, ``segment_pool_id`` ``(0, 0)``, ``stream`` that of its first
    live allocation); its ``blocks`` are the live allocations (``state`` ``"active_allocated"``,
    ``size`` and ``requested_size`` the allocation's size, the ``frames`` and
    ``user_metadata`` of its allocation) and the gaps between them (``"inactive"``), so
    that every block the viewer's "Allocator State History" replays lies in a segment. A
    live allocation overlapping another one (its free was not recorded) is left out of
    the blocks.
``allocator_settings``
    What nbrmm knows of its resources: ``trace_alloc_overflowed`` (events were dropped),
    ``nbrmm_dropped_events`` and ``nbrmm_resources`` (one line per resource of each
    device's chain).
``nbrmm``
    The whole :class:`~nbrmm.memory.Snapshot` as plain data (format ``version`` 1):
    ``events``, ``allocations`` (dicts of the dataclasses' fields, frames as
    ``(filename, line, name)`` tuples), ``resources``, ``dropped_events`` and
    ``host_device_index`` (where device -1 went in ``device_traces``). PyTorch's tools
    ignore it.

A pickle written by PyTorch (no ``"nbrmm"`` key) is read from its ``device_traces``
(``alloc``, ``free_completed`` and ``oom`` entries; a free whose allocation is not in the
trace is marked ``before_recording``) and its segments' ``active_allocated`` blocks (the
live allocations), with tag and library ``"torch"``; it has no resources and no count of
dropped events. (A file of nbrmm's whose ``"nbrmm"`` entry was removed is read the same
way, and gets its tags and libraries back from the synthetic frames.)

Limits
------
:func:`load` reads a file of untrusted origin safely: it unpickles plain data only, and
refuses (:class:`SnapshotFormatError`) a file that holds more entries (trace entries,
events, allocations, resources, segments, blocks and frames, each list of frames counted
once however many entries share it) than it has bytes, which only shared references
could make it hold, before reading them. Devices are -1 (host) to :data:`MAX_DEVICE`,
addresses, sizes and streams unsigned 64-bit integers, times signed 64-bit nanoseconds
and line numbers C ints; :func:`dump` refuses other devices too.
"""

from __future__ import annotations

import io
import os
import pickle
import reprlib
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from nbrmm.memory._snapshot import Allocation, Event, Frame, ResourceInfo, Snapshot, check_path

__all__ = ["FORMAT_VERSION", "SnapshotFormatError", "dump", "from_dict", "load", "to_dict"]

#: The version of the layout under the ``"nbrmm"`` key.
FORMAT_VERSION = 1
#: The pickle protocol: the newest that PyTorch's in-browser viewer reads.
PICKLE_PROTOCOL = 4
#: The file name of the synthetic first frame that carries the tag: ``<nbrmm tag=TAG>``.
TAG_FRAME_PREFIX = "<nbrmm tag="
TAG_FRAME_SUFFIX = ">"

_Path: TypeAlias = str | os.PathLike[str]
_Dict: TypeAlias = dict[str, Any]
_FrameTuple: TypeAlias = tuple[str, int, str]

_LARGE_SEGMENT = 1 << 20  # PyTorch's "large" segments: 1 MiB and up

#: The most entries (trace entries, events, allocations, resources, segments, blocks and
#: frames, each list of frames counted once however many entries share it) that
#: :func:`from_dict` reads. :func:`load` allows one entry per byte of the file instead: a
#: pickle of that size holds no more without shared references, which could otherwise
#: make reading it take hours.
MAX_ENTRIES = 100_000_000
#: The highest device number read (host memory is device -1).
MAX_DEVICE = 2**16 - 1

# The ranges of the integers read, inclusive: addresses, sizes, streams and counts are
# unsigned 64-bit, times signed 64-bit nanoseconds, line numbers C ints.
_U64 = (0, 2**64 - 1)
_I64 = (-(2**63), 2**63 - 1)
_TIME_US = (-((2**63 - 1) // 1000), (2**63 - 1) // 1000)  # in range once times 1000
_C_INT = (-(2**31), 2**31 - 1)
_DEVICE = (-1, MAX_DEVICE)
_DEPTH = (0, 2**31 - 1)


class SnapshotFormatError(ValueError):
    """The file is not a memory snapshot that :func:`load` can read."""


class _Budget:
    """The entries a snapshot may still hold (see :data:`MAX_ENTRIES`), and the frames of
    each list of frames read so far (by identity: a list shared by many entries is read
    once)."""

    def __init__(self, max_entries: int, limit: str) -> None:
        self.limit = limit
        self.left = max_entries
        self.frames: dict[int, tuple[object, tuple[Frame, ...]]] = {}

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise SnapshotFormatError(
                "too many entries (events, allocations, segment blocks, frames): more "
                f"than {self.limit}"
            )


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


def dump(snapshot: Snapshot, path: _Path) -> None:
    """Write ``snapshot`` to ``path`` in PyTorch's memory-snapshot pickle format.

    Parameters
    ----------
    snapshot : Snapshot
        What to write.
    path : str or os.PathLike
        The file to write (replaced if it exists, once the pickle is made).

    Raises
    ------
    TypeError
        ``path`` is not a str or os.PathLike.
    ValueError
        A device is out of range (see :func:`to_dict`).
    """
    check_path(path)
    data = pickle.dumps(to_dict(snapshot), protocol=PICKLE_PROTOCOL)
    with open(path, "wb") as f:
        f.write(data)


def to_dict(snapshot: Snapshot) -> _Dict:
    """The dictionary that :func:`dump` pickles (see the module documentation).

    Parameters
    ----------
    snapshot : Snapshot
        The snapshot to convert.

    Returns
    -------
    dict
        ``segments``, ``device_traces``, ``allocator_settings`` and ``nbrmm``, as
        ``torch.cuda.memory._snapshot()`` returns them (plus ``nbrmm``).

    Raises
    ------
    ValueError
        An event or allocation is on a device other than -1 (host) to
        :data:`MAX_DEVICE`.
    """
    devices = {e.device for e in snapshot.events} | {a.device for a in snapshot.allocations}
    for d in sorted(devices):
        if not _DEVICE[0] <= d <= _DEVICE[1]:
            raise ValueError(f"device {d}: nbrmm writes devices -1 (host) to {MAX_DEVICE}")
    host_index = max((d for d in devices if d >= 0), default=0) + 1
    has_host = -1 in devices

    def index(device: int) -> int:
        return host_index if device < 0 else device

    writer = _TorchWriter()
    traces: list[list[_Dict]] = [[] for _ in range(host_index + (1 if has_host else 0))]
    for e in snapshot.events:
        trace = traces[index(e.device)]
        time_us = e.time_ns // 1000
        frames = writer.frames(e.tag, e.library, e.frames)
        meta = _user_metadata(e.tag, e.library)
        if e.action == "alloc":
            trace.append(writer.entry("alloc", e, time_us, frames, meta))
        elif e.action == "free":
            trace.append(writer.entry("free_requested", e, time_us, frames, meta))
            trace.append(writer.entry("free_completed", e, time_us, frames, meta))
        elif e.action == "failed_alloc":
            trace.append(
                {
                    "action": "oom",
                    "device_free": 0,
                    "size": e.size,
                    "stream": e.stream,
                    "time_us": time_us,
                    "frames": frames,
                    "user_metadata": meta,
                    "category": e.tag,
                }
            )
        else:
            raise ValueError(f"unknown event action {e.action!r}")
    if snapshot.events:
        last_us = max(e.time_ns for e in snapshot.events) // 1000
        for trace in traces:
            if trace:
                trace.append(
                    {
                        "action": "snapshot",
                        "addr": 0,
                        "size": 0,
                        "stream": 0,
                        "time_us": last_us,
                        "frames": [],
                        "category": "unknown",
                    }
                )

    live: dict[int, list[Allocation]] = {}
    ranges: dict[int, list[tuple[int, int]]] = {}
    for a in snapshot.allocations:
        live.setdefault(index(a.device), []).append(a)
        ranges.setdefault(index(a.device), []).append((a.address, a.size))
    for e in snapshot.events:
        device_ranges = ranges.setdefault(index(e.device), [])
        if e.action in ("alloc", "free"):
            device_ranges.append((e.address, e.size))
    segments: list[_Dict] = []
    for device in sorted(ranges):
        segments.extend(writer.segments(device, _merge(ranges[device]), live.get(device, [])))

    return {
        "segments": segments,
        "device_traces": traces,
        "allocator_settings": {
            "trace_alloc_overflowed": snapshot.dropped_events > 0,
            "nbrmm_dropped_events": snapshot.dropped_events,
            "nbrmm_resources": [_resource_line(r) for r in snapshot.resources],
        },
        "nbrmm": _encode(snapshot, host_index),
    }


class _TorchWriter:
    """Builds PyTorch's dictionaries, sharing the frame lists of one tuple of frames and
    tag (the pickle stores each once; PyTorch's readers never modify them)."""

    def __init__(self) -> None:
        # By the tuple's id: hashing it would read all its frames for every entry.
        self._frames: dict[tuple[str, str, int], list[_Dict]] = {}
        self._frame: dict[Frame, _Dict] = {}

    def frames(self, tag: str, library: str, frames: tuple[Frame, ...]) -> list[_Dict]:
        key = (tag, library, id(frames))
        if (found := self._frames.get(key)) is None:
            found = [
                {
                    "filename": f"{TAG_FRAME_PREFIX}{tag}{TAG_FRAME_SUFFIX}",
                    "line": 0,
                    "name": library,
                }
            ]
            for f in frames:
                if (d := self._frame.get(f)) is None:
                    d = self._frame[f] = {"filename": f.filename, "line": f.line, "name": f.name}
                found.append(d)
            self._frames[key] = found
        return found

    @staticmethod
    def entry(action: str, e: Event, time_us: int, frames: list[_Dict], meta: str) -> _Dict:
        # A new dict for every entry: the viewer rewrites some of their keys in place.
        return {
            "action": action,
            "addr": e.address,
            "size": e.size,
            "stream": e.stream,
            "time_us": time_us,
            "frames": frames,
            "user_metadata": meta,
            "category": e.tag,
        }

    def segments(
        self, device: int, ranges: list[tuple[int, int]], live: Sequence[Allocation]
    ) -> list[_Dict]:
        out = []
        by_address = sorted(live, key=lambda a: (a.address, a.time_ns))
        i = 0
        for start, end in ranges:
            blocks: list[_Dict] = []
            cursor = start
            allocated = 0
            stream: int | None = None
            while i < len(by_address) and by_address[i].address < end:
                a = by_address[i]
                i += 1
                if a.address < cursor:  # overlaps the previous block: cannot be laid out
                    continue
                if a.address > cursor:
                    blocks.append(_inactive(cursor, a.address - cursor))
                blocks.append(
                    {
                        "address": a.address,
                        "size": a.size,
                        "requested_size": a.size,
                        "state": "active_allocated",
                        "frames": self.frames(a.tag, a.library, a.frames),
                        "user_metadata": _user_metadata(a.tag, a.library),
                    }
                )
                allocated += a.size
                cursor = a.address + a.size
                if stream is None:
                    stream = a.stream
            if cursor < end:
                blocks.append(_inactive(cursor, end - cursor))
            out.append(
                {
                    "device": device,
                    "address": start,
                    "total_size": end - start,
                    "allocated_size": allocated,
                    "active_size": allocated,
                    "requested_size": allocated,
                    "stream": 0 if stream is None else stream,
                    "segment_type": "large" if end - start >= _LARGE_SEGMENT else "small",
                    "segment_pool_id": (0, 0),
                    "is_expandable": False,
                    "frames": [],
                    "blocks": blocks,
                }
            )
        return out


def _inactive(address: int, size: int) -> _Dict:
    return {
        "address": address,
        "size": size,
        "requested_size": 0,
        "state": "inactive",
        "frames": [],
    }


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of ``(address, size)`` ranges as sorted ``(start, end)`` pairs, neither
    overlapping nor adjacent.

    A range of size 0 counts as one byte, so that every address the history names lies in
    a segment.
    """
    merged: list[tuple[int, int]] = []
    for start, size in sorted(ranges):
        end = start + max(size, 1)
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _user_metadata(tag: str, library: str) -> str:
    return f"tag={tag} library={library}"


def _resource_line(r: ResourceInfo) -> str:
    parts = [f"device {r.device}", f"depth {r.depth}", r.name]
    for name in ("pool_size", "bytes_in_use", "limit"):
        if (value := getattr(r, name)) is not None:
            parts.append(f"{name}={value}")
    return " ".join(parts)


class _FrameTuples:
    """The ``(filename, line, name)`` lists of tuples of frames, one list per tuple (by
    its id: entries share tuples, and the pickle stores each list once)."""

    def __init__(self) -> None:
        self._lists: dict[int, list[_FrameTuple]] = {}
        self._tuples: dict[Frame, _FrameTuple] = {}

    def __call__(self, frames: tuple[Frame, ...]) -> list[_FrameTuple]:
        if (found := self._lists.get(id(frames))) is None:
            found = self._lists[id(frames)] = []
            for f in frames:
                if (t := self._tuples.get(f)) is None:
                    t = self._tuples[f] = (f.filename, f.line, f.name)
                found.append(t)
        return found


def _encode(snapshot: Snapshot, host_index: int) -> _Dict:
    frame_tuples = _FrameTuples()
    return {
        "version": FORMAT_VERSION,
        "events": [
            {
                "time_ns": e.time_ns,
                "action": e.action,
                "address": e.address,
                "size": e.size,
                "device": e.device,
                "stream": e.stream,
                "tag": e.tag,
                "library": e.library,
                "frames": frame_tuples(e.frames),
                "before_recording": e.before_recording,
            }
            for e in snapshot.events
        ],
        "allocations": [
            {
                "time_ns": a.time_ns,
                "address": a.address,
                "size": a.size,
                "device": a.device,
                "stream": a.stream,
                "tag": a.tag,
                "library": a.library,
                "frames": frame_tuples(a.frames),
            }
            for a in snapshot.allocations
        ],
        "resources": [
            {
                "device": r.device,
                "depth": r.depth,
                "name": r.name,
                "pool_size": r.pool_size,
                "bytes_in_use": r.bytes_in_use,
                "limit": r.limit,
            }
            for r in snapshot.resources
        ],
        "dropped_events": snapshot.dropped_events,
        "host_device_index": host_index,
    }


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain data only: a memory snapshot holds no class objects, and refusing
    them keeps a hostile file from running code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"a memory snapshot holds plain data only, not {module}.{name}"
        )


#: C stack a level of nesting may take while CPython hashes a nested tuple (it recurses
#: without a limit); measured at 40 to 85 bytes on x86-64.
_STACK_PER_LEVEL = 128


def _unpickle(raw: bytes) -> object:
    """Unpickles plain data on a thread whose C stack holds as many levels of nesting as
    ``raw`` has bytes (each level takes one), so that a tuple nested a million deep as a
    dict key cannot overflow the stack while it is hashed. Where no such thread can be
    made, it unpickles here."""
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append((True, _PlainUnpickler(io.BytesIO(raw)).load()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller as it is
            outcome.append((False, e))

    stack = max(32 << 20, -(-(len(raw) * _STACK_PER_LEVEL) // 4096) * 4096)
    try:
        previous = threading.stack_size(stack)
        try:
            worker = threading.Thread(target=work, name="nbrmm.memory.load")
            worker.start()
        finally:
            threading.stack_size(previous)
    except (RuntimeError, ValueError, MemoryError):
        return _PlainUnpickler(io.BytesIO(raw)).load()
    worker.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def load(path: _Path) -> Snapshot:
    """Read a snapshot written by :func:`dump` or by PyTorch's
    ``torch.cuda.memory._dump_snapshot``.

    Parameters
    ----------
    path : str or os.PathLike
        The pickle file.

    Returns
    -------
    Snapshot
        The snapshot: for nbrmm's files, equal to the one written; for PyTorch's, built
        from its trace and segments (see the module documentation).

    Raises
    ------
    TypeError
        ``path`` is not a str or os.PathLike.
    OSError
        The file cannot be read.
    SnapshotFormatError
        The file is not a pickled memory snapshot, or holds more entries (events,
        allocations, segment blocks, frames) than it has bytes: only shared references
        could make it hold so many.
    """
    with open(check_path(path), "rb") as f:
        raw = f.read()
    try:
        data = _unpickle(raw)
    # Unpickling garbage fails in many ways (UnpicklingError, EOFError, ValueError,
    # KeyError, IndexError, ...): each of them means that this is no snapshot pickle.
    except Exception as e:
        raise SnapshotFormatError(
            f"{os.fspath(path)}: not a memory snapshot pickle ({type(e).__name__}: {e})"
        ) from e
    budget = _Budget(
        len(raw), f"a pickle of {len(raw)} bytes holds without shared references"
    )
    try:
        return _from_dict(data, budget)
    except SnapshotFormatError as e:
        raise SnapshotFormatError(f"{os.fspath(path)}: {e}") from e


def from_dict(data: object, *, max_entries: int = MAX_ENTRIES) -> Snapshot:
    """The :class:`~nbrmm.memory.Snapshot` of an unpickled memory snapshot.

    Parameters
    ----------
    data : object
        What :func:`to_dict` returned, or what ``torch.cuda.memory._snapshot()`` returns
        (a bare list of segments, as very old PyTorch versions wrote, is accepted too).
    max_entries : int, default MAX_ENTRIES
        The most entries to read (trace entries, events, allocations, resources,
        segments, blocks and frames, each list of frames counted once however many
        entries share it): more raise :class:`SnapshotFormatError` before they are read.

    Returns
    -------
    Snapshot

    Raises
    ------
    SnapshotFormatError
        ``data`` is not a memory snapshot, or holds more than ``max_entries`` entries.
    """
    return _from_dict(data, _Budget(max_entries, f"max_entries ({max_entries})"))


def _from_dict(data: object, budget: _Budget) -> Snapshot:
    if isinstance(data, list):
        data = {"segments": data, "device_traces": []}
    if not isinstance(data, dict):
        raise SnapshotFormatError(
            f"not a memory snapshot: a pickled {type(data).__name__}, not a dict"
        )
    try:
        if "nbrmm" in data:
            return _decode(data["nbrmm"], budget)
        if "segments" in data or "device_traces" in data:
            return _from_torch(data, budget)
    # RecursionError: a deeply nested value where a flat one belongs.
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as e:
        if isinstance(e, SnapshotFormatError):
            raise
        raise SnapshotFormatError(
            f"not a valid memory snapshot ({type(e).__name__}: {e})"
        ) from e
    raise SnapshotFormatError(
        "not a memory snapshot: no 'segments', 'device_traces' or 'nbrmm' key"
    )


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def _describe(value: object) -> str:
    """``value`` for an error message, shortened (a pickle may hold huge or deeply nested
    values)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    try:
        return _REPR.repr(value)
    except Exception:  # a huge integer inside a list, say
        return f"a {type(value).__name__}"


def _int(value: object, what: str, bounds: tuple[int, int]) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SnapshotFormatError(f"{what}: expected an integer, got {_describe(value)}")
    low, high = bounds
    if not low <= value <= high:
        raise SnapshotFormatError(
            f"{what}: expected an integer from {low} to {high}, got {_describe(value)}"
        )
    return value


def _opt_int(value: object, what: str, bounds: tuple[int, int]) -> int | None:
    return None if value is None else _int(value, what, bounds)


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise SnapshotFormatError(f"{what}: expected a string, got {_describe(value)}")
    return value


def _list(value: object, what: str, budget: _Budget) -> list[Any] | tuple[Any, ...]:
    """``value``, a list of entries, taken from ``budget`` before they are read."""
    if not isinstance(value, (list, tuple)):
        raise SnapshotFormatError(f"{what}: expected a list, got {_describe(value)}")
    budget.take(len(value))
    return value


def _frames(value: object, what: str, budget: _Budget) -> tuple[Frame, ...]:
    if (found := budget.frames.get(id(value))) is not None:
        return found[1]
    out = []
    for f in _list(value, what, budget):
        if isinstance(f, Mapping):
            f = (f["filename"], f["line"], f["name"])
        if not isinstance(f, (list, tuple)) or len(f) != 3:
            raise SnapshotFormatError(f"{what}: not a frame: {_describe(f)}")
        out.append(Frame(_str(f[0], what), _int(f[1], what, _C_INT), _str(f[2], what)))
    frames = tuple(out)
    budget.frames[id(value)] = (value, frames)  # value kept: its id stays its own
    return frames


def _decode(data: object, budget: _Budget) -> Snapshot:
    if not isinstance(data, dict):
        raise SnapshotFormatError("the 'nbrmm' entry is not a dict")
    version = data.get("version")
    if version != FORMAT_VERSION:
        raise SnapshotFormatError(
            f"nbrmm snapshot format version {_describe(version)}; "
            f"this nbrmm reads version {FORMAT_VERSION}"
        )
    events = []
    for e in _list(data["events"], "events", budget):
        action = _str(e["action"], "event action")
        if action not in ("alloc", "free", "failed_alloc"):
            raise SnapshotFormatError(f"unknown event action {_describe(action)}")
        before = e.get("before_recording", False)
        if not isinstance(before, bool):
            raise SnapshotFormatError(
                f"before_recording: expected a bool, got {_describe(before)}"
            )
        events.append(
            Event(
                time_ns=_int(e["time_ns"], "event time_ns", _I64),
                action=action,
                address=_int(e["address"], "event address", _U64),
                size=_int(e["size"], "event size", _U64),
                device=_int(e["device"], "event device", _DEVICE),
                stream=_int(e["stream"], "event stream", _U64),
                tag=_str(e["tag"], "event tag"),
                library=_str(e["library"], "event library"),
                frames=_frames(e.get("frames", ()), "event frames", budget),
                before_recording=before,
            )
        )
    allocations = [
        Allocation(
            time_ns=_int(a["time_ns"], "allocation time_ns", _I64),
            address=_int(a["address"], "allocation address", _U64),
            size=_int(a["size"], "allocation size", _U64),
            device=_int(a["device"], "allocation device", _DEVICE),
            stream=_int(a["stream"], "allocation stream", _U64),
            tag=_str(a["tag"], "allocation tag"),
            library=_str(a["library"], "allocation library"),
            frames=_frames(a.get("frames", ()), "allocation frames", budget),
        )
        for a in _list(data["allocations"], "allocations", budget)
    ]
    resources = [
        ResourceInfo(
            device=_int(r["device"], "resource device", _DEVICE),
            depth=_int(r["depth"], "resource depth", _DEPTH),
            name=_str(r["name"], "resource name"),
            pool_size=_opt_int(r.get("pool_size"), "resource pool_size", _U64),
            bytes_in_use=_opt_int(r.get("bytes_in_use"), "resource bytes_in_use", _U64),
            limit=_opt_int(r.get("limit"), "resource limit", _U64),
        )
        for r in _list(data["resources"], "resources", budget)
    ]
    return Snapshot(
        allocations=tuple(allocations),
        events=tuple(events),
        resources=tuple(resources),
        dropped_events=_int(data.get("dropped_events", 0), "dropped_events", _U64),
    )


def _torch_frames(value: object, budget: _Budget) -> tuple[str, str, tuple[Frame, ...]]:
    """Tag, library and frames of a PyTorch entry's ``frames``: ``"torch"`` twice, unless
    the first frame is the synthetic one that :func:`dump` writes."""
    frames = _frames(value if value is not None else (), "frames", budget)
    if (
        frames
        and frames[0].filename.startswith(TAG_FRAME_PREFIX)
        and frames[0].filename.endswith(TAG_FRAME_SUFFIX)
        and frames[0].line == 0
    ):
        tag = frames[0].filename[len(TAG_FRAME_PREFIX) : -len(TAG_FRAME_SUFFIX)]
        return tag, frames[0].name, frames[1:]
    return "torch", "torch", frames


def _block_frames(block: Mapping[str, Any]) -> object:
    if "frames" in block:
        return block["frames"]
    history = block.get("history")  # PyTorch 1.13 and 2.0
    if history:
        return history[0].get("frames", ())
    return ()


def _from_torch(data: Mapping[str, Any], budget: _Budget) -> Snapshot:
    traces = data.get("device_traces") or []
    if not isinstance(traces, list):
        raise SnapshotFormatError("'device_traces' is not a list")
    if len(traces) > MAX_DEVICE + 1:
        raise SnapshotFormatError(
            f"'device_traces' lists {len(traces)} devices; nbrmm reads devices 0 to "
            f"{MAX_DEVICE}"
        )
    budget.take(len(traces))
    keyed: list[tuple[int, int, int, Event]] = []
    live_alloc: dict[tuple[int, int], Event] = {}
    for device, trace in enumerate(traces):
        if not isinstance(trace, list):
            raise SnapshotFormatError(f"device_traces[{device}] is not a list")
        live: set[int] = set()
        for n, t in enumerate(_list(trace, f"device_traces[{device}]", budget)):
            action = t["action"]
            if action not in ("alloc", "free_completed", "free", "oom"):
                continue  # segment events, snapshot markers, free_requested: no counterpart
            time_ns = _int(t.get("time_us", 0), "time_us", _TIME_US) * 1000
            tag, library, frames = _torch_frames(t.get("frames"), budget)
            size = _int(t["size"], "size", _U64)
            stream = _int(t.get("stream", 0), "stream", _U64)
            if action == "oom":
                e = Event(time_ns, "failed_alloc", 0, size, device, stream, tag, library, frames)
            else:
                address = _int(t["addr"], "addr", _U64)
                if action == "alloc":
                    live.add(address)
                    e = Event(time_ns, "alloc", address, size, device, stream, tag, library, frames)
                    live_alloc[(device, address)] = e
                else:
                    before = address not in live
                    live.discard(address)
                    live_alloc.pop((device, address), None)
                    e = Event(
                        time_ns,
                        "free",
                        address,
                        size,
                        device,
                        stream,
                        tag,
                        library,
                        frames,
                        before_recording=before,
                    )
            keyed.append((time_ns, device, n, e))
    keyed.sort(key=lambda k: k[:3])

    allocations = []
    segments = data.get("segments") or []
    if not isinstance(segments, list):
        raise SnapshotFormatError("'segments' is not a list")
    budget.take(len(segments))
    for seg in segments:
        device = _int(seg.get("device", 0), "segment device", _DEVICE)
        address = _int(seg["address"], "segment address", _U64)
        stream = _int(seg.get("stream", 0), "segment stream", _U64)
        for b in _list(seg["blocks"], "segment blocks", budget):
            size = _int(b["size"], "block size", _U64)
            block_address = _int(b.get("address", address), "block address", _U64)
            address += size
            if b.get("state") != "active_allocated":
                continue
            requested = b.get("requested_size")
            if requested is None and b.get("history"):
                requested = b["history"][0].get("real_size")
            tag, library, frames = _torch_frames(_block_frames(b), budget)
            alloc = live_alloc.get((device, block_address))
            allocations.append(
                Allocation(
                    time_ns=alloc.time_ns if alloc is not None else 0,
                    address=block_address,
                    size=_int(size if requested is None else requested, "requested_size", _U64),
                    device=device,
                    stream=stream,
                    tag=tag,
                    library=library,
                    frames=frames,
                )
            )
    allocations.sort(key=lambda a: (a.address, a.device))
    return Snapshot(
        allocations=tuple(allocations),
        events=tuple(k[3] for k in keyed),
        resources=(),
        dropped_events=0,
    )
