"""A worker process for ``bench_paired.py``: times batches of ``torch.empty`` on command.

torch's allocator can be replaced only once per process, before torch first allocates, so
comparing nbrmm's hook as torch's allocator with torch's caching allocator takes two
processes. The benchmark starts one worker of each and has them time a batch in turn.

    python benchmarks/torch_worker.py caching|hook BATCH NBYTES

The worker prints ``ready`` once it is warm. Then, for every line ``batch`` on its stdin,
it times ``BATCH`` calls of ``torch.empty(NBYTES, dtype=torch.uint8, device="cuda")`` and
prints the nanoseconds they took; any other line ends it.
"""

import gc
import sys
import time


def main(mode, batch_size, nbytes):
    import torch

    if mode == "hook":
        from support import make_resource

        import nbrmm
        from nbrmm.allocators.torch import torch_allocator

        torch.cuda.memory.change_current_allocator(torch_allocator(make_resource(nbrmm, "arena")))
    elif mode != "caching":
        raise SystemExit(f"unknown mode {mode!r}")
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
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
