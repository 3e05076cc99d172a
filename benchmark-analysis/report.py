"""Turns the benchmark suite's pytest-benchmark JSON into a report.

    python benchmark-analysis/report.py BENCH.json --out DIR

writes ``DIR/report.md`` (the workloads W1-W3 and the guards with their targets
evaluated, then tables of medians, ratios to each alternative library and to librmm's
C++ floor) and, when matplotlib can be imported, ``DIR/report.png`` and, when workloads
were measured, ``DIR/workloads.png``. Only the standard library is needed for the
markdown.

The tables are built from the ``extra_info`` that every benchmark records (documented
in ``benchmarks/support.py``). Benchmarks without it are listed at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
from collections import defaultdict
from dataclasses import dataclass, field

#: Order of rows and columns.
RESOURCE_ORDER = ("host", "cuda", "pool", "arena", "async", "binning")
IMPL_ORDER = ("nbrmm", "rmm", "cupy", "torch", "cuda.core")
DIRECTION_ORDER = ("h2d", "d2h", "d2d")
DIRECTION_NAMES = {"h2d": "host → device", "d2h": "device → host", "d2d": "device → device"}

#: Workload targets (what users feel): the most nbrmm's figure may be, as a multiple of
#: its reference's, measured in the same run.
W1_TIME_TARGET = 0.95  #: dask-cuda pipeline: nbrmm's plugin ÷ rmm_pool_size over rmm
W2_MEMORY_TARGET = 1.10  #: CuPy then PyTorch: one nbrmm pool's peak ÷ the larger stage alone
W2_TIME_TARGET = 1.05  #: the same: one nbrmm pool's wall time ÷ the two caching pools'
W3_TIME_TARGET = 1.03  #: PyTorch training: nbrmm's hook ÷ torch's caching allocator

#: Guards: micro benchmarks timed interleaved (bench_paired.py), each against references
#: timed together (machines differ). A Buffer's cost over librmm's C++ round trip (the
#: floor) may be at most this multiple of rmm's DeviceBuffer's cost over the same floor:
BUFFER_OVERHEAD_TARGET = 0.75
BUFFER_TARGET_RESOURCES = ("arena", "pool", "async")
#: The other interleaved cases: (reference, the most subject ÷ reference may be, label);
#: a limit of None compares without a target.
PAIRED_RATIO_TARGETS = {
    "get_current": (("rmm", 0.5, "rmm's get_current_device_resource()"),),
    "cupy_empty": (("cupy", 1.10, "CuPy's MemoryPool"), ("rmm", None, "rmm's rmm_cupy_allocator")),
    "torch_empty_hook": (("torch", 1.12, "torch's caching allocator"),),
    "torch_empty": (("torch", None, "torch's caching allocator"),),
    "memory_history": (
        ("torch_history", 1.0, "torch's caching allocator recording its history (stacks=python)"),
    ),
    "cuda_core_allocate": (("cuda.core", 1.25, "cuda.core's default device memory resource"),),
    "dask_cupy": (("rmm", W1_TIME_TARGET, "dask-cuda's rmm_pool_size over rmm 26.10"),),
}
#: References of the interleaved cases that explain a subject's time rather than set a
#: target for it.
PAIRED_INFO_REFERENCES = {
    "torch_empty_hook": (
        ("pluggable_floor", "the hook over a host heap: torch's pluggable-allocator floor"),
    ),
    "memory_history": (
        ("hook", "nbrmm's hook, not recording"),
        ("caching", "torch's caching allocator, not recording"),
    ),
    "cupy_empty": (
        ("documented_objects_floor",
         "an allocator returning CuPy's documented objects over a held block"),
        ("public_api_floor",
         "the same, asking CuPy for its current device and stream as the hook does"),
        ("floor", "librmm's C++ allocate+deallocate on the arena"),
    ),
    "cuda_core_allocate": (
        ("python_mr_floor", "a cuda.core MemoryResource in Python that allocates nothing"),
        ("one_call_floor",
         "a cuda.core MemoryResource in Python calling the arena once per method, no checks"),
        ("floor", "librmm's C++ allocate+deallocate on the arena"),
    ),
}
#: The workloads among the interleaved cases (reported with W2 and W3, not as guards).
PAIRED_WORKLOADS = {"dask_cupy": "W1"}
PAIRED_SUBJECTS = {
    "cupy_empty": "`cupy.empty(256)`, nbrmm hook over arena",
    "torch_empty_hook": "`torch.empty(256)`, nbrmm hook as torch's allocator, over arena",
    "torch_empty": "`torch.empty(256)`, nbrmm hook in a MemPool over arena",
    "dask_cupy": "dask.array + CuPy pipeline on a dask-cuda worker, nbrmm's plugin over a pool",
    "get_current": "`get_current_device_resource()`",
    "memory_history": "`torch.empty(256)`, nbrmm hook over arena, nbrmm recording its history (stacks=python)",
    "cuda_core_allocate": "cuda.core `allocate(256)` + `close()`, nbrmm arena as its resource",
}


# ---------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------


@dataclass
class Result:
    """One benchmark: its median (ns per call) and what it recorded."""

    name: str
    median_ns: float
    iqr_ns: float
    rounds: int
    info: dict = field(default_factory=dict)

    @property
    def case(self):
        return self.info.get("case")

    @property
    def impl(self):
        return self.info.get("impl")

    @property
    def floor_ns(self):
        return self.info.get("floor_ns")

    @property
    def per_op_ns(self):
        """ns per allocation (thread and paired cases time ``ops`` of them per call)."""
        return self.median_ns / self.info.get("ops", 1)

    @property
    def gbps(self):
        size = self.info.get("size")
        return None if not size or self.median_ns <= 0 else size / self.median_ns


def load(path):
    """(results, document) from a pytest-benchmark JSON file."""
    doc = json.loads(pathlib.Path(path).read_text())
    return results_of(doc), doc


def results_of(doc):
    """The results of a pytest-benchmark document (those with a median)."""
    results = []
    for bench in doc.get("benchmarks", []):
        stats = bench.get("stats") or {}
        if "median" not in stats:
            continue
        results.append(
            Result(
                name=bench.get("name", "?"),
                median_ns=stats["median"] * 1e9,
                iqr_ns=stats.get("iqr", 0.0) * 1e9,
                rounds=stats.get("rounds", 0),
                info=dict(bench.get("extra_info") or {}),
            )
        )
    return results


@dataclass
class Figure:
    """One figure of an interleaved result: the subject beside one of its references."""

    reference: str  #: the reference's label
    reference_ns: float | None  #: its time per call
    #: "difference" (subject − reference, ns), "ratio" (subject ÷ reference) or
    #: "overhead ratio" ((subject − floor) ÷ (reference − floor))
    measure: str
    value: float | None  #: the figure, None when the reference was not measured
    limit: float | None  #: the target: the most ``value`` may be; None without one
    explains: bool = False  #: a reference that explains the subject's time, not a target's


def buffer_limit(resource):
    """The guard on a Buffer's overhead ratio over ``resource``, or None."""
    return BUFFER_OVERHEAD_TARGET if resource in BUFFER_TARGET_RESOURCES else None


