"""Helpers shared by the tests (import from here, never from conftest)."""

import ast
import ctypes
import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import nbrmm.mr

POOL_SIZE = 1 << 20  # every pool the GPU tests create stays this small

#: The folder that holds the package (``python/`` in a checkout).
PACKAGE_FOLDER = pathlib.Path(nbrmm.__file__).resolve().parent.parent


def stub_of(module):
    """The stub of a module of nbrmm: ``nbrmm.mr`` -> ``.../nbrmm/mr/__init__.pyi``."""
    base = PACKAGE_FOLDER.joinpath(*module.split("."))
    return base / "__init__.pyi" if base.is_dir() else base.with_suffix(".pyi")


def extension_stubs():
    """The stubs that declare the extension's API: ``_nbrmm.pyi`` and those of the modules
    that publish its classes (scripts/stubgen.py declares each class in the stub of the
    module it is published under)."""
    from nbrmm import _nbrmm

    modules = {obj.__module__ for obj in vars(_nbrmm).values() if isinstance(obj, type)}
    return [stub_of("nbrmm._nbrmm"), *map(stub_of, sorted(modules - {"nbrmm._nbrmm"}))]


def extension_declarations():
    """The top-level declarations of the extension's API in its stubs: the functions and
    attributes of ``_nbrmm.pyi`` and the extension's classes, wherever they are declared
    (not the rest of a public module's stub: what its Python source defines and imports)."""
    from nbrmm import _nbrmm

    main, *public = extension_stubs()
    nodes = [node for node in ast.parse(main.read_text()).body
             if not isinstance(node, (ast.Import, ast.ImportFrom))]
    for stub in public:
        nodes += [node for node in ast.parse(stub.read_text()).body
                  if isinstance(node, ast.ClassDef)
                  and isinstance(getattr(_nbrmm, node.name, None), type)]
    return nodes


def run_threads(work, count, timeout=300):
    """Runs ``work(k)`` in ``count`` threads (k = 0 .. count - 1) and waits for them all;
    returns the exceptions they raised."""
    errors = []

    def run(k):
        try:
            work(k)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
        assert not t.is_alive()
    return errors


def run_python(code, timeout=120):
    """Run ``code`` (dedented) in a fresh interpreter; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )

_libc = ctypes.CDLL(None)
_libc.aligned_alloc.restype = ctypes.c_void_p
_libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]

#: What every librmm resource guarantees, and what adaptors (aligned, ...) rely on.
ALIGNMENT = 256


class HostHeap:
    """Host-memory callbacks (``aligned_alloc``/``free``, 256-byte aligned as librmm's
    resources are) that record every call and the bytes in use.

    Used to run resources over host memory, so that the CPU suite exercises real
    allocation paths without a GPU.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.live = {}
        self.calls = []

    def allocate(self, nbytes, stream):
        size = (max(nbytes, 1) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        ptr = _libc.aligned_alloc(ALIGNMENT, size)
        if not ptr:
            raise MemoryError(f"aligned_alloc({ALIGNMENT}, {size}) failed")
        with self.lock:
            self.live[ptr] = nbytes
            self.calls.append(("allocate", nbytes, ptr))
        return ptr

    def deallocate(self, ptr, nbytes, stream):
        with self.lock:
            assert self.live.pop(ptr) == nbytes, "freed with a different size"
            self.calls.append(("deallocate", nbytes, ptr))
        _libc.free(ptr)

    @property
    def bytes_in_use(self):
        with self.lock:
            return sum(self.live.values())

    def resource(self):
        return nbrmm.mr.CallbackMemoryResource(self.allocate, self.deallocate)


def read_host(ptr, nbytes):
    return ctypes.string_at(ptr, nbytes)


def write_host(ptr, data):
    ctypes.memmove(ptr, data, len(data))


def table_rows(markdown):
    """The cells (stripped) of every markdown table row in ``markdown``."""
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("|")
    ]


_cuda_core_host_resource_class = None


def cuda_core_host_resource(**properties):
    """A cuda.core ``MemoryResource`` written as a third-party library would write one,
    over a ``HostHeap`` (its ``heap`` attribute): host memory, which cuda.core frees
    without a CUDA driver. ``properties`` override what it reports (``is_managed``...);
    ``fail`` (an exception) makes ``allocate`` raise it."""
    global _cuda_core_host_resource_class
    if _cuda_core_host_resource_class is None:
        import cuda.core

        class CudaCoreHostResource(cuda.core.MemoryResource):
            def __init__(self, fail=None, **properties):
                self.heap = HostHeap()
                self.fail = fail
                self.properties = {
                    "is_device_accessible": False,
                    "is_host_accessible": True,
                    "is_managed": False,
                    "device_id": -1,
                    **properties,
                }

            def allocate(self, size, *, stream):
                if self.fail is not None:
                    raise self.fail
                ptr = self.heap.allocate(size, stream)
                return cuda.core.Buffer.from_handle(ptr, size, mr=self)

            def deallocate(self, ptr, size, *, stream):
                self.heap.deallocate(ptr, size, stream)

            is_device_accessible = property(lambda self: self.properties["is_device_accessible"])
            is_host_accessible = property(lambda self: self.properties["is_host_accessible"])
            is_managed = property(lambda self: self.properties["is_managed"])
            device_id = property(lambda self: self.properties["device_id"])

        _cuda_core_host_resource_class = CudaCoreHostResource
    return _cuda_core_host_resource_class(**properties)


def browser_env():
    """The environment for a browser the tests start: without the sanitizer runtime that
    scripts/sanitize-cpu preloads into the tests (Chromium does not run under it)."""
    drop = ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")
    return {k: v for k, v in os.environ.items() if k not in drop}
