"""The package imports without a GPU, and its public surface is documented."""

import importlib
import inspect
import subprocess
import sys

import pytest

import nbrmm
import nbrmm.mr


def test_import_without_gpu_needs_no_cuda_call():
    # Importing must not touch the driver: run it in a fresh interpreter.
    out = subprocess.run(
        [sys.executable, "-c", "import nbrmm, nbrmm.mr; print(nbrmm.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == nbrmm.__version__


def test_subinterpreters_are_refused():
    """Loading nbrmm's extension in a subinterpreter, by ``import nbrmm`` or from its file
    (bypassing the package), raises ImportError and leaves the main interpreter's nbrmm
    working (its extension's state is process-wide)."""
    import importlib.util

    name = next((n for n in ("_interpreters", "_xxsubinterpreters")
                 if importlib.util.find_spec(n) is not None), None)
    if name is None:
        pytest.skip("this Python has no subinterpreter module")
    loads = [
        "import nbrmm",
        "import importlib.util as u; s = u.spec_from_file_location('nbrmm._nbrmm', "
        f"{nbrmm._nbrmm.__file__!r}); s.loader.exec_module(u.module_from_spec(s))",
    ]
    # The subinterpreter reports its own error: 3.13's run_string returns it, older ones raise.
    template = "try:\n    {}\nexcept ImportError as exc:\n    print('refused:', exc)\nelse:\n    print('loaded')\n"
    code = f"""
import nbrmm, {name} as interpreters
from extensions import testing
mr = testing.host_heap_resource()
for sub_code in {[template.format(load) for load in loads]!r}:
    sub = interpreters.create()
    interpreters.run_string(sub, sub_code)
    interpreters.destroy(sub)
buf = nbrmm.Buffer(10, mr=mr)
assert buf.stream is nbrmm.DEFAULT_STREAM and buf.size == 10 and buf.mr is mr
# Resources that call Python from C++ still take the GIL for it (3.11's PyGILState_Check
# says every thread holds it once a subinterpreter has existed).
from helpers import HostHeap
heap = HostHeap()
callbacks = heap.resource()
pool = nbrmm.mr.PoolMemoryResource(callbacks, initial_pool_size=1 << 16)
for res in (callbacks, pool):
    p = res.allocate(64)
    res.deallocate(p, 64)
    nbrmm.Buffer(64, mr=res).close()
del pool, res
assert heap.bytes_in_use == 0, heap.live
print("main still works")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    refusal = "refused: nbrmm can only be imported in the main interpreter"
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and lines[2] == "main still works", out.stdout
    # Loaded from its file, the extension refuses by itself (3.13 and later refuse a
    # single-phase module before its init runs, in CPython's words). `import nbrmm` is
    # refused too, by nbrmm or, where the package imports one first, by another module that
    # does not load in subinterpreters (3.12's _ctypes, which loading librmm imports).
    cpython_refusal = "refused: module nbrmm._nbrmm does not support loading in subinterpreters"
    refusals = (refusal,) if sys.version_info < (3, 13) else (refusal, cpython_refusal)
    assert lines[1].startswith(refusals), out.stdout
    assert lines[0].startswith("refused: "), out.stdout


def test_extension_is_initialised_once():
    """Importing nbrmm anew after sys.modules was restored raises ImportError (binding the
    types a second time would abort the process); reloading the extension is harmless."""
    code = """
import importlib, sys
from unittest import mock
import nbrmm
importlib.reload(nbrmm._nbrmm)
print("reloaded")
with mock.patch.dict(sys.modules):
    for name in [n for n in sys.modules if n == "nbrmm" or n.startswith("nbrmm.")]:
        del sys.modules[name]
    try:
        import nbrmm
    except ImportError as exc:
        print("refused:", exc)
buf = nbrmm.Buffer(0)
print("still works")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: nbrmm's extension is already initialised in this process" in out.stdout
    assert "reloaded" in out.stdout and "still works" in out.stdout


@pytest.mark.parametrize("module", [nbrmm, nbrmm.mr])
def test_all_names_exist_and_are_documented(module):
    assert module.__all__ == sorted(module.__all__, key=str)
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or callable(obj):
            assert obj.__doc__, f"{module.__name__}.{name} has no docstring"


def test_exception_hierarchy():
    assert issubclass(nbrmm.CudaError, RuntimeError)
    assert issubclass(nbrmm.BadAlloc, MemoryError)
    assert issubclass(nbrmm.OutOfMemory, nbrmm.BadAlloc)
    assert issubclass(nbrmm.LogicError, RuntimeError)
    # No usable driver or GPU: a CUDA error, and a failed allocation as in rmm.
    assert issubclass(nbrmm.CudaUnavailableError, nbrmm.CudaError)
    assert issubclass(nbrmm.CudaUnavailableError, nbrmm.BadAlloc)


def test_device_queries_do_not_raise():
    count = nbrmm.get_device_count()
    assert count >= 0
    dev = nbrmm.get_current_device()
    assert dev == -1 if count == 0 else 0 <= dev < count
    versions = nbrmm._nbrmm.get_versions()
    assert set(versions) == {"cuda_driver", "cuda_runtime", "nanobind"}


def test_cuda_calls_raise_cleanly_without_gpu():
    count = nbrmm.get_device_count()
    if count > 0:  # with a GPU the same calls simply work
        nbrmm.Stream().synchronize()
        free, total = nbrmm.available_device_memory()
        assert 0 < free <= total
        mr = nbrmm.mr.CudaMemoryResource()
        mr.deallocate(mr.allocate(256), 256)
    else:
        with pytest.raises(nbrmm.CudaError):
            nbrmm.Stream()
        with pytest.raises(nbrmm.CudaError):
            nbrmm.available_device_memory()
        with pytest.raises(nbrmm.CudaUnavailableError, match="no usable CUDA driver or GPU"):
            nbrmm.mr.CudaMemoryResource().allocate(256)
    # no such device; without a GPU, no device at all
    with pytest.raises(ValueError if count else nbrmm.CudaUnavailableError,
                       match=f"^device: device {count} "):
        nbrmm.set_current_device(count)



def test_classes_report_their_public_module():
    """Reprs, tracebacks and type names say where a user imports a class from
    (``nbrmm.mr.PoolMemoryResource``), not the extension's module."""
    import nbrmm.logger
    import nbrmm.mr
    import nbrmm.memory
    import nbrmm.mr.experimental

    modules = [nbrmm, nbrmm.mr, nbrmm.mr.experimental, nbrmm.logger, nbrmm.memory]
    for optional in ("nbrmm.interop", "nbrmm.dask"):  # (need cuda.core, Dask)
        try:
            modules.append(importlib.import_module(optional))
        except ImportError:
            pass
    published = {}
    for module in modules:
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type) and obj.__module__.startswith("nbrmm"):
                published[f"{module.__name__}.{name}"] = obj
    assert "nbrmm.mr.PoolMemoryResource" in published and "nbrmm.Buffer" in published
    assert "nbrmm.memory.Snapshot" in published
    for where, cls in published.items():
        assert "._" not in cls.__module__, where
        assert getattr(sys.modules[cls.__module__], cls.__qualname__) is cls, where
    assert repr(nbrmm.mr.CudaMemoryResource()).startswith("<nbrmm.mr.CudaMemoryResource ")
    assert nbrmm.CudaUnavailableError.__module__ == "nbrmm"
    assert nbrmm.mr.experimental.CudaAsyncManagedMemoryResource.__module__ == (
        "nbrmm.mr.experimental"
    )


def test_pickles_naming_the_extension_module_still_load():
    """Classes pickled by reference name their public module now; pickles made by earlier
    versions name ``nbrmm._nbrmm``, which still has them."""
    import pickle

    import nbrmm.mr

    new = pickle.dumps(nbrmm.mr.PoolMemoryResource, protocol=0)  # (text: names readable)
    assert new.startswith(b"cnbrmm.mr\nPoolMemoryResource\n")
    old = new.replace(b"cnbrmm.mr\n", b"cnbrmm._nbrmm\n")
    assert pickle.loads(old) is nbrmm.mr.PoolMemoryResource
