"""``python -m nbrmm``: versions, CUDA devices, and the current resource of each device.

On a machine with a GPU it also allocates and frees a buffer through each device's
current resource.
"""

import sys

import nbrmm
import nbrmm.mr


def _librmm_version():
    try:
        from importlib.metadata import version

        return version("librmm-cu13")
    except Exception:  # pragma: no cover - metadata missing
        return "unknown"


def _cuda_version(code):
    return f"{code // 1000}.{code % 1000 // 10}" if code else "unavailable"


def main(out=sys.stdout):
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
        dev = nbrmm.get_current_device()
        mr = nbrmm.mr.get_per_device_resource(dev)
        print(f"  no usable GPU; current resource (device {dev}): {mr!r}", file=out)
        return 0
    previous = nbrmm.get_current_device()
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
            buf = nbrmm.Buffer(1 << 20, mr=mr)
            buf.copy_from_host(bytes(range(256)) * 4096)
            ok = buf.tobytes()[:256] == bytes(range(256))
            print(f"    allocated and freed 1 MiB through it: "
                  f"{'ok' if ok else 'DATA MISMATCH'}", file=out)
            del buf
    finally:
        nbrmm.set_current_device(previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
