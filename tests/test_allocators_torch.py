"""The PyTorch allocator hook (nbrmm.allocators.torch)."""

import ctypes
import gc
import json
import subprocess
import sys
import textwrap

import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap
from nbrmm import _nbrmm

SLOTS = _nbrmm._torch_slot_count


def _library():
    lib = ctypes.CDLL(_nbrmm.__file__)
    alloc = [getattr(lib, f"nbrmm_torch_alloc_{i}") for i in range(SLOTS)]
    for fn in alloc:
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    free = [getattr(lib, f"nbrmm_torch_free_{i}") for i in range(SLOTS)]
    for fn in free:
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    return alloc, free


# ------------------------------------------------------------------------------------
# CPU: the exported C functions, driven through ctypes over host memory
# ------------------------------------------------------------------------------------


def test_extension_exports_the_pluggable_allocator_functions():
    alloc, free = _library()
    assert len(alloc) == len(free) == SLOTS >= 8


def test_bind_rejects_bad_arguments():
    with pytest.raises(TypeError, match="^mr: expected an nbrmm.mr.DeviceMemoryResource"):
        _nbrmm._torch_bind(3)
    with pytest.raises(TypeError, match="^mr: the keys"):
        _nbrmm._torch_bind({"0": HostHeap().resource()})
    for key in (-1, 2**31, 2**64):
        with pytest.raises(ValueError) as info:
            _nbrmm._torch_bind({key: HostHeap().resource()})
        assert str(info.value) == (
            f"mr: device ids must be non-negative ints below 2**31, got {key}")
    with pytest.raises(TypeError, match="^mr:"):
        _nbrmm._torch_bind({0: "resource"})
    with pytest.raises(ValueError, match="^mr: the mapping is empty"):
        _nbrmm._torch_bind({})


def test_bind_shares_slots_between_equal_bindings():
    assert _nbrmm._torch_bind(None) == 0
    mr = HostHeap().resource()
    slot = _nbrmm._torch_bind(mr)
    assert 0 < slot < SLOTS
    assert _nbrmm._torch_bind(mr) == slot
    other = _nbrmm._torch_bind(HostHeap().resource())
    assert other not in (0, slot)


def test_bound_slot_allocates_from_its_resource_and_frees_to_it():
    heap = HostHeap()
    alloc, free = _library()
    slot = _nbrmm._torch_bind(heap.resource())
    before = _nbrmm._torch_outstanding()
    device = nbrmm.get_current_device()
    ptr = alloc[slot](1000, device, None)
    assert heap.live == {ptr: 1000}
    assert _nbrmm._torch_outstanding() == before  # slot 0's count only: bound slots keep none
    free[slot](ptr, 1000, device, None)
    assert heap.live == {}
    assert alloc[slot](0, device, None) is None  # nothing allocated for 0 bytes
    free[slot](None, 0, device, None)
    assert heap.calls == [("allocate", 1000, ptr), ("deallocate", 1000, ptr)]


def test_bound_slot_frees_on_the_stream_and_size_torch_gives():
    # torch records each pointer's size, device and stream and hands them to the free
    # function paired with the allocation function; a bound slot's free uses them as given.
    calls = []
    heap = HostHeap()
    mr = nbrmm.mr.CallbackMemoryResource(
        lambda n, s: calls.append(("a", n, s.handle)) or heap.allocate(n, s),
        lambda p, n, s: calls.append(("d", n, s.handle)) or heap.deallocate(p, n, s),
    )
    alloc, free = _library()
    device = 0
    slot = _nbrmm._torch_bind({device: mr})
    ptr = alloc[slot](300, device, 2)
    free[slot](ptr, 300, device + 1, 2)  # a device the slot has no resource for: ignored
    assert heap.live == {ptr: 300}
    free[slot](ptr, 300, device, 2)
    assert heap.live == {}
    assert calls == [("a", 300, 2), ("d", 300, 2)]


def test_round_trip_measurement_runs_the_slot_functions():
    from extensions import testing as _testing

    from nbrmm import _nbrmm

    heap = HostHeap()
    slot = _nbrmm._torch_bind(heap.resource())
    before = _nbrmm._torch_outstanding()
    assert _testing.torch_hook_round_trip_ns(slot, 1024, 25) > 0
    assert [c[:2] for c in heap.calls] == [("allocate", 1024), ("deallocate", 1024)] * 25
    assert all(heap.calls[i][2] == heap.calls[i + 1][2] for i in range(0, 50, 2))
    assert heap.live == {}
    assert _nbrmm._torch_outstanding() == before
    current = HostHeap()
    nbrmm.mr.set_current_device_resource(current.resource())
    _testing.torch_hook_round_trip_ns(0, 64, 3)  # slot 0: the current resource
    assert [c[:2] for c in current.calls] == [("allocate", 64), ("deallocate", 64)] * 3
    assert _nbrmm._torch_outstanding() == before
    with pytest.raises(ValueError, match=r"^slot: must be non-negative"):
        _testing.torch_hook_round_trip_ns(-1, 8, 1)
    with pytest.raises(ValueError, match=rf"^slot: nbrmm exports no nbrmm_torch_alloc_{SLOTS}"):
        _testing.torch_hook_round_trip_ns(SLOTS, 8, 1)
    with pytest.raises(ValueError, match="^iterations"):
        _testing.torch_hook_round_trip_ns(slot, 8, 0)
    with pytest.raises(ValueError, match="^nbytes"):
        _testing.torch_hook_round_trip_ns(slot, -1, 1)
    assert len(heap.calls) == 50