def paired_figures(r):
    """The figures of an interleaved result (case ``paired``), in the report's order."""
    target, subject = r.info.get("target"), r.per_op_ns
    refs = r.info.get("reference_ns") or {}
    if target == "buffer_overhead":
        floor, rmm = refs.get("floor"), refs.get("rmm")
        over = None if floor is None else subject - floor
        yield Figure("C++ floor", floor, "difference", over, None)
        if r.impl == "nbrmm" and "rmm" in refs:
            value = None if floor is None or rmm is None else ratio(over, rmm - floor)
            yield Figure("rmm's `DeviceBuffer(size=256)`, each over the C++ floor", rmm,
                         "overhead ratio", value, buffer_limit(r.info.get("resource")))
        return
    for name, limit, label in PAIRED_RATIO_TARGETS.get(target, ()):
        yield Figure(label, refs.get(name), "ratio", ratio(subject, refs.get(name)), limit)
    for name, label in PAIRED_INFO_REFERENCES.get(target, ()):
        if refs.get(name) is not None:
            yield Figure(label, refs[name], "ratio", ratio(subject, refs[name]), None, True)


# ---------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------


@dataclass
class WorkloadFigure:
    """One figure of a workload: nbrmm's value beside its reference's."""

    workload: str  #: W1, W2, W3
    what: str  #: what is measured
    unit: str  #: "time" (ns) or "bytes"
    value: float | None  #: nbrmm's
    reference: str  #: the reference's label
    reference_value: float | None
    limit: float | None  #: the most value ÷ reference_value may be; None: no target

    @property
    def ratio(self):
        return ratio(self.value, self.reference_value)


def _largest(*values):
    present = [v for v in values if v is not None]
    return max(present) if present else None


