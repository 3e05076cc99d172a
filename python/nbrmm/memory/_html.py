"""The HTML report of a :class:`~nbrmm.memory.Snapshot`: :meth:`Snapshot.to_html`.

One self-contained page (inline CSS and SVG, no script, nothing fetched from anywhere):

- a summary (live bytes, allocations, events, dropped events, devices);
- for each device, the live bytes over time stacked by tag, computed from the events. An
  allocation that was live before the history starts (its free is in the history but not
  its allocation, or it is live and its allocation event was dropped) counts from the
  start, as a base;
- the live bytes per tag, the call sites holding the most live bytes, the resource chain
  of each device, the largest live allocations and the failed allocations.

Every string of the snapshot (tags, libraries, file and function names, resource names) is
escaped. The page depends on the snapshot alone: the same snapshot gives the same bytes.
"""

from __future__ import annotations

import datetime
import html
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from nbrmm.memory._snapshot import Allocation, Event, Frame, Snapshot, call_site, check_path

__all__ = ["render_html", "write_html"]

#: Colours of the tags, in order of their live bytes (then peak bytes). Tags past the
#: last colour share the grey of "other tags" in the charts.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#86bcb6",
    "#d37295",
)
OTHER_COLOR = "#bab0ac"
OTHER_TAGS = "other tags"

#: Rows of the call-site, allocation and failure tables.
TOP_ROWS = 25
#: Points of a timeline, at most (the peak of each stretch is kept).
MAX_POINTS = 1200

_CHART_W = 1160
_CHART_H = 260
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 78, 16, 14, 36


def write_html(snapshot: Snapshot, path: str | os.PathLike[str], title: str | None = None) -> None:
    """Write the report of ``snapshot`` to ``path`` (UTF-8).

    Parameters
    ----------
    snapshot : Snapshot
        The snapshot to show.
    path : str or os.PathLike
        The HTML file to write (replaced if it exists, once the page is made).
    title : str, optional
        The page title (default: "nbrmm memory report").

    Raises
    ------
    TypeError
        ``path`` is not a str or os.PathLike.

    Notes
    -----
    Lone surrogates (which a tag, a frame or a title decoded from undecodable bytes holds)
    are written as Python escapes (``\\udcff``).
    """
    check_path(path)
    data = render_html(snapshot, title).encode("utf-8", "backslashreplace")
    with open(path, "wb") as f:
        f.write(data)


def render_html(snapshot: Snapshot, title: str | None = None) -> str:
    """The report of ``snapshot`` as an HTML document.

    Parameters
    ----------
    snapshot : Snapshot
        The snapshot to show.
    title : str, optional
        The page title (default: "nbrmm memory report").

    Returns
    -------
    str
        A complete HTML5 document.
    """
    return _Report(snapshot, title or "nbrmm memory report").render()


# --------------------------------------------------------------------------------------
# Timelines
# --------------------------------------------------------------------------------------


@dataclass
class _Timeline:
    """Live bytes per tag after each event of one device (or of all of them)."""

    times: list[int] = field(default_factory=list)  # ns; the first is the first event's
    values: list[dict[str, int]] = field(default_factory=list)
    failures: list[Event] = field(default_factory=list)
    base: dict[str, int] = field(default_factory=dict)  # live before the history starts

    def peak(self) -> int:
        return max((sum(v.values()) for v in self.values), default=0)

    def tag_peaks(self) -> dict[str, int]:
        peaks: dict[str, int] = {}
        for v in self.values:
            for tag, n in v.items():
                if n > peaks.get(tag, 0):
                    peaks[tag] = n
        return peaks


