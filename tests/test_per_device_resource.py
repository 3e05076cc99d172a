"""The current / per-device resource lives in librmm's map, and only there."""

import gc
import weakref

import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap

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
    with pytest.raises(ValueError, match="does not exist"):
        nbrmm.mr.get_per_device_resource(4096)
    with pytest.raises(ValueError, match="does not exist"):
        nbrmm.mr.set_per_device_resource(4096, HostHeap().resource())
    with pytest.raises(TypeError):
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
