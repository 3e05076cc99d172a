"""The Numba EMM plugin (nbrmm.allocators.numba)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap


def _run(script, **env):
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def plugin():
    pytest.importorskip("numba.cuda")
    import nbrmm.allocators.numba as plugin

    return plugin


def test_factory_binds_a_resource(plugin):
    mr = HostHeap().resource()
    cls = plugin.numba_manager(mr)
    assert issubclass(cls, plugin.RMMNumbaManager)
    assert cls.mr is mr
    assert plugin.RMMNumbaManager.mr is None
    assert plugin.numba_manager() is plugin.RMMNumbaManager
    assert plugin._numba_memory_manager is plugin.RMMNumbaManager


def test_factory_rejects_bad_mr(plugin):
    with pytest.raises(TypeError, match="^mr: expected an nbrmm.mr.DeviceMemoryResource, got str"):
        plugin.numba_manager("pool")
    with pytest.raises(TypeError, match="^mr:"):
        plugin.numba_manager(nbrmm.mr.CudaMemoryResource)


def test_module_surface(plugin):
    assert plugin.__all__ == sorted(plugin.__all__)
    for name in plugin.__all__:
        assert getattr(plugin, name).__doc__
    for method in ("memalloc", "get_ipc_handle", "get_memory_info", "initialize"):
        assert getattr(plugin.RMMNumbaManager, method).__doc__


_STAT = """
def cur(mr, name="current_bytes"):
    c = mr.allocation_counts
    return c[name] if isinstance(c, dict) else getattr(c, name)
"""


@pytest.mark.gpu
def test_gpu_bound_manager_serves_numba_arrays():
    result = _run(
        _STAT
        + textwrap.dedent(
            """
        import gc, json
        import numpy as np
        from numba import cuda
        import nbrmm, nbrmm.mr
        from nbrmm.allocators.numba import numba_manager
        stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
        cuda.set_memory_manager(numba_manager(stats))

        import cupy

        r = {}
        d = cuda.to_device(np.arange(1000, dtype=np.int64))
        # Compute on numba's array in place (through its CUDA array interface).
        view = cupy.asarray(d)
        view *= 2
        cupy.cuda.get_current_stream().synchronize()
        del view
        r["sum"] = int(d.copy_to_host().sum())
        r["live"] = cur(stats)
        r["count"] = cur(stats, "total_count")
        free, total = cuda.current_context().get_memory_info()
        r["info"] = [free, total]
        r["ipc"] = type(d.get_ipc_handle()).__name__
        empty = cuda.device_array(0, dtype=np.float32)
        r["empty"] = empty.size
        del d, empty
        gc.collect()
        r["end"] = cur(stats)
        print(json.dumps(r))
        """
        )
    )
    assert result["sum"] == 999 * 1000
    assert result["live"] >= 8000
    assert result["count"] >= 1
    free, total = result["info"]
    assert 0 < free <= total
    assert result["ipc"] in ("IpcHandle", "IpcArrayHandle")  # numba-cuda versions differ
    assert result["empty"] == 0
    assert result["end"] == 0


@pytest.mark.gpu
def test_gpu_environment_variable_selects_the_plugin_and_current_resource():
    result = _run(
        _STAT
        + textwrap.dedent(
            """
        import gc, json
        import numpy as np
        import nbrmm, nbrmm.mr
        a = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
        b = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
        nbrmm.mr.set_current_device_resource(a)
        from numba import cuda
        import nbrmm.allocators.numba as plugin
        r = {"manager": type(cuda.current_context().memory_manager).__name__}
        x = cuda.to_device(np.ones(4096, dtype=np.float32))
        nbrmm.mr.set_current_device_resource(b)
        y = cuda.to_device(np.ones(2048, dtype=np.float32))
        r["a"], r["b"] = cur(a), cur(b)
        del x
        gc.collect()
        r["a_after"], r["b_after"] = cur(a), cur(b)
        r["y"] = float(y.copy_to_host().sum())
        print(json.dumps(r))
        """
        ),
        NUMBA_CUDA_MEMORY_MANAGER="nbrmm.allocators.numba",
    )
    assert result["manager"] == "RMMNumbaManager"
    assert result["a"] >= 4096 * 4
    assert result["b"] >= 2048 * 4
    assert result["a_after"] == 0
    assert result["b_after"] == result["b"]
    assert result["y"] == 2048.0
