"""Benchmark configuration: resources under test and GPU gating."""

import pytest

import nbrmm

HAVE_GPU = nbrmm.get_device_count() > 0


def pytest_runtest_setup(item):
    if "gpu" in item.keywords and not HAVE_GPU:
        pytest.skip("no GPU is usable")
