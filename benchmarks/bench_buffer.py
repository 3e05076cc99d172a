"""Buffer create+destroy round trips: nbrmm beside rmm for every resource kind and size,
and beside the allocators of CuPy, PyTorch and cuda.core."""

import pytest
from support import (
    OTHER_LIBRARIES,
    MiB,
    buffer_maker,
    checked,
    other_buffer_maker,
    over_impls,
    record,
    resource_params,
    size_id,
)

SIZES = (0, 256, MiB)

pytestmark = pytest.mark.benchmark(min_time=2e-5, max_time=0.1, min_rounds=10, disable_gc=True)


@over_impls
@pytest.mark.parametrize("size", SIZES, ids=size_id)
@pytest.mark.parametrize("kind", resource_params())
def bench_buffer(benchmark, kind, size, impl, resources, floor):
    make = buffer_maker(impl, size, resources.get(impl, kind))
    info = floor.buffer_info(kind, size)
    record(benchmark, "buffer", impl.__name__, resource=kind, size=size, **info)
    make()
    benchmark(make)


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES, ids=size_id)
@pytest.mark.parametrize("library", OTHER_LIBRARIES)
def bench_buffer_other_library(benchmark, library, size, floor):
    make, keep = other_buffer_maker(library, size)
    checked(make)
    kind = OTHER_LIBRARIES[library]
    info = floor.buffer_info(kind, size)
    record(benchmark, "buffer", library, resource=kind, size=size, **info)
    benchmark(make)
    del keep