def workload_figures(results):
    """The figures of W1 (``bench_dask.py``), W2 and W3 (``bench_workloads.py``)."""
    figures = []
    for r in results:
        if r.case == "paired" and r.impl == "nbrmm" and r.info.get("target") in PAIRED_WORKLOADS:
            for name, limit, label in PAIRED_RATIO_TARGETS[r.info["target"]]:
                figures.append(WorkloadFigure(
                    PAIRED_WORKLOADS[r.info["target"]], "Dask + CuPy pipeline, wall time",
                    "time", r.per_op_ns, label, (r.info.get("reference_ns") or {}).get(name),
                    limit))
    for r in results:
        if r.case != "workload":
            continue
        variants = r.info.get("variants") or {}
        refs = r.info.get("reference_ns") or {}

        def get(variant, key):
            return (variants.get(variant) or {}).get(key)

        if r.info.get("workload") == "W2":
            ideal = _largest(get("cupy", "peak_used_bytes"), get("torch", "peak_used_bytes"))
            ideal_pools = _largest(get("cupy", "pool_peak_bytes"), get("torch", "pool_peak_bytes"))
            figures += [
                WorkloadFigure("W2", "CuPy then PyTorch, peak device memory in use",
                               "bytes", get("shared", "peak_used_bytes"),
                               "each stage alone (the larger)", ideal, W2_MEMORY_TARGET),
                WorkloadFigure("W2", "CuPy then PyTorch, peak held by the pools", "bytes",
                               get("shared", "pool_peak_bytes"),
                               "each stage alone (the larger)", ideal_pools, None),
                WorkloadFigure("W2", "CuPy then PyTorch on two caching pools, peak device "
                               "memory in use", "bytes", get("two_pools", "peak_used_bytes"),
                               "each stage alone (the larger)", ideal, None),
                WorkloadFigure("W2", "CuPy then PyTorch, wall time", "time", r.median_ns,
                               "CuPy's and torch's caching pools", refs.get("two_pools"),
                               W2_TIME_TARGET),
            ]
        elif r.info.get("workload") == "W3":
            figures += [
                WorkloadFigure("W3", "PyTorch training, wall time", "time", r.median_ns,
                               "torch's caching allocator", refs.get("torch"), W3_TIME_TARGET),
                WorkloadFigure("W3", "PyTorch training, peak device memory in use", "bytes",
                               get("torch_nbrmm", "peak_used_bytes"),
                               "torch's caching allocator", get("torch", "peak_used_bytes"),
                               None),
            ]
    return sorted(figures, key=lambda f: f.workload)


def index(results, case, *keys):
    """{(key values...): {impl: Result}} for the results of ``case``."""
    table = defaultdict(dict)
    for r in results:
        if r.case == case:
            table[tuple(r.info.get(k) for k in keys)][r.impl] = r
    return table


def impls_present(rows):
    present = {impl for by_impl in rows.values() for impl in by_impl}
    ordered = [i for i in IMPL_ORDER if i in present]
    return ordered + sorted(present - set(ordered))


def rank(value, order):
    return (order.index(value), "") if value in order else (len(order), str(value))


# ---------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------

DASH = "—"


def fmt_time(ns):
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return DASH
    if abs(ns) < 10_000:
        return f"{ns:,.0f} ns"
    if abs(ns) < 10_000_000:
        return f"{ns / 1e3:,.1f} µs"
    return f"{ns / 1e6:,.1f} ms"


def fmt_ratio(value):
    return DASH if value is None else f"{value:.2f}×"


def fmt_gbps(value):
    if value is None:
        return DASH
    return f"{value:,.1f}" if value >= 1 else f"{value:.3f}"


def fmt_size(size):
    if size is None:
        return DASH
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


def fmt_bytes(size):
    return DASH if size is None else f"{size / (1 << 30):,.2f} GiB"


def verdict(value, limit):
    """``met``, ``**missed**: 1.053×``, ``not measured`` or a dash without a target."""
    if limit is None:
        return DASH
    if value is None:
        return "not measured"
    return "met" if value <= limit else f"**missed**: {value:.3f}×"


def fmt_limit(limit):
    return DASH if limit is None else f"≤ {limit:g}×"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def md_table(header, rows, numeric=True):
    """A markdown table; columns after the first are right-aligned when ``numeric``."""
    lines = ["| " + " | ".join(header) + " |"]
    align = ["---" if i == 0 or not numeric else "---:" for i in range(len(header))]
    lines.append("|" + "|".join(align) + "|")
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def parse_md_table(markdown):
    """The stripped cells of each table row in ``markdown`` (what md_table writes)."""
    rows = (line.strip() for line in markdown.splitlines())
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows if row.startswith("|")]


# ---------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------


