"""The interleaved targets over many runs: each run's figure, and their spread.

One run of ``bench_paired.py`` gives one figure per target, and a shared machine moves
that figure from run to run. This script reads several runs (pytest-benchmark JSON,
optionally gzipped, or CSV this script wrote), prints every target's runs, median, range
and how many runs met it, and can write one CSV row per run and target.

    python benchmarks/paired_runs.py RUN.json [RUN.json.gz ...] [--commit C] [--csv OUT]
    python benchmarks/paired_runs.py benchmarks/results/paired-runs.csv

A target is a ratio (subject ÷ reference, as in ``report.py``) or, for ``Buffer``, the
nanoseconds over librmm's C++ floor. ``--commit`` names the commit measured by the JSON
files given, where the checkout that ran them had no up-to-date git metadata.
"""

import argparse
import csv
import gzip
import json
import pathlib
import statistics
import sys

from report import (
    OVERHEAD_TARGET_NS,
    OVERHEAD_TARGET_RESOURCES,
    PAIRED_RATIO_TARGETS,
    PAIRED_SUBJECTS,
    fmt_size,
    md_table,
)

FIELDS = ("commit", "recorded", "target", "subject", "reference", "measure", "subject_ns",
          "reference_ns", "value", "limit")


def _document(path):
    data = pathlib.Path(path).read_bytes()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return json.loads(data)


def rows_of_run(doc, commit=None):
    """One row per target of one run (a pytest-benchmark document)."""
    commit = commit or (doc.get("commit_info") or {}).get("id", "")[:7]
    recorded = doc.get("datetime", "")
    rows = []
    for bench in doc.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        median = (bench.get("stats") or {}).get("median")
        if info.get("case") != "paired" or median is None:
            continue
        subject_ns = median * 1e9 / info.get("ops", 1)
        refs = info.get("reference_ns") or {}
        target = info.get("target")
        base = {"commit": commit, "recorded": recorded, "target": target}
        if target == "buffer_overhead":
            resource, floor = info.get("resource"), refs.get("floor")
            if info.get("impl") != "nbrmm" or floor is None:
                continue
            limit = OVERHEAD_TARGET_NS if resource in OVERHEAD_TARGET_RESOURCES else None
            rows.append({**base, "subject": f"Buffer({fmt_size(info.get('size'))}, mr={resource})",
                         "reference": "C++ floor", "measure": "difference",
                         "subject_ns": subject_ns, "reference_ns": floor,
                         "value": subject_ns - floor, "limit": limit})
            continue
        for name, limit, label in PAIRED_RATIO_TARGETS.get(target, ()):
            ref = refs.get(name)
            if ref:
                rows.append({**base, "subject": PAIRED_SUBJECTS.get(target, str(target)),
                             "reference": label, "measure": "ratio", "subject_ns": subject_ns,
                             "reference_ns": ref, "value": subject_ns / ref, "limit": limit})
    return rows


def read_rows(paths, commit=None):
    """The rows of every file: JSON runs and CSV written by ``write_csv``."""
    rows = []
    for path in map(str, paths):
        if path.endswith(".csv"):
            with open(path, newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    for key in ("subject_ns", "reference_ns", "value"):
                        row[key] = float(row[key])
                    row["limit"] = float(row["limit"]) if row["limit"] else None
                    rows.append(row)
        else:
            rows.extend(rows_of_run(_document(path), commit))
    return rows


def write_csv(rows, path):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in FIELDS})


def _fmt(value, measure):
    return f"{value:.3f}×" if measure == "ratio" else f"{value:,.0f} ns"


def _goal(limit, measure):
    if limit is None:
        return "—"
    return f"≤ {limit}×" if measure == "ratio" else f"≤ {limit:,.0f} ns"


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
        lines.append((subject, reference, _goal(limit, measure), str(len(values)),
                      f"{_fmt(statistics.median(values), measure)} "
                      f"({_fmt(min(values), measure)} – {_fmt(max(values), measure)})",
                      met, ", ".join(sorted({r["commit"] for r in group}))))
    return md_table(["subject", "reference", "target", "runs", "median (range)", "met",
                     "commits"], lines, numeric=False)


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
