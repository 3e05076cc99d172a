"""A worker process for ``bench_paired.py``: times batches of ``torch.empty`` on command.

torch's allocator can be replaced only once per process, before torch first allocates, so
comparing nbrmm's hook as torch's allocator with torch's caching allocator takes a
process for each. The benchmark starts one worker per mode and has them time a batch in
turn.

    python benchmarks/torch_worker.py MODE BATCH NBYTES [CPU]

``caching`` keeps torch's caching allocator; ``hook`` makes nbrmm's hook over an arena
torch's allocator; ``hook-host`` makes it the hook over a host-heap resource (malloc and
free), which measures the floor of torch's pluggable-allocator path: ``torch.empty``
never touches the memory it gets. ``caching-history`` and ``hook-history`` are
``caching`` and ``hook`` while recording the memory history with Python stacks: torch's
own recorder (``torch.cuda.memory._record_memory_history(stacks="python")``) and nbrmm's
(``nbrmm.memory.record_history(stacks="python")``), each keeping 100,000 events. With ``CPU``, the worker runs on that CPU only (the
benchmark gives every worker the same one, so that their turns see the same core).

The worker prints ``ready`` once it is warm. Then, for every line ``batch`` on its stdin,
it times ``BATCH`` calls of ``torch.empty(NBYTES, dtype=torch.uint8, device="cuda")`` and
prints the nanoseconds they took; any other line ends it.
"""

import gc
import os
import sys
import time


def main(mode, batch_size, nbytes, cpu=None):
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    import torch

    history = mode.endswith("-history")
    mode = mode.removesuffix("-history")
    if mode in ("hook", "hook-host"):
        import nbrmm
        from nbrmm.allocators.torch import torch_allocator

        if mode == "hook":
            from support import make_resource

            mr = make_resource(nbrmm, "arena")
        else:
            # The test suite's C++ extension (tests/extensions.py) has the host heap.
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
            from extensions import testing as _testing

            mr = _testing.host_heap_resource()
        torch.cuda.memory.change_current_allocator(torch_allocator(mr))
    elif mode != "caching":
        raise SystemExit(f"unknown mode {mode!r}")
    if history and mode == "caching":
        torch.cuda.memory._record_memory_history(
            enabled="all", stacks="python", max_entries=100_000
        )
    elif history:
        import nbrmm.memory

        nbrmm.memory.record_history(stacks="python", max_events=100_000)
    empty, uint8 = torch.empty, torch.uint8

    def batch():
        start = time.perf_counter_ns()
        for _ in range(batch_size):
            empty(nbytes, dtype=uint8, device="cuda")
        return time.perf_counter_ns() - start

    batch()
    gc.disable()  # as pytest-benchmark's disable_gc in the parent
    print("ready", flush=True)
    while sys.stdin.readline().strip() == "batch":
        print(batch(), flush=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
         int(sys.argv[4]) if len(sys.argv) > 4 else None)
