#!/usr/bin/env python
"""Record a small workload's memory history and draw the picture of its HTML page.

    python scripts/make-memory-history-picture.py -o docs/memory-history.png [--dump FILE]

On a GPU machine with CuPy and PyTorch, the workload is CuPy and PyTorch sharing one
nbrmm pool (the "Memory history" guide's example); elsewhere it is ``nbrmm.Buffer``
objects over host memory, under the same tags. The page is written with
``Snapshot.to_html`` and photographed by headless Chromium; ``--dump`` also keeps the
snapshot (PyTorch's format), ``--html`` the page.
"""

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time

import nbrmm
import nbrmm.memory
import nbrmm.mr

MiB = 1 << 20


def host_resource():
    libc = ctypes.CDLL(None)
    libc.aligned_alloc.restype = ctypes.c_void_p
    libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def allocate(nbytes, stream):
        return libc.aligned_alloc(256, max(256, (nbytes + 255) // 256 * 256))

    def deallocate(ptr, nbytes, stream):
        libc.free(ptr)

    return nbrmm.mr.CallbackMemoryResource(allocate, deallocate)


def gpu_workload():
    """CuPy and PyTorch through one pool; returns what must stay alive."""
    import cupy
    import torch
    from nbrmm.allocators.cupy import rmm_cupy_allocator
    from nbrmm.allocators.torch import rmm_torch_allocator

    pool = nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource(), initial_pool_size="2GiB")
    nbrmm.mr.set_current_device_resource(pool)
    cupy.cuda.set_allocator(rmm_cupy_allocator)
    torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
    nbrmm.memory.record_history()
    kept = []
    with nbrmm.memory.tag("preprocess"):
        for _ in range(6):
            kept.append(cupy.random.random((1024, 1024 * 8), dtype=cupy.float32))
            time.sleep(0.01)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
    with nbrmm.memory.tag("train"):
        for _ in range(10):
            x = torch.randn(4096, 2048, device="cuda")
            model(x).sum().backward()
            time.sleep(0.01)
    del kept[:3]
    torch.cuda.synchronize()
    return [pool, model, kept]


def host_workload():
    """The same phases with Buffers over host memory; returns what must stay alive."""
    mr = host_resource()
    nbrmm.memory.record_history()
    kept = []
    with nbrmm.memory.tag("preprocess"):
        for _ in range(6):
            kept.append(nbrmm.Buffer(32 * MiB, mr=mr))
            time.sleep(0.01)
    weights = [nbrmm.Buffer(16 * MiB, mr=mr) for _ in range(8)]
    with nbrmm.memory.tag("train"):
        for _ in range(10):
            step = [nbrmm.Buffer(24 * MiB, mr=mr) for _ in range(3)]
            time.sleep(0.01)
            del step
    del kept[:3]
    return [mr, weights, kept]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--dump", help="also write the snapshot (PyTorch's format) here")
    parser.add_argument("--html", help="also keep the page here")
    args = parser.parse_args()
    try:
        alive = gpu_workload() if nbrmm.get_device_count() else host_workload()
    except ImportError:
        alive = host_workload()
    snap = nbrmm.memory.snapshot()
    if args.dump:
        snap.dump(args.dump)
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which(
        "google-chrome")
    if browser is None:
        sys.exit("no Chromium on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        page = args.html or os.path.join(tmp, "memory.html")
        snap.to_html(page)
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--screenshot={os.path.abspath(args.output)}", "--window-size=1280,1500",
             "file://" + os.path.abspath(page)],
            check=True, capture_output=True, timeout=120,
        )
    del alive
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