def machine_section(doc):
    mi = doc.get("machine_info") or {}
    nb = mi.get("nbrmm") or {}
    versions = nb.get("versions") or {}
    cpu = (mi.get("cpu") or {}).get("brand_raw")

    def cuda(code):
        return f"{code // 1000}.{code % 1000 // 10}" if code else DASH

    lines = ["## Machine", ""]
    rows = [
        ("GPU", nb.get("gpu") or DASH),
        ("driver", nb.get("driver") or DASH),
        (
            "CUDA driver API / runtime",
            f"{cuda(nb.get('cuda_driver_api'))} / {cuda(nb.get('cuda_runtime'))}",
        ),
        ("CPU", f"{cpu or DASH} ({(mi.get('cpu') or {}).get('count', '?')} cores)"),
        ("Python", nb.get("python") or mi.get("python_version") or DASH),
        ("run at", doc.get("datetime") or nb.get("recorded") or DASH),
    ]
    commit = doc.get("commit_info") or {}
    if commit.get("id"):
        rows.append(("commit", f"{commit['id'][:12]}{' (dirty)' if commit.get('dirty') else ''}"))
    lines.append(md_table(["", ""], rows, numeric=False))
    if versions:
        listed = [(k, v or "not installed") for k, v in versions.items()]
        lines += ["", md_table(["package", "version"], listed, numeric=False)]
    return "\n".join(lines)


def workload_section(results):
    """W1-W3: the workloads' figures, their targets and verdicts."""
    rows = []
    for f in workload_figures(results):
        fmt = fmt_time if f.unit == "time" else fmt_bytes
        rows.append((f.workload, f.what, fmt(f.value), f.reference, fmt(f.reference_value),
                     fmt_ratio(f.ratio), fmt_limit(f.limit), verdict(f.ratio, f.limit)))
    if not rows:
        rows.append(("W1-W3", "not measured", DASH, DASH, DASH, DASH, DASH, DASH))
    table = md_table(["workload", "measure", "nbrmm", "reference", "reference's", "ratio",
                      "target", "verdict"], rows, numeric=False)
    note = (
        "W1: a dask.array + CuPy pipeline on a dask-cuda worker, nbrmm's plugin beside "
        "dask-cuda's `rmm_pool_size` over rmm 26.10, round by round "
        "(`benchmarks/bench_dask.py`). W2: a CuPy preprocessing stage, then a PyTorch "
        "training loop on its result, in one process: both stages on one nbrmm pool "
        "through the hooks, beside each stage alone on its framework's caching allocator "
        "(memory: the larger of the two peaks is the ideal) and both on the two caching "
        "allocators (time). W3: the training loop alone, nbrmm's hook as torch's allocator "
        "beside torch's caching allocator. W2 and W3 run one process per variant, the "
        "variants interleaved (`benchmarks/bench_workloads.py`); times are medians of the "
        "runs, memory is the peak of `cudaMemGetInfo`'s used memory above the CUDA "
        "context, sampled through each process, the largest over the processes."
    )
    return "\n".join(["## Targets: workloads (W1-W3)", "", table, "", note])


def paired_section(results):
    """The guards, timed interleaved (bench_paired.py): subject and references per call."""
    paired = [r for r in results
              if r.case == "paired" and r.info.get("target") not in PAIRED_WORKLOADS]
    if not paired:
        return None
    rows = []
    order = ("buffer_overhead", *PAIRED_RATIO_TARGETS)
    for r in sorted(paired, key=lambda r: (rank(r.info.get("target"), order),
                                           rank(r.info.get("resource"), RESOURCE_ORDER),
                                           rank(r.impl, IMPL_ORDER))):
        subject = r.per_op_ns
        if r.info.get("target") == "buffer_overhead":
            call = "Buffer" if r.impl == "nbrmm" else "DeviceBuffer"
            what = f"{r.impl} `{call}({fmt_size(r.info.get('size'))}, mr={r.info.get('resource')})`"
        else:
            what = PAIRED_SUBJECTS.get(r.info.get("target"), str(r.info.get("target")))
        for f in paired_figures(r):
            ref = f.reference_ns
            shown = f.value if f.measure == "overhead ratio" else ratio(subject, ref)
            rows.append((what, fmt_time(subject), f.reference, fmt_time(ref),
                         fmt_time(None if ref is None else subject - ref), fmt_ratio(shown),
                         fmt_limit(f.limit), verdict(f.value, f.limit)))
    table = md_table(
        ["subject", "per call", "reference", "reference per call", "difference", "ratio",
         "target", "verdict"],
        rows,
        numeric=False,
    )
    note = (
        "Every round timed a batch of the subject right after a batch of each reference "
        "(pytest-benchmark's untimed setup), so both medians come from the same moments of "
        "the machine; see `benchmarks/bench_paired.py`. A `Buffer`'s guard compares what it "
        "costs over librmm's own C++ allocate+deallocate (the floor) with what rmm's "
        "`DeviceBuffer` costs over the same floor; its ratio column shows that quotient. "
        "With nbrmm's hook as torch's allocator, the subject and its references run in "
        "worker processes (torch takes its allocator once per process) that time their "
        "batches in turn on one CPU. In a MemPool, torch's caching allocator serves the calls "
        "from blocks it cached and calls the hook only to grow the pool. The hook over a "
        "host heap (malloc and free) shows what torch's pluggable-allocator path costs with "
        "an allocator that costs next to nothing; the subject's difference to it is the "
        "arena's round trip and nbrmm's."
    )
    return "\n".join(["## Targets: guards, timed interleaved", "", table, "", note])