def _timeline(events: Sequence[Event], allocations: Sequence[Allocation]) -> _Timeline:
    """Replay ``events`` (of one device, or of all devices keyed by device too)."""
    # First pass: what was live before the first event.
    live: dict[tuple[int, int], tuple[str, int]] = {}
    base: dict[str, int] = {}
    seen: set[tuple[int, int, int]] = set()
    for e in events:
        key = (e.device, e.address)
        if e.action == "alloc":
            live[key] = (e.tag, e.size)
            seen.add((e.device, e.address, e.time_ns))
        elif e.action == "free" and live.pop(key, None) is None:
            base[e.tag] = base.get(e.tag, 0) + e.size
    for a in allocations:
        if (a.device, a.address, a.time_ns) not in seen:
            base[a.tag] = base.get(a.tag, 0) + a.size

    tl = _Timeline(base=dict(base))
    if not events:
        return tl
    current = dict(base)
    live.clear()
    tl.times.append(events[0].time_ns)
    tl.values.append(dict(current))
    for e in events:
        key = (e.device, e.address)
        if e.action == "alloc":
            live[key] = (e.tag, e.size)
            current[e.tag] = current.get(e.tag, 0) + e.size
        elif e.action == "free":
            tag, size = live.pop(key, (e.tag, e.size))
            current[tag] = max(0, current.get(tag, 0) - size)
        else:
            tl.failures.append(e)
            continue
        tl.times.append(e.time_ns)
        tl.values.append(dict(current))
    return tl