def test_current_slot_ignores_pointers_it_did_not_allocate():
    heap = HostHeap()
    alloc, free = _library()
    nbrmm.mr.set_current_device_resource(heap.resource())
    before = _nbrmm._torch_outstanding()
    free[0](12345, 8, nbrmm.get_current_device(), None)
    free[0](None, 0, nbrmm.get_current_device(), None)
    assert heap.calls == []
    assert _nbrmm._torch_outstanding() == before


def test_current_slot_frees_to_the_resource_that_allocated():
    a, b = HostHeap(), HostHeap()
    alloc, free = _library()
    device = nbrmm.get_current_device()
    nbrmm.mr.set_current_device_resource(a.resource())
    p1 = alloc[0](100, device, None)
    nbrmm.mr.set_current_device_resource(b.resource())
    p2 = alloc[0](200, device, None)
    assert a.live == {p1: 100}
    assert b.live == {p2: 200}
    free[0](p1, 100, device, None)  # rmm's hook would free this into b
    assert a.live == {}
    assert b.live == {p2: 200}
    free[0](p2, 200, device, None)
    assert b.live == {}


# ------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------


def _stat(mr, name):
    counts = mr.allocation_counts
    return counts[name] if isinstance(counts, dict) else getattr(counts, name)


def _run_torch(script):
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
def test_gpu_module_surface():
    import torch

    import nbrmm.allocators.torch as hook

    assert isinstance(hook.rmm_torch_allocator, torch.cuda.memory.CUDAPluggableAllocator)
    assert hook.torch_allocator() is hook.rmm_torch_allocator
    mr = nbrmm.mr.CudaMemoryResource()
    assert hook.torch_allocator(mr) is hook.torch_allocator(mr)
    assert hook.torch_allocator({nbrmm.get_current_device(): mr}) is not None
    with pytest.raises(TypeError, match="^mr:"):
        hook.torch_allocator("cuda")
    with pytest.raises(ValueError, match="created on device"):
        hook.torch_allocator({nbrmm.get_current_device() + 1: mr})


@pytest.mark.gpu
def test_gpu_mem_pool_allocates_from_the_bound_resource():
    import torch

    import nbrmm.allocators.torch as hook

    stats = nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
    pool = torch.cuda.MemPool(hook.torch_allocator(stats).allocator())
    before = _nbrmm._torch_outstanding()
    with torch.cuda.use_mem_pool(pool):
        t = torch.arange(100_000, device="cuda", dtype=torch.int64)
    assert int(t.sum().item()) == 100_000 * 99_999 // 2
    assert _stat(stats, "total_count") >= 1
    assert _stat(stats, "current_bytes") >= t.numel() * 8
    assert _stat(stats, "current_count") >= 1
    assert _nbrmm._torch_outstanding() == before  # a bound slot: nothing recorded
    del t, pool
    gc.collect()
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_gpu_rmm_torch_allocator_frees_to_the_allocating_resource():
    result = _run_torch(
        """
        import json, torch, nbrmm, nbrmm.mr
        from nbrmm import _nbrmm
        from nbrmm.allocators.torch import rmm_torch_allocator
        torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
        new = lambda: nbrmm.mr.StatisticsResourceAdaptor(nbrmm.mr.CudaMemoryResource())
        def cur(mr):
            c = mr.allocation_counts
            return c["current_bytes"] if isinstance(c, dict) else c.current_bytes
        a, b = new(), new()
        nbrmm.mr.set_current_device_resource(a)
        t1 = torch.ones(1 << 20, dtype=torch.uint8, device="cuda")
        nbrmm.mr.set_current_device_resource(b)
        t2 = torch.ones(1 << 19, dtype=torch.uint8, device="cuda")
        r = {"a_live": cur(a), "b_live": cur(b), "outstanding": _nbrmm._torch_outstanding()}
        del t1
        torch.cuda.synchronize()
        r["a_after"], r["b_after"] = cur(a), cur(b)
        r["sum"] = int((t2.to(torch.int64) * 2).sum().item())
        del t2
        torch.cuda.synchronize()
        r["b_end"], r["outstanding_end"] = cur(b), _nbrmm._torch_outstanding()
        print(json.dumps(r))
        """
    )
    assert result["a_live"] >= 1 << 20
    assert result["b_live"] >= 1 << 19
    assert result["outstanding"] >= 2
    assert result["a_after"] == 0  # freed to a although b is current
    assert result["b_after"] == result["b_live"]
    assert result["sum"] == 2 << 19
    assert result["b_end"] == 0
    assert result["outstanding_end"] <= result["outstanding"] - 2


@pytest.mark.gpu
def test_gpu_bound_allocator_and_out_of_memory():
    result = _run_torch(
        """
        import json, torch, nbrmm, nbrmm.mr
        from nbrmm.allocators.torch import torch_allocator
        limited = nbrmm.mr.LimitingResourceAdaptor(nbrmm.mr.CudaMemoryResource(), 1 << 20)
        torch.cuda.memory.change_current_allocator(torch_allocator(limited))
        r = {}
        t = torch.full((1000,), 3, dtype=torch.int32, device="cuda")
        r["sum"] = int(t.sum().item())
        r["allocated"] = limited.get_allocated_bytes()
        try:
            torch.empty(2 << 20, dtype=torch.uint8, device="cuda")
        except Exception as e:
            r["error"] = type(e).__name__
            r["message"] = str(e)
        del t
        torch.cuda.synchronize()
        r["allocated_end"] = limited.get_allocated_bytes()
        print(json.dumps(r))
        """
    )
    assert result["sum"] == 3000
    assert result["allocated"] >= 4000
    assert result["error"] in ("RuntimeError", "OutOfMemoryError", "MemoryError")
    assert "limit" in result["message"].lower() or "memory" in result["message"].lower()
    assert result["allocated_end"] == 0