def time_comparison(results, case, title, intro, keys, row_label, key_title):
    """A table per case: one row per key, the floor, nbrmm, and each other library with
    nbrmm's time ÷ its time."""
    rows = index(results, case, *keys)
    if not rows:
        return None
    impls = impls_present(rows)
    others = [i for i in impls if i != "nbrmm"]
    has_floor = any(r.floor_ns is not None for by in rows.values() for r in by.values())
    has_dbuf = any("device_buffer_ns" in r.info for by in rows.values() for r in by.values())
    header = [key_title]
    if has_floor:
        header += ["C++ floor"]
    if has_dbuf:
        header += ["C++ device_buffer"]
    header += ["nbrmm"]
    if has_floor:
        header += ["nbrmm − floor", "nbrmm ÷ floor"]
    for o in others:
        header += [o]
        if o == "rmm" and has_floor:
            header += ["rmm − floor"]
        header += [f"nbrmm ÷ {o}"]
    body = []
    for key in sorted(rows, key=lambda k: row_sort_key(keys, k)):
        by = rows[key]
        nb = by.get("nbrmm")
        floor = next((r.floor_ns for r in by.values() if r.floor_ns is not None), None)
        if nb is not None and nb.floor_ns is not None:
            floor = nb.floor_ns
        dbuf = next(
            (r.info["device_buffer_ns"] for r in by.values() if "device_buffer_ns" in r.info), None
        )
        line = [row_label(key)]
        if has_floor:
            line += [fmt_time(floor)]
        if has_dbuf:
            line += [fmt_time(dbuf)]
        line += [fmt_time(nb.median_ns if nb else None)]
        if has_floor:
            over = nb.median_ns - floor if nb and floor is not None else None
            line += [fmt_time(over), fmt_ratio(ratio(nb.median_ns if nb else None, floor))]
        for o in others:
            r = by.get(o)
            line += [fmt_time(r.median_ns if r else None)]
            if o == "rmm" and has_floor:
                line += [fmt_time(r.median_ns - floor if r and floor is not None else None)]
            line += [fmt_ratio(ratio(nb.median_ns if nb else None, r.median_ns if r else None))]
        body.append(line)
    return "\n".join([f"## {title}", "", intro, "", md_table(header, body)])


def row_sort_key(keys, key):
    out = []
    for k, v in zip(keys, key, strict=True):
        if k == "resource":
            out.append(rank(v, RESOURCE_ORDER))
        elif k == "direction":
            out.append(rank(v, DIRECTION_ORDER))
        else:
            out.append((0, "") if v is None else (v, ""))
    return out


def resource_size_label(key):
    kind, size = key
    return f"{kind}, {fmt_size(size)}"


def copy_section(results):
    rows = index(results, "copy", "direction", "size")
    if not rows:
        return None
    impls = impls_present(rows)
    others = [i for i in impls if i != "nbrmm"]
    header = ["copy", "raw cudaMemcpy", "nbrmm", "nbrmm ÷ raw"]
    for o in others:
        header += [o, f"nbrmm ÷ {o}"]
    body = []
    for key in sorted(rows, key=lambda k: row_sort_key(("direction", "size"), k)):
        by = rows[key]
        nb = by.get("nbrmm")
        raw = nb.info.get("floor_gbps") if nb else None
        if raw is None:
            raw = next(
                (r.info.get("floor_gbps") for r in by.values() if r.info.get("floor_gbps")), None
            )
        direction, size = key
        line = [
            f"{DIRECTION_NAMES.get(direction, direction)}, {fmt_size(size)}",
            fmt_gbps(raw),
            fmt_gbps(nb.gbps if nb else None),
            fmt_ratio(ratio(nb.gbps if nb else None, raw)),
        ]
        for o in others:
            r = by.get(o)
            line += [
                fmt_gbps(r.gbps if r else None),
                fmt_ratio(ratio(nb.gbps if nb else None, r.gbps if r else None)),
            ]
        body.append(line)
    intro = (
        "GB/s (10⁹ bytes per second) of one synchronized copy, median. *raw cudaMemcpy* is "
        "`cudaMemcpyAsync` + `cudaStreamSynchronize` of the same memory timed in C++ in the "
        "same run; host memory is pageable NumPy memory. Ratios are of bandwidth: above 1 "
        "nbrmm is faster."
    )
    return "\n".join(["## Copies", "", intro, "", md_table(header, body)])


