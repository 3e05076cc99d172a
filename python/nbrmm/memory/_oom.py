"""Out-of-memory reports: what was asked, of which resource, and what holds the memory.

When an allocation through nbrmm fails for lack of memory, nbrmm calls :func:`annotate`
on the :class:`nbrmm.OutOfMemory` on its way to Python: its message gains a few lines
(the request, the resource chain's pool sizes, bytes in use and limits, and, while the
memory history records, the tags and call sites holding the most live bytes), and the
full :class:`OutOfMemoryReport` becomes its ``report`` attribute.
"""

from __future__ import annotations

import dataclasses

from nbrmm import _nbrmm
from nbrmm.memory._resources import describe_from
from nbrmm.memory._snapshot import Frame, ResourceInfo

#: Tags and call sites named in the message (the report has them all).
_TOP = 3


def format_bytes(n: int) -> str:
    """``n`` bytes in binary units, e.g. ``"1.5 GiB"``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


@dataclasses.dataclass(frozen=True)
class OutOfMemoryReport:
    """What nbrmm knew when an allocation failed for lack of memory.

    Attributes
    ----------
    requested : int
        Bytes asked for.
    device : int
        The device of the resource (-1 where it has none, e.g. host memory).
    stream : int
        The handle of the stream the allocation was ordered on.
    resource : str
        The class of the resource asked.
    reason : str
        What the resource said (librmm's message).
    chain : tuple of ResourceInfo
        The resource and its upstreams, outermost first: pool sizes, bytes in use, limits.
    recording : bool
        Whether the memory history was recording (the two mappings below are empty
        otherwise).
    bytes_by_tag : dict of str to int
        Live bytes per tag, largest first.
    bytes_by_site : dict of Frame or None to int
        Live bytes per call site, largest first.
    """

    requested: int
    device: int
    stream: int
    resource: str
    reason: str
    chain: tuple[ResourceInfo, ...] = ()
    recording: bool = False
    bytes_by_tag: dict[str, int] = dataclasses.field(default_factory=dict)
    bytes_by_site: dict[Frame | None, int] = dataclasses.field(default_factory=dict)

    def lines(self) -> list[str]:
        """The report as the lines the error message adds."""
        where = f"device {self.device}" if self.device >= 0 else "no device"
        out = [
            f"asked {self.resource} for {format_bytes(self.requested)} on {where}, "
            f"stream 0x{self.stream:x}"
        ]
        out.append("resource chain: " + " -> ".join(_describe(r) for r in self.chain))
        if self.recording:
            tags = list(self.bytes_by_tag.items())[:_TOP]
            sites = list(self.bytes_by_site.items())[:_TOP]
            out.append(
                "live bytes by tag: "
                + (", ".join(f"{t} {format_bytes(n)}" for t, n in tags) or "none recorded")
            )
            if sites:
                out.append(
                    "top call sites: "
                    + "; ".join(f"{s or '(no Python frames)'} {format_bytes(n)}" for s, n in sites)
                )
        else:
            out.append("(nbrmm.memory.record_history() adds the tags and call sites holding it)")
        return out

    def __str__(self) -> str:
        return "\n".join([self.reason, *self.lines()])


def _describe(r: ResourceInfo) -> str:
    facts = []
    if r.pool_size is not None:
        facts.append(f"pool {format_bytes(r.pool_size)}")
    if r.bytes_in_use is not None:
        facts.append(f"in use {format_bytes(r.bytes_in_use)}")
    if r.limit is not None:
        facts.append(f"limit {format_bytes(r.limit)}")
    return r.name + (f" ({', '.join(facts)})" if facts else "")


def report_for(
    reason: str,
    mr: _nbrmm.DeviceMemoryResource,
    nbytes: int,
    device: int,
    stream: int,
) -> OutOfMemoryReport:
    """The report of a failed allocation of ``nbytes`` from ``mr``."""
    from nbrmm.memory import snapshot  # (this module is imported by nbrmm.memory)

    chain = tuple(describe_from(mr, device))
    recording = _nbrmm._history_recording()
    by_tag: dict[str, int] = {}
    by_site: dict[Frame | None, int] = {}
    if recording:
        snap = snapshot()
        by_tag = snap.bytes_by_tag()
        by_site = snap.bytes_by_site()
    return OutOfMemoryReport(
        requested=nbytes,
        device=device,
        stream=stream,
        resource=type(mr).__name__,
        reason=reason,
        chain=chain,
        recording=recording,
        bytes_by_tag=by_tag,
        bytes_by_site=by_site,
    )


def annotate(
    error: BaseException, mr: _nbrmm.DeviceMemoryResource, nbytes: int, device: int, stream: int
) -> None:
    """Add the report to ``error`` (an :class:`nbrmm.OutOfMemory` raised for an allocation
    of ``nbytes`` from ``mr``): a few lines in its message, the whole as ``error.report``.
    Any other error is left as it is."""
    if not isinstance(error, _nbrmm.OutOfMemory) or hasattr(error, "report"):
        return
    reason = str(error.args[0]) if error.args else "out of memory"
    report = report_for(reason, mr, nbytes, device, stream)
    error.args = ("\n".join([reason, *report.lines()]),)
    error.report = report  # type: ignore[attr-defined]
