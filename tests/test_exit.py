"""Interpreter exit with live buffers and resources: exit code 0, no crash, no hang,
and nanobind reports no leaked instances."""

import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent(
    """
    import ctypes, gc, sys, threading
    import nbrmm, nbrmm.mr
    from extensions import cpp_ext
    libc = ctypes.CDLL(None)
    libc.aligned_alloc.restype = ctypes.c_void_p
    libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    def host_alloc(n):
        return libc.aligned_alloc(256, (max(n, 1) + 255) // 256 * 256)
    def host_resource():
        return nbrmm.mr.CallbackMemoryResource(
            lambda n, s: host_alloc(n), lambda p, n, s: libc.free(p))
    ON_GPU = nbrmm.get_device_count() > 0
    """
)

SCENARIOS = {
    "live_buffers": """
        mr = host_resource()
        keep = [nbrmm.Buffer(n, mr=mr) for n in range(0, 4096, 256)]
    """,
    "python_resource_is_current": """
        nbrmm.mr.set_current_device_resource(host_resource())
        keep = nbrmm.Buffer(100)
    """,
    "python_subclass_is_current": """
        class R(nbrmm.mr.DeviceMemoryResource):
            def allocate(self, n, stream=None):
                return host_alloc(n)
            def deallocate(self, p, n, stream=None):
                libc.free(p)
        nbrmm.mr.set_current_device_resource(R())
        keep = nbrmm.Buffer(10)
    """,
    "cpp_owned_current": """
        cpp_ext.set_current_owned(ON_GPU)
        keep = nbrmm.Buffer(64)
        held = cpp_ext.allocate_from_current(32)
    """,
    "cpp_holds_python_resource": """
        cpp_ext.hold_resource(host_resource())
        cpp_ext.allocate_held(8)
    """,
    "cycle_through_callbacks": """
        class Holder: pass
        h = Holder()
        h.mr = nbrmm.mr.CallbackMemoryResource(
            lambda n, s, h=h: host_alloc(n), lambda p, n, s: libc.free(p))
        h.buf = nbrmm.Buffer(5, mr=h.mr)
    """,
    "buffer_freed_from_another_thread": """
        mr = host_resource()
        bufs = [nbrmm.Buffer(16, mr=mr) for _ in range(100)]
        t = threading.Thread(target=bufs.clear)
        t.start(); t.join()
        keep = nbrmm.Buffer(16, mr=mr)
    """,
    "gpu_cupy_arrays_from_the_hook": """
        if ON_GPU:
            import cupy
            from nbrmm.allocators.cupy import cupy_allocator
            pool = nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource(), 1 << 22)
            cupy.cuda.set_allocator(cupy_allocator(mr=pool))
            keep = [cupy.arange(n, dtype=cupy.float32) for n in (10, 1000, 100000)]
            total = float(keep[-1].sum())
    """,
    "gpu_buffers_and_streams": """
        if ON_GPU:
            s = nbrmm.Stream()
            keep = [nbrmm.Buffer(1 << 20, stream=s) for _ in range(4)]
            pool = nbrmm.CudaStreamPool(2)
            keep2 = nbrmm.Buffer(8, stream=pool.get_stream())
    """,
    # Another library may keep a class alive past the interpreter (a C static, as Cython
    # modules' globals are): nbrmm's classes, and Python subclasses of its C++ classes,
    # kept so must keep no nbrmm instance alive with them (a function default, say).
    "classes_kept_by_a_static": """
        import enum, importlib
        from nbrmm import _nbrmm
        kept = []
        for name, cls in sorted(vars(_nbrmm).items()):
            if (isinstance(cls, type) and not issubclass(cls, (BaseException, enum.Enum))
                    and cls.__flags__ & (1 << 10)):  # Py_TPFLAGS_BASETYPE
                kept.append(type("Sub" + name, (cls,), {}))
        for module in ("nbrmm.interop", "nbrmm.dask", "nbrmm.allocators.numba"):
            try:
                m = importlib.import_module(module)
            except ImportError:
                continue
            kept += [c for c in vars(m).values()
                     if isinstance(c, type) and c.__module__.startswith("nbrmm")]
        assert len(kept) > 20, kept
        # Dask's dispatch tables, where nbrmm registers its buffer types.
        try:
            import dask.sizeof, nbrmm.dask._protocol
            from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
            from distributed.protocol.serialize import dask_deserialize, dask_serialize
        except ImportError:
            pass
        else:
            kept += [dask.sizeof.sizeof, cuda_deserialize, cuda_serialize, dask_deserialize,
                     dask_serialize]
        for cls in kept:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(cls))
    """,
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_exit_is_clean(name):
    code = PRELUDE + textwrap.dedent(SCENARIOS[name]) + "\nprint('reached the end')\n"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "reached the end" in out.stdout
    assert "leaked" not in out.stderr, out.stderr


# What an atexit handler that runs after nbrmm's own does (one registered before nbrmm was
# imported: atexit runs the handlers last registered first).
LATE_HANDLERS = {
    "cpp_resource_set_current": """
        from extensions import testing
        nbrmm.mr.set_current_device_resource(testing.host_heap_resource())
    """,
    "python_resource_set_current": """
        nbrmm.mr.set_current_device_resource(host_resource())
        keep.append(nbrmm.Buffer(64))
    """,
    "statistics_enabled": """
        import nbrmm.statistics
        from extensions import testing
        nbrmm.mr.set_current_device_resource(testing.host_heap_resource())
        nbrmm.statistics.enable_statistics()
        keep.append(nbrmm.Buffer(64))
        assert nbrmm.statistics.get_statistics().current_bytes == 64
    """,
    "cpp_holds_python_resource": """
        cpp_ext.hold_resource(host_resource())
        cpp_ext.allocate_held(8)
    """,
}


@pytest.mark.parametrize("name", sorted(LATE_HANDLERS))
def test_what_an_atexit_handler_after_nbrmms_sets_is_let_go_of(name):
    body = textwrap.indent(textwrap.dedent(LATE_HANDLERS[name]), "    ")
    code = (
        "import atexit, os\n"
        "keep = []\n"
        "def late():\n"
        f"{body}\n"
        "    os.write(1, b'the late handler ran\\n')\n"
        "atexit.register(late)  # before nbrmm is imported: it runs after nbrmm's handler\n"
        + PRELUDE
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "the late handler ran" in out.stdout, out.stderr
    assert "leaked" not in out.stderr, out.stderr


def test_default_stream_gone():
    """Once nbrmm.DEFAULT_STREAM is gone (at exit, when the modules' namespaces are
    cleared), what would use it uses a new Stream of the same stream instead."""
    code = PRELUDE + textwrap.dedent(
        """
        from extensions import testing
        import weakref
        mr = testing.host_heap_resource()
        gone = weakref.ref(nbrmm.DEFAULT_STREAM)
        held = [nbrmm.DEFAULT_STREAM]  # not in a dict: the loop must not delete it
        for referrer in gc.get_referrers(held[0]):
            if isinstance(referrer, dict):
                for key in [k for k, v in referrer.items() if v is held[0]]:
                    del referrer[key]
        held.clear()
        gc.collect()
        assert gone() is None, gc.get_referrers(gone())
        buf = nbrmm.Buffer(0, mr=mr)
        assert buf.stream.handle == 0 and buf.stream.owner is None, buf.stream
        buf.resize(300)  # nothing to copy (copies need a GPU)
        assert buf.size == 300 and buf.stream.handle == 0
        mr.deallocate(mr.allocate(8), 8)
        print("the default stream still works")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "the default stream still works" in out.stdout
    assert "leaked" not in out.stderr, out.stderr


def test_default_stream_late_at_exit():
    """A finalizer that runs after nbrmm's namespaces were cleared (an object kept by
    ``sys``, whose namespace is cleared last) still makes and resizes buffers on the
    default stream of a C++ resource."""
    code = PRELUDE + textwrap.dedent(
        """
        import os
        from extensions import testing
        class Late:
            def __init__(self):
                self.write, self.namespace = os.write, nbrmm.__dict__
                self.Buffer, self.DeviceBuffer = nbrmm.Buffer, nbrmm.DeviceBuffer
                self.mr = testing.host_heap_resource()
                self.buf = nbrmm.Buffer(64, mr=self.mr)
            def __del__(self):
                Buffer = self.Buffer
                cleared = self.namespace.get("DEFAULT_STREAM") is None
                # Nothing that copies memory (copies need a GPU).
                b = Buffer(0, mr=self.mr)
                b.resize(512)
                self.buf.resize(32)
                Buffer(0, mr=self.mr).shrink_to_fit()
                sizes = (b.size, Buffer(8, mr=self.mr).size, Buffer.to_device(b"", mr=self.mr).size,
                         self.DeviceBuffer(size=8, mr=self.mr).size, self.buf.size)
                self.write(1, f"late: cleared={cleared} {sizes} handle={b.stream.handle}\\n".encode())
        sys._nbrmm_late = Late()
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "late: cleared=True (512, 8, 0, 8, 32) handle=0" in out.stdout, (out.stdout, out.stderr)
    assert "leaked" not in out.stderr, out.stderr


def _nbrmm_modules():
    import pkgutil

    import nbrmm

    return ["nbrmm"] + sorted(m.name for m in pkgutil.walk_packages(nbrmm.__path__, "nbrmm.")
                              if not m.name.endswith("__main__"))


@pytest.mark.parametrize("module", _nbrmm_modules())
def test_module_contents_kept_by_a_static(module):
    """Every function and class of a module of nbrmm, kept past the interpreter by
    another library (a C static), keeps no nbrmm instance alive with the module's
    namespace: each module alone, in its own process, as other modules could hide it."""
    code = PRELUDE + textwrap.dedent(
        f"""
        import importlib, types
        try:
            module = importlib.import_module({module!r})
        except ImportError as exc:
            print("unavailable:", exc)
            sys.exit(0)
        kept = [v for v in vars(module).values()
                if isinstance(v, (types.FunctionType, type)) and v.__module__ == {module!r}]
        for obj in kept:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
        print("kept", len(kept))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    if "unavailable:" in out.stdout:
        pytest.skip(out.stdout.strip())
    assert "kept" in out.stdout
    assert "leaked" not in out.stderr, out.stderr
