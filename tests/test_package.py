"""The package imports without a GPU, and its public surface is documented."""

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
    """Importing nbrmm in a subinterpreter raises ImportError and leaves the main
    interpreter's nbrmm working (its extension's state is process-wide)."""
    import importlib.util

    name = next((n for n in ("_interpreters", "_xxsubinterpreters")
                 if importlib.util.find_spec(n) is not None), None)
    if name is None:
        pytest.skip("this Python has no subinterpreter module")
    code = f"""
import nbrmm, {name} as interpreters
from extensions import testing
mr = testing.host_heap_resource()
sub = interpreters.create()
try:
    interpreters.run_string(sub, "import nbrmm")
except Exception as exc:
    print("refused:", exc)
interpreters.destroy(sub)
buf = nbrmm.Buffer(10, mr=mr)
assert buf.stream is nbrmm.DEFAULT_STREAM and buf.size == 10 and buf.mr is mr
print("main still works")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "nbrmm can only be imported in the main interpreter" in out.stdout, out.stdout
    assert "main still works" in out.stdout


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
    with pytest.raises(ValueError, match="does not exist"):
        nbrmm.set_current_device(count)

