"""Check tests/rmm_cases.py against rmm itself: each case must raise what the table says.

The table records, for each bad input, the exception class rmm 26.10 raises; the test
suite checks that nbrmm raises an instance of it. This script runs the same calls with
rmm (no GPU needed: a host-memory CallbackMemoryResource stands in for device memory), so
the table cannot drift from rmm's behaviour. Run it with a Python that has rmm::

    .venv-extra/bin/python scripts/check_rmm_cases.py

Cases that rmm can only show with a GPU (``rmm_cpu=False``) run only where one is usable.
Exits with status 1 when a case disagrees with rmm.
"""

from __future__ import annotations

import ctypes
import importlib.util
import pathlib
import sys

ALIGNMENT = 256


def _load_cases():
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "rmm_cases.py"
    spec = importlib.util.spec_from_file_location("rmm_cases", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["rmm_cases"] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def _host_resource(mr):
    """An rmm CallbackMemoryResource over aligned_alloc/free (host memory, no GPU)."""
    libc = ctypes.CDLL(None)
    libc.aligned_alloc.restype = ctypes.c_void_p
    libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def allocate(nbytes, stream):
        size = (max(nbytes, 1) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        ptr = libc.aligned_alloc(ALIGNMENT, size)
        if not ptr:
            raise MemoryError(f"aligned_alloc({size}) failed")
        return ptr

    def deallocate(ptr, nbytes, stream):
        libc.free(ptr)

    return mr.CallbackMemoryResource(allocate, deallocate)


def main() -> int:
    import rmm
    import rmm.mr
    import rmm.statistics

    cases = _load_cases()
    try:
        from rmm._cuda import gpu

        have_gpu = gpu.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no driver: no GPU
        have_gpu = False

    bad = 0
    ran = 0
    for case in cases.CASES:
        if not case.rmm_cpu and not have_gpu:
            continue
        ran += 1
        try:
            case.call(rmm, _host_resource(rmm.mr))
        except BaseException as exc:  # noqa: BLE001 - every outcome is compared
            if isinstance(exc, case.rmm_raises):
                continue
            got = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
        else:
            got = "no exception"
        bad += 1
        print(f"{case.id}: the table says {case.rmm_raises.__name__}, rmm gives {got}")
    print(f"rmm {rmm.__version__}: {ran - bad} of {ran} cases agree"
          + ("" if have_gpu else " (no GPU: GPU-only cases skipped)"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
