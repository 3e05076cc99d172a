"""Benchmark configuration: resources under test and GPU gating."""

import pytest

import nbrmm

HAVE_GPU = nbrmm.get_device_count() > 0


def pytest_runtest_setup(item):
    if "gpu" in item.keywords and not HAVE_GPU:
        pytest.skip("no GPU is usable")


def pytest_configure(config):
    # Benchmarks that child processes time (see bench_allocators.py) land here and are
    # added to this run's JSON.
    config.nbrmm_child_benchmarks = []


def pytest_benchmark_update_json(config, benchmarks, output_json):
    output_json["benchmarks"].extend(getattr(config, "nbrmm_child_benchmarks", []))
