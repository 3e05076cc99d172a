"""Shared test configuration: the ``gpu`` marker and ``--require-gpu``, and the test
suite's C++ extensions (``extensions.py``) importable in child processes too."""

import gc
import os
import pathlib
import shutil

import pytest
from hypothesis import HealthCheck, settings

import nbrmm
import nbrmm.mr

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci")

HAVE_GPU = nbrmm.get_device_count() > 0

# Child interpreters that tests start import helpers and extensions from this folder.
_TESTS = str(pathlib.Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_TESTS] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)


def pytest_addoption(parser):
    parser.addoption(
        "--require-gpu",
        action="store_true",
        default=False,
        help="fail (instead of skipping) every gpu test when no GPU is usable",
    )


def pytest_runtest_setup(item):
    if "gpu" in item.keywords and not HAVE_GPU:
        if item.config.getoption("--require-gpu"):
            pytest.fail("--require-gpu: this gpu test cannot run, no GPU is usable")
        pytest.skip("no GPU is usable")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (
        report.skipped
        and "gpu" in item.keywords
        and item.config.getoption("--require-gpu")
        and not hasattr(report, "wasxfail")
    ):
        # On the GPU machine a skipped GPU test is a failure (e.g. a missing CuPy).
        report.outcome = "failed"
        report.longrepr = f"--require-gpu: gpu test was skipped: {report.longrepr}"


@pytest.fixture(autouse=True)
def _restore_current_resource():
    """Every test leaves librmm's per-device map as it found it."""
    device = nbrmm.get_current_device()
    before = nbrmm.mr.get_per_device_resource(device)
    yield
    nbrmm.mr.set_per_device_resource(device, before)
    del before
    gc.collect()


def _find_browser():
    """The path of a Chromium-family browser (on PATH, or Playwright's), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as p:
        path = p.chromium.executable_path
    return path if pathlib.Path(path).exists() else None


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium for the tests that render pages (skipped where there is none)."""
    path = _find_browser()
    if path is None:
        pytest.skip(
            "no headless browser: install Chromium (Debian: apt-get install chromium) or "
            "Playwright's (pip install playwright && playwright install chromium)"
        )
    return path
