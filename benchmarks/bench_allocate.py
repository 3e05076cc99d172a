"""``mr.allocate`` + ``mr.deallocate`` round trips: nbrmm beside rmm for every resource
kind, and beside PyTorch's raw caching-allocator calls."""

import pytest
from support import MiB, import_library, over_impls, record, resource_params, size_id

SIZES = (256, MiB)

pytestmark = pytest.mark.benchmark(min_time=2e-5, max_time=0.1, min_rounds=10, disable_gc=True)


@over_impls
@pytest.mark.parametrize("size", SIZES, ids=size_id)
@pytest.mark.parametrize("kind", resource_params())
def bench_allocate(benchmark, kind, size, impl, resources, floor):
    mr = resources.get(impl, kind)
    allocate, deallocate = mr.allocate, mr.deallocate
    info = {"floor_ns": floor.allocate_ns(kind, size), "floor_kind": "allocate+deallocate"}
    record(benchmark, "allocate", impl.__name__, resource=kind, size=size, **info)

    def round_trip():
        deallocate(allocate(size), size)

    round_trip()
    benchmark(round_trip)


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES, ids=size_id)
def bench_allocate_torch(benchmark, size, floor):
    torch = import_library("torch")
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete
    info = {"floor_ns": floor.allocate_ns("pool", size), "floor_kind": "allocate+deallocate"}
    record(benchmark, "allocate", "torch", resource="pool", size=size, **info)

    def round_trip():
        delete(alloc(size))

    round_trip()
    benchmark(round_trip)
