"""What :func:`nbrmm.memory.snapshot` returns: the live allocations, the event history and
the resources of the current chain, as plain immutable Python objects."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from typing import TypeVar


@dataclasses.dataclass(frozen=True)
class Frame:
    """One Python frame of the code that made an allocation."""

    filename: str
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line} ({self.name})"


@dataclasses.dataclass(frozen=True)
class Event:
    """One allocation, free or failed allocation, in the order they happened.

    Attributes
    ----------
    time_ns : int
        When (``time.time_ns()``'s clock).
    action : str
        ``"alloc"``, ``"free"`` or ``"failed_alloc"`` (an allocation that raised, for lack
        of memory or otherwise).
    address : int
        The device address (0 for a failed allocation).
    size : int
        Bytes asked for (freed, for ``"free"``).
    device : int
        The CUDA device the memory is on (-1 for a host-memory resource).
    stream : int
        The handle of the stream the call was ordered on.
    tag : str
        The innermost :func:`nbrmm.memory.tag` of the allocating thread, or the library
        (``library``) where none was active. A free carries its allocation's tag.
    library : str
        Who made the call: ``"nbrmm"``, ``"cupy"``, ``"torch"``, ``"numba"``,
        ``"cuda.core"`` or ``"native"`` (C++ code allocating from librmm's current
        resource).
    frames : tuple of Frame
        The Python frames of the caller, innermost first (empty for native callers, for
        frees, and with ``stacks="none"``).
    before_recording : bool
        For a free: the memory was allocated before recording started (so its allocation
        is not in the history).
    """

    time_ns: int
    action: str
    address: int
    size: int
    device: int
    stream: int
    tag: str
    library: str
    frames: tuple[Frame, ...] = ()
    before_recording: bool = False


@dataclasses.dataclass(frozen=True)
class Allocation:
    """One live allocation made while recording (see :class:`Event` for the fields)."""

    time_ns: int
    address: int
    size: int
    device: int
    stream: int
    tag: str
    library: str
    frames: tuple[Frame, ...] = ()

    @property
    def site(self) -> Frame | None:
        """The call site: the innermost frame outside nbrmm and the libraries that
        allocate through it (CuPy, PyTorch, Numba, cuda.core), or the innermost frame
        where all are theirs; None without frames."""
        return call_site(self.frames)


#: Frames of the allocating libraries and of nbrmm, which are not call sites: files of
#: those packages where installed (a site-packages or dist-packages folder), and nbrmm's
#: own files wherever it is (an editable install).
_LIBRARY_FILE = re.compile(
    r"[/\\](?:site|dist)-packages[/\\]"
    r"(?:nbrmm|cupy|cupy_backends|torch|numba|numba_cuda|cuda|dask|distributed)[/\\]"
)
_NBRMM_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def _library_frame(frame: Frame) -> bool:
    return frame.filename.startswith(_NBRMM_DIR) or _LIBRARY_FILE.search(frame.filename) is not None


def check_path(path: object) -> str | os.PathLike[str]:
    """``path`` if it is a str or an os.PathLike, else a TypeError naming ``path`` (an int
    would be taken for a file descriptor and closed)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__}")
    return path


def call_site(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost of ``frames`` outside nbrmm and the allocating libraries."""
    for frame in frames:
        if not _library_frame(frame):
            return frame
    return frames[0] if frames else None


@dataclasses.dataclass(frozen=True)
class ResourceInfo:
    """What one resource of a device's current chain knows, outermost first.

    Attributes
    ----------
    device : int
        The device whose current resource chain this is.
    depth : int
        0 for the current resource, 1 for its upstream, and so on.
    name : str
        The class name (``"PoolMemoryResource"``).
    pool_size : int or None
        Bytes a pool holds from its upstream (pools and arenas), else None.
    bytes_in_use : int or None
        Bytes allocated and not yet freed, where the resource counts them (statistics,
        tracking and limiting adaptors), else None.
    limit : int or None
        The most bytes it may hand out (a limiting adaptor's limit, a pool's maximum),
        else None.
    """

    device: int
    depth: int
    name: str
    pool_size: int | None = None
    bytes_in_use: int | None = None
    limit: int | None = None


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The memory history at one moment.

    Attributes
    ----------
    allocations : tuple of Allocation
        The allocations made while recording and not yet freed, by address.
    events : tuple of Event
        The history, oldest first (at most ``max_events`` of the newest).
    resources : tuple of ResourceInfo
        The current resource chain of each device.
    dropped_events : int
        Events left out because the history held ``max_events`` already.
    """

    allocations: tuple[Allocation, ...] = ()
    events: tuple[Event, ...] = ()
    resources: tuple[ResourceInfo, ...] = ()
    dropped_events: int = 0

    def bytes_by_tag(self) -> dict[str, int]:
        """Live bytes per tag, largest first."""
        return _largest_first((a.tag, a.size) for a in self.allocations)

    def bytes_by_site(self) -> dict[Frame | None, int]:
        """Live bytes per call site (:attr:`Allocation.site`; None where no frames were
        recorded), largest first."""
        return _largest_first((a.site, a.size) for a in self.allocations)

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Write the snapshot in PyTorch's memory-snapshot pickle format.

        PyTorch's tools open the file: https://pytorch.org/memory_viz in a browser, and
        ``torch.cuda._memory_viz`` (``trace_plot``, ``segment_plot``).
        """
        from nbrmm.memory._torch_format import dump

        dump(self, path)

    def to_html(self, path: str | os.PathLike[str]) -> None:
        """Write a self-contained HTML page: the timeline of live bytes stacked by tag and
        the top call sites."""
        from nbrmm.memory._html import write_html

        write_html(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Snapshot:
        """Read a snapshot written by :meth:`dump`, or a pickle of PyTorch's own
        ``torch.cuda.memory._snapshot()`` (tagged ``"torch"``).

        Raises
        ------
        ValueError
            If the file is not a memory snapshot (``SnapshotFormatError``).
        OSError
            If it cannot be read.
        """
        from nbrmm.memory._torch_format import load

        return load(path)


_K = TypeVar("_K")


def _largest_first(pairs: Iterable[tuple[_K, int]]) -> dict[_K, int]:
    totals: dict[_K, int] = {}
    for key, size in pairs:
        totals[key] = totals.get(key, 0) + size
    return dict(sorted(totals.items(), key=lambda kv: kv[1], reverse=True))
