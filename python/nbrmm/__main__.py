"""``python -m nbrmm``: versions, CUDA devices, and the current resource of each device.

On a machine with a GPU it also allocates and frees a buffer through each device's
current resource. Without a usable GPU it says why none was found and what works
without one.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

import nbrmm
import nbrmm.mr

if TYPE_CHECKING:
    from nbrmm._typing import Versions

DESCRIPTION = """\
Print nbrmm's version and those it runs with (librmm, nanobind, Python, the CUDA
driver and runtime), the CUDA devices, and the current memory resource of each device
(read from librmm's per-device map, which C++ code shares). On each device it then
allocates 1 MiB through that resource, copies data in and out, and frees it.
Without a usable GPU it explains why and lists what works without one."""

#: What nbrmm can do on a machine without a usable GPU (printed by ``python -m nbrmm``).
WITHOUT_GPU = """\
What works without a GPU:
  - importing nbrmm (importing never calls CUDA);
  - memory resources over host memory: nbrmm.mr.CallbackMemoryResource with your own
    allocate/deallocate functions (see "Getting started" in the documentation), and
    PoolMemoryResource, BinningMemoryResource, FixedSizeMemoryResource and the
    limiting, statistics, tracking, logging, aligned, thread-safe and failure-callback
    adaptors over them;
  - nbrmm.Buffer objects allocated from such resources (their .ptr is host memory;
    copies to and from a buffer need CUDA);
  - the current resource (nbrmm.mr.set_current_device_resource and friends),
    nbrmm.statistics, allocation logging and python -m nbrmm.plot.
What needs a GPU: the CUDA resources (CudaMemoryResource, pools over them, ...),
streams, copies, and the CuPy, PyTorch and Numba allocator hooks; those calls raise
nbrmm.CudaError (or MemoryError for an allocation)."""


def _librmm_version() -> str:
    try:
        from importlib.metadata import version

        return version("librmm-cu13")
    except Exception:  # pragma: no cover - metadata missing
        return "unknown"


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}" if code else "unavailable"


def no_gpu_reason(
    versions: Versions | Mapping[str, int], environ: Mapping[str, str] | None = None
) -> str:
    """Why no GPU is usable, in one sentence, from ``nbrmm._nbrmm.get_versions()``.

    Parameters
    ----------
    versions : dict
        ``cuda_driver`` and ``cuda_runtime`` as CUDA encodes them (0: unavailable).
    environ : dict, optional
        The environment (``os.environ`` when omitted), for ``CUDA_VISIBLE_DEVICES``.

    Returns
    -------
    str
        The reason.
    """
    visible = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    driver, runtime = versions["cuda_driver"], versions["cuda_runtime"]
    if not driver:
        return ("No usable CUDA driver was found (libcuda could not be loaded), so no GPU "
                "can be used.")
    if runtime and driver < runtime:
        return (f"The CUDA driver supports CUDA {_cuda_version(driver)}, older than the "
                f"CUDA {_cuda_version(runtime)} runtime nbrmm uses: update the NVIDIA driver.")
    if visible is not None:
        return (f"The CUDA driver ({_cuda_version(driver)}) found no usable GPU; "
                f"CUDA_VISIBLE_DEVICES={visible!r} limits which GPUs this process sees.")
    return (f"The CUDA driver ({_cuda_version(driver)}) found no usable GPU "
            "(is one installed, and does nvidia-smi list it?).")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of ``python -m nbrmm`` (``-h`` prints the help and exits)."""
    parser = argparse.ArgumentParser(
        prog="python -m nbrmm",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="More in nbrmm's documentation: getting started, and errors.",
    )
    parser.add_argument(
        "--version", action="version", version=f"nbrmm {nbrmm.__version__}",
        help="print nbrmm's version and exit",
    )
    parser.add_argument(
        "--no-allocate", action="store_true",
        help="only report; do not allocate through the devices' current resources",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run ``python -m nbrmm``.

    Returns
    -------
    int
        The exit status: 0, also without a GPU; 1 if data read back from a device
        differed from what was written.
    """
    args = parse_args(argv)
    out = sys.stdout if out is None else out
    versions = nbrmm._nbrmm.get_versions()
    nb = versions["nanobind"]
    print(f"nbrmm {nbrmm.__version__}", file=out)
    print(f"librmm {_librmm_version()}", file=out)
    print(f"nanobind {nb // 10000}.{nb // 100 % 100}.{nb % 100}", file=out)
    print(f"Python {sys.version.split()[0]}", file=out)
    print(f"CUDA driver {_cuda_version(versions['cuda_driver'])}, "
          f"runtime {_cuda_version(versions['cuda_runtime'])}", file=out)
    count = nbrmm.get_device_count()
    print(f"CUDA devices: {count}", file=out)
    if count == 0:
        print("", file=out)
        print(no_gpu_reason(versions), file=out)
        # librmm's per-device map has an entry for "no device" (id -1) too; it holds
        # librmm's initial resource until something else is set.
        mr = nbrmm.mr.get_current_device_resource()
        print(f"Current resource (no current device): {mr!r}", file=out)
        print("", file=out)
        print(WITHOUT_GPU, file=out)
        return 0
    previous = nbrmm.get_current_device()
    status = 0
    try:
        for dev in range(count):
            info = nbrmm.get_device_info(dev)
            nbrmm.set_current_device(dev)
            free, total = nbrmm.available_device_memory()
            mr = nbrmm.mr.get_current_device_resource()
            print(f"  device {dev}: {info['name']}, compute capability "
                  f"{info['compute_capability'][0]}.{info['compute_capability'][1]}, "
                  f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free", file=out)
            print(f"    current resource: {mr!r}", file=out)
            if args.no_allocate:
                continue
            buf = nbrmm.Buffer(1 << 20, mr=mr)
            buf.copy_from_host(bytes(range(256)) * 4096)
            ok = buf.tobytes()[:256] == bytes(range(256))
            print(f"    allocated and freed 1 MiB through it: "
                  f"{'ok' if ok else 'DATA MISMATCH'}", file=out)
            del buf
            status = status if ok else 1
    finally:
        nbrmm.set_current_device(previous)
    return status


if __name__ == "__main__":
    sys.exit(main())
