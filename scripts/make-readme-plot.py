#!/usr/bin/env python
"""Record a small GPU workload's allocations and plot its memory timeline.

Two phases, so that the plot can be drawn on a machine other than the GPU one:

    python scripts/make-readme-plot.py --record timeline.csv       # on the GPU machine
    python scripts/make-readme-plot.py --plot timeline.csv -o docs/memory-timeline.png

``--record`` runs the workload with allocation logging (``nbrmm.enable_logging``) and
statistics (``nbrmm.statistics``) enabled on the current device resource, profiling each
phase, and writes the CSV log plus the profiler records (``<log>.profile.json``).
The workload uses CuPy through ``nbrmm.allocators.cupy`` when both are available, and
otherwise allocates ``nbrmm.Buffer`` objects of varying sizes. ``--host-memory`` records
the Buffer workload over malloc'd host memory, for machines without a GPU.

``--plot`` needs only matplotlib (``pip install 'nbrmm[plot]'``), no GPU.
"""

import argparse
import gc
import os
import shutil
import sys

MiB = 1 << 20


def profile_path(log):
    return os.path.splitext(log)[0] + ".profile.json"


def buffer_workload(nbrmm, profiler):
    """Phases of nbrmm.Buffer allocations: load, a transform loop, reduce, release."""
    with profiler(name="load"):
        data = [nbrmm.Buffer(size * MiB) for size in (8, 16, 24, 32, 48)]
    for step in range(6):
        with profiler(name="transform"):
            scratch = [nbrmm.Buffer((4 + 6 * step + 3 * i) * MiB) for i in range(4)]
            out = nbrmm.Buffer((16 + 4 * step) * MiB)
            del scratch
            data.append(out)
        with profiler(name="evict"):
            data.pop(0)
    with profiler(name="reduce"):
        partial = [nbrmm.Buffer(2 * MiB) for _ in range(16)]
        total = nbrmm.Buffer(64 * MiB)
        del partial
    with profiler(name="release"):
        while data:
            data.pop()
        del total


def cupy_workload(cupy, profiler):
    """A small array workload: generate, multiply, transform and reduce."""
    rng = cupy.random.default_rng(0)
    with profiler(name="generate"):
        mats = [rng.random((n, n), dtype=cupy.float32) for n in (1024, 2048, 3072)]
    for step in range(4):
        with profiler(name="matmul"):
            prod = mats[step % 3] @ mats[step % 3].T
        with profiler(name="fft"):
            spectrum = cupy.fft.fft2(prod)
            power = cupy.abs(spectrum) ** 2
            del spectrum
        with profiler(name="reduce"):
            stats = cupy.stack([power.sum(axis=0), power.max(axis=0), power.mean(axis=0)])
            float(stats.sum())
        del prod, power, stats
    with profiler(name="release"):
        del mats
        cupy.cuda.get_current_stream().synchronize()


def record(log, host_memory):
    import nbrmm
    import nbrmm.statistics as st
    from nbrmm.plot import write_profile

    if host_memory:
        # A C++ resource over the host heap (the workload never touches the memory), from
        # the test suite's C++ extension.
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        from extensions import testing

        nbrmm.mr.set_current_device_resource(testing.host_heap_resource())
    elif hasattr(nbrmm.mr, "PoolMemoryResource"):
        nbrmm.mr.set_current_device_resource(
            nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource(), initial_pool_size="1GiB")
        )

    cupy = allocator = None
    if not host_memory:
        try:
            import cupy
            from nbrmm.allocators import cupy as cupy_hook

            allocator = getattr(cupy_hook, "rmm_cupy_allocator", None)
        except ImportError:
            cupy = None

    records = st.ProfilerRecords()
    device = nbrmm.get_current_device()
    nbrmm.enable_logging(log)
    st.enable_statistics()  # on top of the logging adaptor: both see every allocation
    try:
        profiler = lambda name: st.profiler(records=records, name=name)  # noqa: E731
        if cupy is not None and allocator is not None:
            cupy.cuda.set_allocator(allocator)
            try:
                cupy_workload(cupy, profiler)
            finally:
                cupy.cuda.set_allocator(None)
            kind = "CuPy through nbrmm.allocators.cupy"
        else:
            buffer_workload(nbrmm, profiler)
            kind = "nbrmm.Buffer"
        gc.collect()
        final = st.disable_statistics()
    finally:
        written = nbrmm.get_log_filenames()[device]
        nbrmm.disable_logging()
    if os.path.abspath(written) != os.path.abspath(log):
        shutil.move(written, log)
    write_profile(records, profile_path(log))
    print(f"workload: {kind}; peak {final.peak_bytes:,} bytes, {final.total_count:,} allocations")
    print(f"wrote {log} and {profile_path(log)}")


def plot(log, output, title):
    from nbrmm.plot import plot_log

    profile = profile_path(log)
    (tl,) = plot_log(
        log,
        output,
        profile=profile if os.path.exists(profile) else None,
        title=title,
    )
    print(f"{tl.allocations:,} allocations, peak {tl.peak_bytes:,} bytes; wrote {output}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    phase = parser.add_mutually_exclusive_group(required=True)
    phase.add_argument("--record", metavar="LOG", help="run the workload, write the CSV log")
    phase.add_argument("--plot", metavar="LOG", help="draw the PNG from a recorded log")
    parser.add_argument("-o", "--output", help="the image to write (--plot; default LOG.png)")
    parser.add_argument(
        "--host-memory", action="store_true", help="record over host memory (no GPU needed)"
    )
    parser.add_argument(
        "--title", default="nbrmm: bytes in use through the current device resource"
    )
    args = parser.parse_args(argv)
    if args.record:
        record(args.record, args.host_memory)
    else:
        plot(args.plot, args.output or os.path.splitext(args.plot)[0] + ".png", args.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
