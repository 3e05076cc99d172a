"""The interleaved targets over many runs: each run's figure, and their spread.

One run of ``bench_paired.py`` gives one figure per target, and a shared machine moves
that figure from run to run. This script reads several runs (pytest-benchmark JSON,
optionally gzipped, or CSV this script wrote), prints every target's runs, median, range
a 95% confidence interval of the median, and how many runs met it, and can write one CSV
row per run and target.

    python benchmark-analysis/paired_runs.py RUN.json [RUN.json.gz ...] [--commit C] [--csv OUT]
    python benchmark-analysis/paired_runs.py benchmark-analysis/results/paired-runs.csv

A figure is a ratio (subject ÷ reference, as in ``report.py``), for ``Buffer`` also the
nanoseconds over librmm's C++ floor and the ratio of that to rmm's ``DeviceBuffer``'s.
Every run is judged by the targets ``report.py`` sets now, also runs read back from a CSV
recorded under earlier targets. ``--commit`` names the commit measured by the JSON files
given, where the checkout that ran them had no up-to-date git metadata.
"""

import argparse
import csv
import gzip
import json
import math
import pathlib
import re
import statistics
import sys
from fractions import Fraction

from report import (
    PAIRED_RATIO_TARGETS,
    PAIRED_SUBJECTS,
    buffer_limit,
    fmt_size,
    md_table,
    paired_figures,
    results_of,
)

FIELDS = ("commit", "recorded", "target", "subject", "reference", "measure", "subject_ns",
          "reference_ns", "value", "limit")


def _document(path):
    data = pathlib.Path(path).read_bytes()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return json.loads(data)


def rows_of_run(doc, commit=None):
    """One row per target of one run (a pytest-benchmark document): nbrmm's figures beside
    their targets' references, whether or not the case has a target."""
    commit = commit or (doc.get("commit_info") or {}).get("id", "")[:7]
    recorded = doc.get("datetime", "")
    rows = []
    for r in results_of(doc):
        if r.case != "paired" or r.impl != "nbrmm":
            continue
        target = r.info.get("target")
        if target == "buffer_overhead":
            subject = f"Buffer({fmt_size(r.info.get('size'))}, mr={r.info.get('resource')})"
        else:
            subject = PAIRED_SUBJECTS.get(target, str(target))
        for f in paired_figures(r):
            if f.value is None or f.explains:
                continue
            rows.append({"commit": commit, "recorded": recorded, "target": target,
                         "subject": subject, "reference": f.reference, "measure": f.measure,
                         "subject_ns": r.per_op_ns, "reference_ns": f.reference_ns,
                         "value": f.value, "limit": f.limit})
    return rows


def current_limit(row):
    """The target that ``report.py`` sets now for a row's figure, or None."""
    if row["target"] == "buffer_overhead":
        if row["measure"] != "overhead ratio":
            return None
        found = re.search(r"mr=(\w+)", row["subject"])
        return buffer_limit(found.group(1) if found else None)
    for _, limit, label in PAIRED_RATIO_TARGETS.get(row["target"], ()):
        if label == row["reference"] and row["measure"] == "ratio":
            return limit
    return None


def read_rows(paths, commit=None):
    """The rows of every file: JSON runs and CSV written by ``write_csv``."""
    rows = []
    for path in map(str, paths):
        if path.endswith(".csv"):
            with open(path, newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    for key in ("subject_ns", "reference_ns", "value"):
                        row[key] = float(row[key])
                    row["limit"] = current_limit(row)
                    rows.append(row)
        else:
            rows.extend(rows_of_run(_document(path), commit))
    return rows


#: Decimals kept in the CSV: times to a tenth of a nanosecond, ratios to five places.
_NS_DECIMALS, _RATIO_DECIMALS = 1, 5


def write_csv(rows, path):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for row in rows:
            out = {k: ("" if row[k] is None else row[k]) for k in FIELDS}
            for key in ("subject_ns", "reference_ns"):
                out[key] = f"{row[key]:.{_NS_DECIMALS}f}"
            places = _NS_DECIMALS if row["measure"] == "difference" else _RATIO_DECIMALS
            out["value"] = f"{row['value']:.{places}f}"
            writer.writerow(out)


def _fmt(value, measure):
    return f"{value:,.0f} ns" if measure == "difference" else f"{value:.3f}×"


def _goal(limit, measure):
    if limit is None:
        return "—"
    return f"≤ {limit:,.0f} ns" if measure == "difference" else f"≤ {limit:g}×"


def median_interval(values, confidence=0.95):
    """A distribution-free confidence interval of the median of ``values``: the order
    statistics ``x(l)`` and ``x(n+1-l)`` with the largest ``l`` whose interval covers the
    median with at least ``confidence`` (the number of runs under the true median is
    binomial, n and one half). None when there are too few values for that confidence.
    The binomial tail is summed exactly, so that any number of runs works."""
    n = len(values)
    # P(B <= l - 1) <= tail, counted in the 2**n equally likely outcomes
    allowed = (1 - Fraction(confidence).limit_denominator()) / 2 * 2**n
    below, lower = 0, 0  # the outcomes with B <= lower - 1; the 1-based index l
    while lower < n // 2:
        below += math.comb(n, lower)  # now the outcomes with B <= lower
        if below > allowed:
            break
        lower += 1
    if lower == 0:
        return None
    ordered = sorted(values)
    return ordered[lower - 1], ordered[n - lower]


def summary(rows):
    """A markdown table: per subject and reference, the runs and the spread of the figure."""
    groups = {}
    for row in rows:
        groups.setdefault((row["subject"], row["reference"], row["measure"]), []).append(row)
    lines = []
    for (subject, reference, measure), group in groups.items():
        values = [r["value"] for r in group]
        limit = group[0]["limit"]
        met = "—" if limit is None else f"{sum(v <= limit for v in values)} of {len(values)}"
        interval = median_interval(values)
        lines.append((subject, reference, _goal(limit, measure), str(len(values)),
                      f"{_fmt(statistics.median(values), measure)} "
                      f"({_fmt(min(values), measure)} – {_fmt(max(values), measure)})",
                      "—" if interval is None else
                      f"{_fmt(interval[0], measure)} – {_fmt(interval[1], measure)}",
                      met, ", ".join(sorted({r["commit"] for r in group}))))
    return md_table(["subject", "reference", "target", "runs", "median (range)",
                     "median, 95% CI", "met", "commits"], lines, numeric=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="pytest-benchmark JSON (.json, .json.gz) or CSV")
    parser.add_argument("--commit", help="the commit the JSON files measured")
    parser.add_argument("--csv", help="write every run's rows here")
    args = parser.parse_args(argv)
    rows = read_rows(args.runs, args.commit)
    if args.csv:
        write_csv(rows, args.csv)
    print(summary(rows) if rows else "no interleaved targets in these runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
