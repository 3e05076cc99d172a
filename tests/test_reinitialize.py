"""reinitialize() and its hooks."""

import pytest

import nbrmm
import nbrmm.mr
from helpers import POOL_SIZE, HostHeap


def test_hooks_run_in_reverse_order_before_any_change():
    calls = []
    current = HostHeap().resource()
    nbrmm.mr.set_current_device_resource(current)

    def first(tag):
        calls.append(("first", tag, nbrmm.mr.get_current_device_resource() is current))

    def second(tag):
        calls.append(("second", tag, nbrmm.mr.get_current_device_resource() is current))

    nbrmm.register_reinitialize_hook(first, "a")
    nbrmm.register_reinitialize_hook(second, tag="b")
    try:
        with pytest.raises(ValueError if nbrmm.get_device_count() else nbrmm.CudaError,
                           match="does not exist|needs a GPU"):
            nbrmm.reinitialize(devices=[nbrmm.get_device_count()])
        assert calls == []  # invalid arguments are rejected before any hook runs
        if nbrmm.get_device_count() > 0:
            nbrmm.reinitialize()
            assert calls == [("second", "b", True), ("first", "a", True)]
    finally:
        nbrmm.unregister_reinitialize_hook(first)
        nbrmm.unregister_reinitialize_hook(second)
    nbrmm.unregister_reinitialize_hook(first)  # unknown hooks are ignored


def test_hook_must_be_callable():
    with pytest.raises(TypeError, match="func"):
        nbrmm.register_reinitialize_hook(42)


def test_bad_devices_argument():
    with pytest.raises(TypeError, match="devices"):
        nbrmm.reinitialize(devices=["0"])


def test_current_resource_type():
    nbrmm.mr.set_current_device_resource(HostHeap().resource())
    assert nbrmm.mr.get_current_device_resource_type() is nbrmm.mr.CallbackMemoryResource


@pytest.mark.gpu
def test_reinitialize_pool_on_the_gpu():
    nbrmm.reinitialize(pool_allocator=True, initial_pool_size=POOL_SIZE,
                       maximum_pool_size=4 * POOL_SIZE)
    mr = nbrmm.mr.get_current_device_resource()
    assert isinstance(mr, nbrmm.mr.PoolMemoryResource)
    assert mr.pool_size() == POOL_SIZE
    assert isinstance(mr.upstream_mr, nbrmm.mr.CudaMemoryResource)
    buf = nbrmm.Buffer(1000)
    assert buf.mr is mr
    del buf
    nbrmm.reinitialize(managed_memory=True)
    assert isinstance(nbrmm.mr.get_current_device_resource(), nbrmm.mr.ManagedMemoryResource)
    nbrmm.reinitialize(initial_pool_size="2k")  # as in rmm: ignored without a pool
    assert type(nbrmm.mr.get_current_device_resource()) is nbrmm.mr.CudaMemoryResource
    nbrmm.reinitialize(devices=None)  # as in rmm: device 0
    assert type(nbrmm.mr.get_per_device_resource(0)) is nbrmm.mr.CudaMemoryResource
