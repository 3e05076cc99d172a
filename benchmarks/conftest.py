"""Benchmark configuration: GPU gating, the ``impl`` fixture (nbrmm beside rmm), the
session's resources and C++ floor, and the machine description in the JSON.

What each benchmark records is documented in ``support.py``.
"""

import pytest
from support import HAVE_GPU, Floor, Resources, describe_machine, import_impl

import nbrmm
import nbrmm.mr


def pytest_runtest_setup(item):
    if "gpu" in item.keywords and not HAVE_GPU:
        pytest.skip("no GPU is usable")


def pytest_configure(config):
    # Benchmarks that child processes time (see bench_allocators.py) land here and are
    # added to this run's JSON.
    config.nbrmm_child_benchmarks = []


def pytest_benchmark_update_json(config, benchmarks, output_json):
    output_json["benchmarks"].extend(getattr(config, "nbrmm_child_benchmarks", []))


@pytest.fixture
def impl(request):
    """The library under test, ``nbrmm`` or ``rmm`` (skipped where rmm is missing); the
    benchmark is parametrized with ``support.over_impls``."""
    return import_impl(request.param)


@pytest.fixture(scope="session")
def resources():
    """One resource per (library, kind) for the whole session."""
    res = Resources()
    yield res
    res.clear()


@pytest.fixture(scope="session")
def floor(resources, request):
    """librmm's own cost in C++, measured once per resource kind and size."""
    return Floor(resources, quick=request.config.getoption("benchmark_disable", False))


@pytest.fixture(autouse=True)
def _restore_current_resource():
    """Every benchmark leaves librmm's per-device map as it found it."""
    device = nbrmm.get_current_device()
    before = nbrmm.mr.get_per_device_resource(device)
    yield
    nbrmm.mr.set_per_device_resource(device, before)
    del before


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["nbrmm"] = describe_machine()