def _downsample(
    times: list[int], values: list[dict[str, int]]
) -> tuple[list[int], list[dict[str, int]]]:
    """At most :data:`MAX_POINTS` points: of each stretch of time, the point of the highest
    total (so that peaks stay), and the last point."""
    if len(times) <= MAX_POINTS:
        return times, values
    t0, t1 = times[0], times[-1]
    span = max(t1 - t0, 1)
    buckets = MAX_POINTS - 1
    best: dict[int, int] = {}
    for i, t in enumerate(times[:-1]):
        b = min((t - t0) * buckets // span, buckets - 1)
        j = best.get(b)
        if j is None or sum(values[i].values()) > sum(values[j].values()):
            best[b] = i
    keep = sorted(best.values()) + [len(times) - 1]
    return [times[i] for i in keep], [values[i] for i in keep]


# --------------------------------------------------------------------------------------
# Units
# --------------------------------------------------------------------------------------

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units: ``"1.5 MiB"``, ``"512 B"``."""
    value = float(n)
    for unit in _BYTE_UNITS:
        if abs(value) < 1024 or unit == _BYTE_UNITS[-1]:
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.3g} {unit}" if abs(value) < 100 else f"{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / ticks
    if raw <= 0:
        return 1.0
    magnitude: float = 10.0 ** _floor_log10(raw)
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * magnitude:
            return m * magnitude
    return 10 * magnitude


def _floor_log10(x: float) -> int:
    n = 0
    while x >= 10:
        x /= 10
        n += 1
    while x < 1:
        x *= 10
        n -= 1
    return n


def _byte_ticks(peak: int) -> tuple[list[int], float, str]:
    """Tick values (bytes), the unit's size and name for a y axis up to ``peak``."""
    unit, name = 1, "B"
    for i, u in enumerate(_BYTE_UNITS):
        if peak >= 1024**i:
            unit, name = 1024**i, u
    step = _nice_step(peak / unit) * unit
    if name == "B":
        step = max(1.0, float(round(step)))
    ticks = [0]
    while ticks[-1] < peak or len(ticks) < 2:
        ticks.append(round(len(ticks) * step))
    return ticks, unit, name


def _format_tick(value: int, unit: float, name: str) -> str:
    x = value / unit
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return f"{text} {name}"


_TIME_UNITS = ((60e9, "min"), (1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))


def _time_unit(span_ns: int) -> tuple[float, str]:
    for size, name in _TIME_UNITS:
        if span_ns >= 2 * size:
            return size, name
    return 1.0, "ns"


def format_duration(ns: int) -> str:
    """``ns`` nanoseconds in a readable unit: ``"1.25 s"``, ``"250 µs"``."""
    size, name = next(
        ((size, name) for size, name in ((3600e9, "h"), *_TIME_UNITS) if abs(ns) >= size),
        (1.0, "ns"),
    )
    value = ns / size
    return f"{value:.3g} {name}" if abs(value) < 1000 else f"{value:.0f} {name}"


def _utc(ns: int) -> str:
    try:
        when = datetime.datetime.fromtimestamp(ns // 1_000_000_000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ns:,} ns"
    return when.strftime("%Y-%m-%d %H:%M:%S") + f".{ns % 1_000_000_000 // 1000:06d} UTC"


# --------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _device_name(device: int) -> str:
    return "host" if device < 0 else f"GPU {device}"


def _site(frame: Frame | None) -> str:
    return str(frame) if frame is not None else "(no Python frames recorded)"


_CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:#1f2328;background:#fff}
main{max-width:1200px;margin:0 auto;padding:20px 24px 48px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:32px 0 8px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:18px 0 4px}
p.note{color:#57606a;margin:4px 0 8px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{flex:1 1 150px;border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;min-width:0}
.card .k{color:#57606a;font-size:12px;text-transform:uppercase;letter-spacing:.03em}
.card .v{font-size:20px;font-weight:600;overflow-wrap:anywhere}
.card .v.small{font-size:15px}
table{width:100%;border-collapse:collapse;margin:6px 0 4px;table-layout:fixed}
th,td{padding:4px 8px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top;
overflow-wrap:anywhere}
th{background:#f6f8fa;font-weight:600}
td.n,th.n{text-align:right;white-space:nowrap}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;
vertical-align:-1px}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;margin:6px 0 2px;padding:0;list-style:none}
.legend li{min-width:0;overflow-wrap:anywhere}
figure{margin:8px 0 16px}
figure svg{display:block;width:100%;height:auto}
figcaption{color:#57606a;font-size:12px}
svg text{font:11px system-ui,sans-serif;fill:#57606a}
.empty{color:#57606a;font-style:italic}
"""


class _Report:
    def __init__(self, snapshot: Snapshot, title: str) -> None:
        self.s = snapshot
        self.title = title
        self.devices = sorted(
            {e.device for e in snapshot.events}
            | {a.device for a in snapshot.allocations}
            | {r.device for r in snapshot.resources},
            key=lambda d: (d < 0, d),
        )
        self.total = _timeline(snapshot.events, snapshot.allocations)
        events: dict[int, list[Event]] = {d: [] for d in self.devices}
        allocations: dict[int, list[Allocation]] = {d: [] for d in self.devices}
        for e in snapshot.events:
            events[e.device].append(e)
        for a in snapshot.allocations:
            allocations[a.device].append(a)
        self.device_live = {d: sum(a.size for a in allocations[d]) for d in self.devices}
        self.per_device = {d: _timeline(events[d], allocations[d]) for d in self.devices}
        times = [e.time_ns for e in snapshot.events]
        self.t0 = min(times, default=0)
        t1 = max(times, default=0)
        self.t_end = t1 + max((t1 - self.t0) // 50, 1)
        live = snapshot.bytes_by_tag()
        peaks = self.total.tag_peaks()
        tags = set(live) | set(peaks) | {e.tag for e in snapshot.events}
        self.tags = sorted(tags, key=lambda t: (-live.get(t, 0), -peaks.get(t, 0), t))
        self.color = {
            t: PALETTE[i] if i < len(PALETTE) else OTHER_COLOR for i, t in enumerate(self.tags)
        }

    def chart_tag(self, tag: str) -> str:
        return tag if self.tags.index(tag) < len(PALETTE) else OTHER_TAGS

    # ---------------------------------------------------------------------------------

    def render(self) -> str:
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(self.title)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            "<main>",
            f"<h1>{_e(self.title)}</h1>",
            self.summary(),
            self.timelines(),
            self.tag_table(),
            self.site_table(),
            self.resource_table(),
            self.allocation_table(),
            self.failure_table(),
            "</main>",
            "</body>",
            "</html>",
            "",
        ]
        return "\n".join(parts)

    def summary(self) -> str:
        s = self.s
        counts = {"alloc": 0, "free": 0, "failed_alloc": 0}
        for e in s.events:
            counts[e.action] = counts.get(e.action, 0) + 1
        live = sum(a.size for a in s.allocations)
        devices = ", ".join(_device_name(d) for d in self.devices) or "none"
        cards = [
            ("Live bytes", format_bytes(live), f"{live:,} bytes"),
            ("Live allocations", f"{len(s.allocations):,}", None),
            ("Peak (history)", format_bytes(self.total.peak()), f"{self.total.peak():,} bytes"),
            (
                "Events",
                f"{len(s.events):,}",
                (
                    f"{counts['alloc']:,} allocations, {counts['free']:,} frees, "
                    f"{counts['failed_alloc']:,} failed"
                ),
            ),
            ("Failed allocations", f"{counts['failed_alloc']:,}", None),
            ("Dropped events", f"{s.dropped_events:,}", None),
            ("Devices", devices, None),
        ]
        out = ['<section id="summary"><div class="cards">']
        for key, value, hint in cards:
            tip = f' title="{_e(hint)}"' if hint else ""
            size = " small" if len(value) > 12 else ""
            out.append(
                f'<div class="card"{tip}><div class="k">{_e(key)}</div>'
                f'<div class="v{size}">{_e(value)}</div></div>'
            )
        out.append("</div>")
        if s.events:
            t0 = min(e.time_ns for e in s.events)
            t1 = max(e.time_ns for e in s.events)
            out.append(
                f'<p class="note">History from {_e(_utc(t0))} to {_e(_utc(t1))} '
                f"({_e(format_duration(t1 - t0))}): {counts['alloc']:,} allocations, "
                f"{counts['free']:,} frees, {counts['failed_alloc']:,} failed allocations.</p>"
            )
        if s.dropped_events:
            out.append(
                f'<p class="note">{s.dropped_events:,} older events were dropped (the history '
                "was full): allocations made then that are still live count from the start "
                "of the timeline.</p>"
            )
        out.append("</section>")
        return "\n".join(out)

    def timelines(self) -> str:
        out = ['<section id="timeline"><h2>Live bytes over time, by tag</h2>']
        if self.tags:
            out.append('<ul class="legend">')
            shown = [t for t in self.tags if self.chart_tag(t) == t]
            for t in shown:
                out.append(
                    f'<li><span class="sw" style="background:{self.color[t]}"></span>{_e(t)}</li>'
                )
            if len(shown) < len(self.tags):
                out.append(
                    f'<li><span class="sw" style="background:{OTHER_COLOR}"></span>'
                    f"{_e(OTHER_TAGS)} ({len(self.tags) - len(shown)})</li>"
                )
            out.append("</ul>")
        if not self.s.events:
            out.append('<p class="empty">No events were recorded: there is no timeline.</p>')
        for d in self.devices:
            tl = self.per_device[d]
            out.append(f"<h3>{_e(_device_name(d))}</h3>")
            if not tl.times:
                live = format_bytes(self.device_live[d])
                out.append(
                    f'<p class="empty">No events on this device ({_e(live)} '
                    "live).</p>"
                )
                continue
            out.append(self.chart(d, tl))
        out.append("</section>")
        return "\n".join(out)

    def chart(self, device: int, tl: _Timeline) -> str:
        times, values = _downsample(tl.times, tl.values)
        drawn = len(times) if len(times) < len(tl.times) else 0
        # Every chart spans the whole history (and a little after its last event, so that
        # the bytes after the last event show).
        times = [self.t0, *times, self.t_end]
        values = [values[0], *values, values[-1]]
        # Layers: chart tags (with "other tags" last), bottom to top in tag order.
        layer_names: list[str] = []
        for t in self.tags:
            name = self.chart_tag(t)
            if name not in layer_names:
                layer_names.append(name)
        rows = []
        for v in values:
            row = dict.fromkeys(layer_names, 0)
            for tag, n in v.items():
                row[self.chart_tag(tag)] += n
            rows.append(row)
        layer_names = [n for n in layer_names if any(r[n] for r in rows)]
        peak = max((sum(r.values()) for r in rows), default=0)
        t0 = self.t0
        span = max(self.t_end - t0, 1)
        x0, x1 = _PAD_L, _CHART_W - _PAD_R
        y0, y1 = _CHART_H - _PAD_B, _PAD_T
        ticks, unit, unit_name = _byte_ticks(max(peak, 1))
        top = max(ticks[-1], 1)

        def x(t: int) -> float:
            return x0 + (t - t0) * (x1 - x0) / span

        def y(b: int) -> float:
            return y0 - b * (y0 - y1) / top

        out = [
            (
                f'<figure><svg viewBox="0 0 {_CHART_W} {_CHART_H}" role="img" '
                f'aria-label="{_e(_device_name(device))}: live bytes over time by tag">'
            )
        ]
        for b in ticks:
            yy = y(b)
            out.append(
                f'<line x1="{x0}" y1="{yy:.1f}" x2="{x1}" y2="{yy:.1f}" stroke="#eaeef2"/>'
                f'<text x="{x0 - 6}" y="{yy + 4:.1f}" text-anchor="end">'
                f"{_e(_format_tick(b, unit, unit_name))}</text>"
            )
        tsize, tname = _time_unit(span)
        step = _nice_step(span / tsize, 8) * tsize
        k = 0
        while k * step <= span:
            xx = x(t0 + int(k * step))
            label = f"{k * step / tsize:.6g} {tname}"
            anchor = "end" if xx > x1 - 30 else "middle"
            out.append(
                f'<line x1="{xx:.1f}" y1="{y0}" x2="{xx:.1f}" y2="{y0 + 4}" stroke="#8c959f"/>'
                f'<text x="{xx:.1f}" y="{y0 + 16}" text-anchor="{anchor}">{_e(label)}</text>'
            )
            k += 1
        out.append(
            f'<text x="{(x0 + x1) / 2:.1f}" y="{_CHART_H - 4}" text-anchor="middle">'
            "time since the first event</text>"
        )
        lower = [0] * len(rows)
        for name in layer_names:
            upper = [lo + r[name] for lo, r in zip(lower, rows)]
            pts = _step_points(times, upper, x, y) + _step_points(times, lower, x, y)[::-1]
            color = OTHER_COLOR if name == OTHER_TAGS else self.color[name]
            tag_peak = max(r[name] for r in rows)
            out.append(
                f'<polygon points="{" ".join(pts)}" fill="{color}" fill-opacity="0.9" '
                f'stroke="{color}" stroke-width="0.5"><title>{_e(name)}: peak '
                f"{_e(format_bytes(tag_peak))}</title></polygon>"
            )
            lower = upper
        out.append(
            f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#57606a"/>'
            f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#57606a"/>'
        )
        for f in tl.failures:
            xx = x(f.time_ns)
            out.append(
                f'<g><line x1="{xx:.1f}" y1="{y1}" x2="{xx:.1f}" y2="{y0}" stroke="#cf222e" '
                f'stroke-dasharray="3 3"/><path d="M{xx - 5:.1f} {y1 - 2} L{xx + 5:.1f} '
                f'{y1 - 2} L{xx:.1f} {y1 + 7} Z" fill="#cf222e"/><title>failed allocation of '
                f"{_e(format_bytes(f.size))} ({_e(f.tag)}) at "
                f"{_e(format_duration(f.time_ns - t0))}</title></g>"
            )
        out.append("</svg>")
        base = sum(tl.base.values())
        caption = (
            f"{_e(_device_name(device))}: peak {_e(format_bytes(tl.peak()))}, "
            f"{len(tl.times) - 1:,} allocations and frees"
        )
        if tl.failures:
            caption += f", {len(tl.failures):,} failed allocations (red marks)"
        if base:
            caption += (
                f"; {_e(format_bytes(base))} were live before the history starts and count "
                "from its start"
            )
        if drawn:
            caption += f"; drawn from {drawn:,} of its points, keeping the peaks"
        out.append(f"<figcaption>{caption}.</figcaption></figure>")
        return "".join(out)

    def swatch(self, tag: str) -> str:
        return f'<span class="sw" style="background:{self.color.get(tag, OTHER_COLOR)}"></span>'

    def tag_table(self) -> str:
        live = self.s.bytes_by_tag()
        total = sum(live.values())
        peaks = self.total.tag_peaks()
        count: dict[str, int] = {}
        libraries: dict[str, set[str]] = {}
        for a in self.s.allocations:
            count[a.tag] = count.get(a.tag, 0) + 1
            libraries.setdefault(a.tag, set()).add(a.library)
        for e in self.s.events:
            libraries.setdefault(e.tag, set()).add(e.library)
        out = [
            '<section id="tags"><h2>Live bytes per tag</h2>',
            (
                '<table><colgroup><col style="width:34%"><col style="width:14%">'
                '<col style="width:9%"><col style="width:11%"><col style="width:14%">'
                '<col style="width:18%"></colgroup>'
            ),
            (
                '<thead><tr><th>Tag</th><th class="n">Live bytes</th><th class="n">Share</th>'
                '<th class="n">Allocations</th><th class="n">Peak</th><th>Libraries</th></tr>'
                "</thead><tbody>"
            ),
        ]
        if not self.tags:
            out.append('<tr><td colspan="6" class="empty">No allocations.</td></tr>')
        for t in self.tags:
            n = live.get(t, 0)
            share = f"{100 * n / total:.1f}%" if total else "–"
            out.append(
                f"<tr><td>{self.swatch(t)}{_e(t)}</td>"
                f'<td class="n" title="{n:,} bytes">{_e(format_bytes(n))}</td>'
                f'<td class="n">{share}</td><td class="n">{count.get(t, 0):,}</td>'
                f'<td class="n" title="{peaks.get(t, 0):,} bytes">'
                f"{_e(format_bytes(peaks.get(t, 0)))}</td>"
                f"<td>{_e(', '.join(sorted(libraries.get(t, ()))))}</td></tr>"
            )
        out.append("</tbody></table>")
        out.append(
            '<p class="note">Peak: the most bytes of the tag live at once over the history '
            "(all devices together).</p></section>"
        )
        return "\n".join(out)

    def site_table(self) -> str:
        sites: dict[Frame | None, list[int]] = {}
        tags: dict[Frame | None, set[str]] = {}
        for a in self.s.allocations:
            site = a.site
            entry = sites.setdefault(site, [0, 0])
            entry[0] += a.size
            entry[1] += 1
            tags.setdefault(site, set()).add(a.tag)
        ranked = sorted(sites.items(), key=lambda kv: (-kv[1][0], -kv[1][1], _site(kv[0])))
        out = [
            '<section id="sites"><h2>Top call sites by live bytes</h2>',
            (
                '<table><colgroup><col style="width:5%"><col style="width:53%">'
                '<col style="width:14%"><col style="width:10%"><col style="width:18%">'
                "</colgroup>"
            ),
            (
                '<thead><tr><th class="n">#</th><th>Call site</th><th class="n">Live bytes</th>'
                '<th class="n">Count</th><th>Tags</th></tr></thead><tbody>'
            ),
        ]
        if not ranked:
            out.append('<tr><td colspan="5" class="empty">No live allocations.</td></tr>')
        for i, (site, (nbytes, n)) in enumerate(ranked[:TOP_ROWS], 1):
            out.append(
                f'<tr><td class="n">{i}</td><td><code>{_e(_site(site))}</code></td>'
                f'<td class="n" title="{nbytes:,} bytes">{_e(format_bytes(nbytes))}</td>'
                f'<td class="n">{n:,}</td><td>{_e(", ".join(sorted(tags[site])))}</td></tr>'
            )
        out.append("</tbody></table>")
        if len(ranked) > TOP_ROWS:
            out.append(f'<p class="note">{len(ranked) - TOP_ROWS:,} more call sites.</p>')
        out.append(
            '<p class="note">The call site of an allocation is its innermost frame outside '
            "nbrmm and the allocating library.</p></section>"
        )
        return "\n".join(out)

    def resource_table(self) -> str:
        def opt(n: int | None) -> str:
            return "–" if n is None else _e(format_bytes(n))

        def tip(n: int | None) -> str:
            return "" if n is None else f' title="{n:,} bytes"'

        out = [
            '<section id="resources"><h2>Resource chains</h2>',
            (
                '<table><colgroup><col style="width:12%"><col style="width:8%">'
                '<col style="width:38%"><col style="width:14%"><col style="width:14%">'
                '<col style="width:14%"></colgroup>'
            ),
            (
                '<thead><tr><th>Device</th><th class="n">Depth</th><th>Resource</th>'
                '<th class="n">Pool size</th><th class="n">Bytes in use</th>'
                '<th class="n">Limit</th></tr></thead><tbody>'
            ),
        ]
        rows = sorted(self.s.resources, key=lambda r: (r.device < 0, r.device, r.depth))
        if not rows:
            out.append('<tr><td colspan="6" class="empty">No resources recorded.</td></tr>')
        for r in rows:
            out.append(
                f'<tr><td>{_e(_device_name(r.device))}</td><td class="n">{r.depth}</td>'
                f"<td><code>{_e(r.name)}</code></td>"
                f'<td class="n"{tip(r.pool_size)}>{opt(r.pool_size)}</td>'
                f'<td class="n"{tip(r.bytes_in_use)}>{opt(r.bytes_in_use)}</td>'
                f'<td class="n"{tip(r.limit)}>{opt(r.limit)}</td></tr>'
            )
        out.append(
            '</tbody></table><p class="note">Depth 0 is the current resource, 1 its '
            "upstream, and so on.</p></section>"
        )
        return "\n".join(out)

    def start(self) -> int | None:
        return self.t0 if self.s.events else None

    def when(self, ns: int) -> str:
        t0 = self.start()
        if t0 is None:
            return _e(_utc(ns))
        return _e(("+" if ns >= t0 else "−") + format_duration(abs(ns - t0)))

    def allocation_table(self) -> str:
        ranked = sorted(self.s.allocations, key=lambda a: (-a.size, a.time_ns, a.device, a.address))
        out = [
            '<section id="allocations"><h2>Largest live allocations</h2>',
            (
                '<table><colgroup><col style="width:11%"><col style="width:15%">'
                '<col style="width:9%"><col style="width:8%"><col style="width:13%">'
                '<col style="width:9%"><col style="width:35%"></colgroup>'
            ),
            (
                '<thead><tr><th class="n">Size</th><th>Tag</th><th>Library</th><th>Device</th>'
                '<th>Address</th><th class="n">Allocated</th><th>Call site</th></tr></thead>'
                "<tbody>"
            ),
        ]
        if not ranked:
            out.append('<tr><td colspan="7" class="empty">No live allocations.</td></tr>')
        for a in ranked[:TOP_ROWS]:
            out.append(
                f'<tr><td class="n" title="{a.size:,} bytes">{_e(format_bytes(a.size))}</td>'
                f"<td>{self.swatch(a.tag)}{_e(a.tag)}</td><td>{_e(a.library)}</td>"
                f"<td>{_e(_device_name(a.device))}</td><td><code>{a.address:#x}</code></td>"
                f'<td class="n">{self.when(a.time_ns)}</td>'
                f"<td><code>{_e(_site(a.site))}</code></td></tr>"
            )
        out.append("</tbody></table>")
        if len(ranked) > TOP_ROWS:
            out.append(f'<p class="note">{len(ranked) - TOP_ROWS:,} more live allocations.</p>')
        out.append(
            '<p class="note">Allocated: the time since the first event of the history.</p>'
            "</section>"
        )
        return "\n".join(out)

    def failure_table(self) -> str:
        failures = [e for e in self.s.events if e.action == "failed_alloc"]
        if not failures:
            return ""
        out = [
            '<section id="failures"><h2>Failed allocations</h2>',
            (
                '<table><colgroup><col style="width:11%"><col style="width:11%">'
                '<col style="width:17%"><col style="width:11%"><col style="width:10%">'
                '<col style="width:40%"></colgroup>'
            ),
            (
                '<thead><tr><th class="n">When</th><th class="n">Size</th><th>Tag</th>'
                "<th>Library</th><th>Device</th><th>Call site</th></tr></thead><tbody>"
            ),
        ]
        for e in failures[-TOP_ROWS:]:
            site = call_site(e.frames)
            out.append(
                f'<tr><td class="n">{self.when(e.time_ns)}</td>'
                f'<td class="n" title="{e.size:,} bytes">{_e(format_bytes(e.size))}</td>'
                f"<td>{self.swatch(e.tag)}{_e(e.tag)}</td><td>{_e(e.library)}</td>"
                f"<td>{_e(_device_name(e.device))}</td><td><code>{_e(_site(site))}</code></td>"
                "</tr>"
            )
        out.append("</tbody></table>")
        if len(failures) > TOP_ROWS:
            out.append(
                f'<p class="note">The last {TOP_ROWS} of {len(failures):,} failed allocations.</p>'
            )
        out.append("</section>")
        return "\n".join(out)


def _step_points(
    times: Iterable[int],
    values: Iterable[int],
    x: Callable[[int], float],
    y: Callable[[int], float],
) -> list[str]:
    """The corners of a step line through ``(times, values)`` (each value holds until the
    next time), as SVG ``"x,y"`` strings."""
    pts: list[str] = []
    prev: float | None = None
    for t, v in zip(times, values):
        xx = x(t)
        yy = y(v)
        if prev is not None:
            pts.append(f"{xx:.1f},{prev:.1f}")
        pts.append(f"{xx:.1f},{yy:.1f}")
        prev = yy
    return pts
