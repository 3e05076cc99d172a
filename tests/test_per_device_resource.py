"""The current / per-device resource lives in librmm's map, and only there."""

import gc
import weakref

import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap, run_python

DEV = nbrmm.get_current_device()


def test_set_then_get_returns_the_very_object():
    mr = HostHeap().resource()
    nbrmm.mr.set_current_device_resource(mr)
    assert nbrmm.mr.get_current_device_resource() is mr
    assert nbrmm.mr.get_per_device_resource(DEV) is mr
    assert nbrmm.mr.is_initialized()


def test_the_map_keeps_the_resource_alive():
    mr = HostHeap().resource()
    ref = weakref.ref(mr)
    nbrmm.mr.set_per_device_resource(DEV, mr)
    del mr
    gc.collect()
    assert ref() is not None
    assert nbrmm.mr.get_current_device_resource() is ref()
    nbrmm.mr.reset_per_device_resource(DEV)
    gc.collect()
    assert ref() is None


def test_initial_resource_is_librmms_cuda_resource():
    nbrmm.mr.reset_per_device_resource(DEV)
    got = nbrmm.mr.get_current_device_resource()
    assert type(got) is nbrmm.mr.CudaMemoryResource
    assert got.device == DEV


def test_default_mr_is_resolved_at_call_time():
    a, b = HostHeap(), HostHeap()
    nbrmm.mr.set_current_device_resource(a.resource())
    buf_a = nbrmm.Buffer(8)
    nbrmm.mr.set_current_device_resource(b.resource())
    buf_b = nbrmm.Buffer(16)
    assert (a.bytes_in_use, b.bytes_in_use) == (8, 16)
    # Each buffer frees to the resource that allocated it.
    nbrmm.mr.reset_per_device_resource(DEV)
    del buf_a, buf_b
    assert (a.bytes_in_use, b.bytes_in_use) == (0, 0)


def test_bad_arguments():
    with pytest.raises(TypeError, match="mr"):
        nbrmm.mr.set_current_device_resource("pool")
    with pytest.raises(ValueError, match="^device: device -2 does not exist"):
        nbrmm.mr.get_per_device_resource(-2)
    with pytest.raises(ValueError, match="^device: device -2 does not exist"):
        nbrmm.mr.set_per_device_resource(-2, HostHeap().resource())
    # 4096: no such device, or without a GPU, no device at all
    missing = ValueError if nbrmm.get_device_count() else nbrmm.CudaUnavailableError
    with pytest.raises(missing, match="^device: device 4096 "):
        nbrmm.mr.get_per_device_resource(4096)
    with pytest.raises(missing, match="^device: device 4096 "):
        nbrmm.mr.set_per_device_resource(4096, HostHeap().resource())
    with pytest.raises(TypeError, match="^device: expected an int, got str"):
        nbrmm.mr.set_per_device_resource("0", HostHeap().resource())


def test_using_device_resource_restores_on_exit_and_on_error():
    outer = HostHeap().resource()
    inner = HostHeap().resource()
    nbrmm.mr.set_current_device_resource(outer)
    with nbrmm.mr.using_device_resource(inner) as got:
        assert got is inner
        assert nbrmm.mr.get_current_device_resource() is inner
    assert nbrmm.mr.get_current_device_resource() is outer
    with pytest.raises(KeyError):
        with nbrmm.mr.using_device_resource(inner):
            raise KeyError("boom")
    assert nbrmm.mr.get_current_device_resource() is outer


def test_a_wrapper_of_a_cpp_made_resource_set_current_comes_back_as_itself():
    from extensions import cpp_ext, testing

    heap = testing.host_heap_resource()
    pool = testing.make_cpp("pool", heap)
    stats = testing.make_cpp("statistics", heap)
    for r in (heap, pool, stats, heap):
        nbrmm.mr.set_current_device_resource(r)
        assert nbrmm.mr.get_current_device_resource() is r
        assert nbrmm.mr.get_per_device_resource(DEV) is r
    # It is in the map as C++ made it: C++ casts it to its librmm type.
    nbrmm.mr.set_per_device_resource(DEV, stats)
    assert cpp_ext.current_is_owned()
    assert nbrmm.mr.get_current_device_resource() is stats
    nbrmm.mr.set_per_device_resource(DEV, pool)
    assert nbrmm.mr.get_current_device_resource() is pool
    buf = nbrmm.Buffer(100)
    assert buf.mr is pool
    # The map keeps the C++ resource, not the wrapper: once the wrapper is gone, reading
    # the map gives a new one of the same class.
    ref = weakref.ref(pool)
    del pool, buf, r
    gc.collect()
    assert ref() is None
    again = nbrmm.mr.get_current_device_resource()
    assert type(again) is nbrmm.mr.PoolMemoryResource
    assert nbrmm.mr.get_current_device_resource() is again
    nbrmm.mr.reset_per_device_resource(DEV)


@pytest.mark.skipif(nbrmm.get_device_count() > 0,
                    reason="CUDA refuses a forked child the parent's context (use spawn)")
def test_a_child_forked_while_no_other_thread_uses_nbrmm_uses_the_parents_resources():
    # The documented rule (docs/errors.md, "Forked processes"): a child may use resources
    # made before the fork when no other thread was using nbrmm at the fork. (On a GPU,
    # CUDA itself refuses the parent's context in the child: there, use spawn.)
    out = run_python(
        """
        import os
        import nbrmm, nbrmm.mr
        from helpers import HostHeap
        heap = HostHeap()
        pool = nbrmm.mr.PoolMemoryResource(heap.resource(), initial_pool_size="64KiB")
        nbrmm.mr.set_current_device_resource(pool)
        kept = nbrmm.Buffer(100)
        pid = os.fork()
        if pid == 0:
            ok = nbrmm.mr.get_current_device_resource() is pool
            buf = nbrmm.Buffer(1000)
            ok = ok and buf.mr is pool and buf.size == 1000
            nbrmm.mr.set_current_device_resource(heap.resource())
            ok = ok and nbrmm.Buffer(10).mr is not pool
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["child", "exit", "0"], (out.stdout, out.stderr)
