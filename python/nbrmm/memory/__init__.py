"""Who holds the GPU memory: one allocation history for every library in the process.

nbrmm's resources are where CuPy, PyTorch, Numba, cuda.core, nbrmm buffers and C++
libraries get their memory, so nbrmm can record all of it in one place:

>>> import nbrmm.memory
>>> nbrmm.memory.record_history()                 # doctest: +SKIP
>>> with nbrmm.memory.tag("preprocess"):          # doctest: +SKIP
...     x = cupy.zeros(1 << 20)
>>> snap = nbrmm.memory.snapshot()                # doctest: +SKIP
>>> snap.bytes_by_tag()                           # doctest: +SKIP
{'preprocess': 8388608}
>>> snap.dump("memory.pickle")                    # PyTorch's memory_viz opens it  # doctest: +SKIP
>>> snap.to_html("memory.html")                   # doctest: +SKIP

What is recorded: every allocation and free made through nbrmm (``Buffer``,
``DeviceBuffer``, ``DeviceMemoryResource.allocate``, the CuPy, PyTorch and Numba hooks,
cuda.core through :mod:`nbrmm.interop`), whatever resource serves it, and those C++ code
makes through librmm's current resource where nbrmm set it. See the "Memory history"
guide.
"""

from __future__ import annotations

import contextlib
import operator
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from nbrmm import _nbrmm
from nbrmm._public import publish as _publish
from nbrmm.memory._oom import OutOfMemoryReport
from nbrmm.memory._resources import describe_chain, describe_from
from nbrmm.memory._snapshot import Allocation, Event, Frame, ResourceInfo, Snapshot
from nbrmm.memory._torch_format import SnapshotFormatError

__all__ = [
    "Allocation",
    "Event",
    "Frame",
    "OutOfMemoryReport",
    "ResourceInfo",
    "Snapshot",
    "SnapshotFormatError",
    "current_tag",
    "is_recording",
    "record_history",
    "snapshot",
    "tag",
]

_STACKS = ("python", "none")
_ACTIONS = ("alloc", "free", "failed_alloc")

_F = TypeVar("_F", bound=Callable[..., Any])


def record_history(
    enabled: bool = True,
    *,
    device: int | Sequence[int] | None = None,
    stacks: str = "python",
    max_events: int = 100_000,
) -> None:
    """Start (or stop) recording allocations and frees.

    Parameters
    ----------
    enabled : bool, default True
        True starts recording (a history that was stopped is dropped first; while
        recording, a call changes the settings and keeps the history); False stops it (the
        history stays readable with :func:`snapshot` until recording starts again).
    device : int or sequence of int, optional
        The devices to record; all devices (and host-memory resources) by default. While
        recording, a call naming devices adds them.
    stacks : {"python", "none"}, default "python"
        ``"python"`` records the Python frames of each allocation's caller (at most 32,
        innermost first); ``"none"`` records none (cheaper).
    max_events : int, default 100000
        The most events kept; older ones are dropped first (and counted in
        :attr:`Snapshot.dropped_events`). Live allocations are kept whatever the number.

    Raises
    ------
    TypeError
        If ``enabled`` is not a bool, ``device`` not an int or ints, ``stacks`` not a str
        or ``max_events`` not an int.
    ValueError
        If ``stacks`` is not one of its values, or ``max_events`` is negative, or a device
        does not exist.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled: expected a bool, got {type(enabled).__name__}")
    if not isinstance(stacks, str):
        raise TypeError(f"stacks: expected 'python' or 'none', got {type(stacks).__name__}")
    if stacks not in _STACKS:
        raise ValueError(f"stacks: expected 'python' or 'none', got {stacks!r}")
    max_events = _int_arg(max_events, "max_events", "an int")
    if max_events < 0:
        raise ValueError(f"max_events: must be 0 or more, got {max_events}")
    if max_events >= 2**63:
        raise ValueError(f"max_events: must be less than 2**63, got {max_events}")
    devices = _device_list(device)
    _nbrmm._history_configure(enabled, devices, stacks == "python", max_events)


def _int_arg(value: object, param: str, expected: str) -> int:
    """``value`` as an int (anything with ``__index__`` but a bool), or a TypeError naming
    ``param``."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise TypeError(f"{param}: expected {expected}, got {type(value).__name__}")