def threads_section(results):
    rows = index(results, "threads", "resource", "threads")
    if not rows:
        return None
    impls = impls_present(rows)
    others = [i for i in impls if i != "nbrmm"]
    single = {
        (key[0], impl): r for key, by in rows.items() if key[1] == 1 for impl, r in by.items()
    }
    header = ["resource, threads", "nbrmm per buffer", "nbrmm Mbuffers/s", "nbrmm scaling"]
    for o in others:
        header += [f"{o} per buffer", f"nbrmm ÷ {o}"]
    body = []
    for key in sorted(rows, key=lambda k: row_sort_key(("resource", "threads"), k)):
        by = rows[key]
        nb = by.get("nbrmm")
        base = single.get((key[0], "nbrmm"))
        line = [
            f"{key[0]}, {key[1]}",
            fmt_time(nb.per_op_ns if nb else None),
            f"{1e3 / nb.per_op_ns:.2f}" if nb else DASH,
            fmt_ratio(ratio(base.per_op_ns, nb.per_op_ns) if nb and base else None),
        ]
        for o in others:
            r = by.get(o)
            line += [
                fmt_time(r.per_op_ns if r else None),
                fmt_ratio(ratio(nb.per_op_ns if nb else None, r.per_op_ns if r else None)),
            ]
        body.append(line)
    intro = (
        "Each thread creates and destroys 256-byte buffers; *per buffer* is wall time ÷ "
        "buffers made by all threads together, *scaling* is throughput ÷ one thread's. "
        "Other libraries are listed with the nbrmm resource they are compared with."
    )
    return "\n".join(
        ["## Allocation throughput from threads", "", intro, "", md_table(header, body)]
    )


def reference_section(results):
    refs = [r for r in results if r.case == "reference"]
    if not refs:
        return None
    body = [(f"`{r.info.get('resource', r.name)}`", fmt_time(r.median_ns)) for r in refs]
    return "\n".join(
        [
            "## Python reference points",
            "",
            "Python's own costs in the same run (every timed call above includes one call "
            "like the empty one).",
            "",
            md_table(["operation", "median"], body),
        ]
    )


def other_section(results):
    rest = [r for r in results if r.case is None]
    if not rest:
        return None
    body = [
        (r.name, fmt_time(r.median_ns), fmt_time(r.iqr_ns), r.rounds)
        for r in sorted(rest, key=lambda r: r.name)
    ]
    return "\n".join(
        ["## Other benchmarks", "", md_table(["benchmark", "median", "IQR", "rounds"], body)]
    )


def render_markdown(results, doc):
    parts = [
        "# nbrmm benchmarks",
        "",
        "Medians of one call each; every library ran in one process, so compare the ratios "
        "(absolute times drift between runs on shared machines). *C++ floor* is librmm's own "
        "cost of the same work on an nbrmm resource of the same kind, timed in C++ with the "
        "GIL released. Time ratios *nbrmm ÷ X* below 1 mean nbrmm is faster.",
        "",
        machine_section(doc),
        "",
        workload_section(results),
    ]
    sections = [
        paired_section(results),
        time_comparison(
            results,
            "buffer",
            "Buffer create + destroy",
            "nbrmm `Buffer(size, mr=mr)`, rmm `DeviceBuffer(size=size, mr=mr)`; CuPy "
            "`MemoryPool.malloc`, PyTorch `torch.empty(..., device='cuda')` and cuda.core "
            "`DeviceMemoryResource.allocate(...).close()` sit in the row of the resource "
            "they resemble (caching pool: *pool*; CUDA stream-ordered pool: *async*). "
            "*C++ device_buffer* is an `rmm::device_buffer` created and destroyed in C++ (what "
            "a Buffer holds); for 0 bytes nothing is allocated and it is the floor.",
            ("resource", "size"),
            resource_size_label,
            "resource, size",
        ),
        time_comparison(
            results,
            "allocate",
            "mr.allocate + mr.deallocate",
            "`mr.deallocate(mr.allocate(size), size)`; PyTorch: "
            "`caching_allocator_delete(caching_allocator_alloc(size))`.",
            ("resource", "size"),
            resource_size_label,
            "resource, size",
        ),
        time_comparison(
            results,
            "get_current",
            "get_current_device_resource",
            "With a pool (on a GPU) set as the current resource. CuPy: "
            "`cupy.cuda.get_allocator()`; cuda.core: `Device.memory_resource`.",
            (),
            lambda key: "`get_current_device_resource()`",
            "call",
        ),
        time_comparison(
            results,
            "set_current",
            "set_current_device_resource",
            "Setting the same pool again. CuPy: `cupy.cuda.set_allocator(pool.malloc)`; "
            "cuda.core: `Device.memory_resource = mr`.",
            (),
            lambda key: "`set_current_device_resource(mr)`",
            "call",
        ),
        copy_section(results),
        threads_section(results),
        reference_section(results),
        other_section(results),
    ]
    for s in sections:
        if s:
            parts += ["", s]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------------


def render_png(results, path):
    """Writes the plot; returns False when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(18, 10))
    bars_by_resource(axes[0][0], results, "buffer", 256, "Buffer create+destroy, 256 B")
    bars_by_resource(axes[0][1], results, "allocate", 256, "allocate+deallocate, 256 B")
    overhead_plot(axes[0][2], results)
    copy_plot(axes[1][0], results)
    threads_plot(axes[1][1], results)
    current_plot(axes[1][2], results)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render_workloads_png(results, path):
    """Writes the workloads' plot (W2's peak memory per variant, every workload's ratios
    beside their targets); returns False when matplotlib is not installed or no workload
    was measured."""
    figures = workload_figures(results)
    w2 = next((r for r in results if r.case == "workload" and r.info.get("workload") == "W2"),
              None)
    if not figures and w2 is None:
        return False
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (memory, ratios) = plt.subplots(1, 2, figsize=(13, 4.8))
    variants = (w2.info.get("variants") or {}) if w2 is not None else {}
    names = (("cupy", "CuPy stage alone\n(CuPy's pool)", "#2ca02c"),
             ("torch", "PyTorch stage alone\n(torch's caching)", "#d62728"),
             ("two_pools", "both stages,\ntwo caching pools", "#7f7f7f"),
             ("shared", "both stages,\none nbrmm pool", "#1f77b4"))
    shown = [(label, (variants.get(v) or {}).get("peak_used_bytes"), color)
             for v, label, color in names]
    shown = [s for s in shown if s[1] is not None]
    if shown:
        memory.bar([label for label, _, _ in shown], [b / (1 << 30) for _, b, _ in shown],
                   color=[color for _, _, color in shown])
        ideal = _largest(*((variants.get(v) or {}).get("peak_used_bytes")
                           for v in ("cupy", "torch")))
        if ideal is not None:
            memory.axhline(ideal * W2_MEMORY_TARGET / (1 << 30), color="black",
                           linestyle="--", label=f"target: {W2_MEMORY_TARGET:g}× the ideal")
    memory.set_ylabel("peak device memory in use (GiB)")
    memory.set_title("W2: CuPy preprocessing, then PyTorch training")
    memory.tick_params(axis="x", labelsize=8)
    _legend(memory)

    targeted = [f for f in figures if f.limit is not None]
    labels = [f"{f.workload}\n{'memory' if f.unit == 'bytes' else 'time'}" for f in targeted]
    values = [f.ratio if f.ratio is not None else 0.0 for f in targeted]
    if targeted:
        ratios.bar(labels, values, color="#1f77b4", label="nbrmm ÷ reference")
        ratios.scatter(labels, [f.limit for f in targeted], marker="_", s=1200, color="black",
                       zorder=3, label="target (at most)")
    ratios.axhline(1.0, color="#999999", linewidth=0.8)
    ratios.set_ylabel("nbrmm ÷ reference")
    ratios.set_title("Workloads beside their references")
    _legend(ratios)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _legend(ax, fontsize=8):
    """A legend, or a note on an empty panel (nothing of it was measured)."""
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=fontsize)
    else:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)


def _colors():
    return {
        "nbrmm": "#1f77b4",
        "rmm": "#ff7f0e",
        "cupy": "#2ca02c",
        "torch": "#d62728",
        "cuda.core": "#9467bd",
        "floor": "#555555",
    }


def bars_by_resource(ax, results, case, size, title):
    rows = index(results, case, "resource", "size")
    kinds = sorted({k for k, s in rows if s == size}, key=lambda k: rank(k, RESOURCE_ORDER))
    impls = impls_present({k: v for k, v in rows.items() if k[1] == size})
    colors = _colors()
    width = 0.8 / max(len(impls), 1)
    for j, impl in enumerate(impls):
        xs, ys = [], []
        for i, kind in enumerate(kinds):
            r = rows.get((kind, size), {}).get(impl)
            if r is not None:
                xs.append(i + (j - (len(impls) - 1) / 2) * width)
                ys.append(r.median_ns)
        if xs:
            ax.bar(xs, ys, width, label=impl, color=colors.get(impl))
    fx, fy = [], []
    for i, kind in enumerate(kinds):
        nb = rows.get((kind, size), {}).get("nbrmm")
        if nb is not None and nb.floor_ns:
            fx.append(i)
            fy.append(nb.floor_ns)
    if fx:
        ax.scatter(fx, fy, marker="_", s=900, color=colors["floor"], label="C++ floor", zorder=3)
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_yscale("log")
    ax.set_ylabel("ns per round trip (log)")
    ax.set_title(title)
    _legend(ax)


def overhead_plot(ax, results):
    rows = index(results, "buffer", "resource", "size")
    kinds = [k for k in RESOURCE_ORDER if (k, 256) in rows]
    colors = _colors()
    for j, impl in enumerate(("nbrmm", "rmm")):
        xs, ys = [], []
        for i, kind in enumerate(kinds):
            r = rows[(kind, 256)].get(impl)
            if r is not None and r.floor_ns is not None:
                xs.append(i + (j - 0.5) * 0.4)
                ys.append(r.median_ns - r.floor_ns)
        if xs:
            ax.bar(xs, ys, 0.4, label=impl, color=colors[impl])
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylabel("ns over the C++ floor")
    ax.set_title("Buffer overhead over librmm, 256 B")
    _legend(ax)


def copy_plot(ax, results):
    rows = index(results, "copy", "direction", "size")
    keys = sorted(rows, key=lambda k: row_sort_key(("direction", "size"), k))
    impls = impls_present(rows)
    colors = _colors()
    series = ["floor"] + impls
    width = 0.8 / len(series)
    for j, name in enumerate(series):
        xs, ys = [], []
        for i, key in enumerate(keys):
            by = rows[key]
            if name == "floor":
                nb = by.get("nbrmm") or next(iter(by.values()))
                value = nb.info.get("floor_gbps")
            else:
                value = by[name].gbps if name in by else None
            if value:
                xs.append(i + (j - (len(series) - 1) / 2) * width)
                ys.append(value)
        if not xs:
            continue
        ax.bar(
            xs,
            ys,
            width,
            label="raw cudaMemcpy" if name == "floor" else name,
            color=colors.get(name),
        )
    ax.set_xticks(range(len(keys)), [f"{d}\n{fmt_size(s)}" for d, s in keys], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("GB/s (log)")
    ax.set_title("Copies")
    _legend(ax)


def threads_plot(ax, results):
    rows = index(results, "threads", "resource", "threads")
    lines = defaultdict(list)
    for (kind, threads), by in rows.items():
        for impl, r in by.items():
            lines[(impl, kind)].append((threads, 1e3 / r.per_op_ns))
    colors = _colors()
    styles = {"pool": "-", "arena": "--", "async": ":", "host": "-."}
    for (impl, kind), pts in sorted(
        lines.items(), key=lambda kv: (rank(kv[0][0], IMPL_ORDER), kv[0][1])
    ):
        pts.sort()
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            styles.get(kind, "-"),
            marker="o",
            color=colors.get(impl),
            label=f"{impl} ({kind})",
        )
    ax.set_xlabel("Python threads")
    ax.set_ylabel("million buffers per second")
    ax.set_title("Allocation throughput, 256 B")
    _legend(ax, fontsize=7)


def current_plot(ax, results):
    colors = _colors()
    cases = [("get_current", "get"), ("set_current", "set")]
    impls = [i for i in IMPL_ORDER if any(r.case in dict(cases) and r.impl == i for r in results)]
    width = 0.8 / max(len(impls), 1)
    for j, impl in enumerate(impls):
        xs, ys = [], []
        for i, (case, _) in enumerate(cases):
            r = index(results, case).get((), {}).get(impl)
            if r is not None:
                xs.append(i + (j - (len(impls) - 1) / 2) * width)
                ys.append(r.median_ns)
        if xs:
            ax.bar(xs, ys, width, label=impl, color=colors.get(impl))
    ax.set_xticks(range(len(cases)), [f"{label}_current_device_resource" for _, label in cases])
    ax.set_ylabel("ns per call")
    ax.set_title("Current device resource")
    _legend(ax)


# ---------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="pytest-benchmark JSON (--benchmark-json)")
    parser.add_argument("--out", required=True, help="folder for report.md and report.png")
    parser.add_argument(
        "--commit",
        help="the commit measured, when the checkout that ran the benchmarks had no "
        "up-to-date git metadata (replaces pytest-benchmark's commit_info)",
    )
    args = parser.parse_args(argv)

    results, doc = load(args.json)
    if args.commit:
        doc["commit_info"] = {"id": args.commit, "dirty": False}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(render_markdown(results, doc), encoding="utf-8")
    print(f"wrote {out / 'report.md'} ({len(results)} benchmarks)")
    if render_png(results, out / "report.png"):
        print(f"wrote {out / 'report.png'}")
    else:
        print("matplotlib is not installed: no report.png", file=sys.stderr)
    if render_workloads_png(results, out / "workloads.png"):
        print(f"wrote {out / 'workloads.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