def _device_list(device: object) -> list[int] | None:
    if device is None:
        return None
    items: Sequence[Any] = (
        [device] if not isinstance(device, Sequence) or isinstance(device, str) else device
    )
    out = []
    for item in items:
        d = _int_arg(item, "device", "an int or a sequence of ints")
        count = _nbrmm.get_device_count()
        if not 0 <= d < max(count, 1) or (count == 0 and d != 0):
            raise ValueError(
                f"device: device {d} does not exist (this machine has {count} CUDA devices)"
            )
        out.append(int(d))
    return out


def is_recording() -> bool:
    """Whether :func:`record_history` is recording (any device)."""
    return _nbrmm._history_recording()


class tag(contextlib.ContextDecorator):
    """Attribute the allocations this thread makes inside it to ``name``.

    Nestable (the innermost tag wins) and per thread; allocations that CuPy, PyTorch or a
    C++ library make on this thread inside it carry the tag too. Also a decorator.

    Tags follow threads, not tasks: a generator or coroutine suspended inside a tag leaves
    it in place for the code that runs on its thread meanwhile (asyncio tasks of one loop
    share their thread's tags), and a tag is left on the thread that entered it.

    Parameters
    ----------
    name : str
        The tag.

    Raises
    ------
    TypeError
        If ``name`` is not a str.
    RuntimeError
        On leaving it on a thread that did not enter it.

    Examples
    --------
    >>> with nbrmm.memory.tag("preprocess"):      # doctest: +SKIP
    ...     features = cupy.asarray(table)
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name: expected a str, got {type(name).__name__}")
        self.name = name
        self._local = threading.local()  # this thread's tokens, one per entered `with`

    def __enter__(self) -> tag:
        tokens = self._local.__dict__.setdefault("tokens", [])
        tokens.append(_nbrmm._history_push_tag(self.name))  # (kept as UTF-8, escaped)
        return self

    def __exit__(self, *exc: object) -> None:
        tokens = self._local.__dict__.get("tokens")
        if not tokens:
            raise RuntimeError(
                f"{self!r} is left on a thread that did not enter it (a tag is left on "
                "the thread that entered it)"
            )
        _nbrmm._history_pop_tag(tokens.pop())

    def __repr__(self) -> str:
        return f"nbrmm.memory.tag({self.name!r})"


def current_tag() -> str | None:
    """The innermost :class:`tag` of this thread, or None."""
    return _nbrmm._history_current_tag()


def snapshot() -> Snapshot:
    """The memory history now: live allocations, events and the current resources.

    Works while recording and after :func:`record_history` stopped it (then it is the
    history up to the stop). Without any recording, the allocations and events are empty.

    Returns
    -------
    Snapshot
    """
    strings, frames_raw, stacks_raw, events_raw, live_raw, dropped = _nbrmm._history_data()
    frames = [Frame(strings[f], line, strings[n]) for f, line, n in frames_raw]
    stacks = [tuple(frames[i] for i in s) for s in stacks_raw]
    events = [
        Event(
            time_ns=t,
            action=_ACTIONS[a],
            address=addr,
            size=size,
            device=dev,
            stream=stream,
            tag=strings[tg],
            library=strings[lib],
            frames=stacks[st],
            before_recording=before,
        )
        for t, a, addr, size, dev, stream, tg, lib, st, before in (*events_raw, *live_raw)
    ]
    # The live allocations, from their alloc events (which follow the history's).
    live = events[len(events_raw) :]
    allocations = tuple(
        sorted(
            (
                Allocation(
                    e.time_ns, e.address, e.size, e.device, e.stream, e.tag, e.library, e.frames
                )
                for e in live
            ),
            key=lambda a: (a.device, a.address),
        )
    )
    events = events[: len(events_raw)]
    return Snapshot(
        allocations=allocations,
        events=tuple(events),
        resources=tuple(_resource_chains()),
        dropped_events=dropped,
    )


def _resource_chains() -> Iterator[ResourceInfo]:
    """The current resource chain of every device (of device 0 without a GPU)."""
    count = _nbrmm.get_device_count()
    if count == 0:  # no GPU: the current resource (a host-memory one, or none usable)
        yield from describe_from(_nbrmm.get_current_device_resource(), -1)
    for device in range(count):
        yield from describe_chain(device)


def _register_hook(function: types.FunctionType | Callable[..., Any], library: str) -> None:
    """Attribute the allocations made under ``function`` (a Python hook of nbrmm) to
    ``library``."""
    code = getattr(function, "__code__", None)
    if code is not None:
        _nbrmm._history_add_hook(code, library)


_publish("nbrmm.memory", globals(), __all__)
