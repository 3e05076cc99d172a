"""``python -m nbrmm``: its command line, and what it says with and without a GPU."""

import io
import pathlib
import subprocess
import sys

import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap
from nbrmm import __main__ as main_module


def run_main(*args):
    return subprocess.run(
        [sys.executable, "-m", "nbrmm", *args], capture_output=True, text=True, timeout=120
    )


def test_help_describes_the_command_and_its_options():
    out = run_main("--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python -m nbrmm")
    for text in ("--version", "--no-allocate", "current memory resource", "Without a usable GPU"):
        assert text in out.stdout
    assert out.stderr == ""


def test_version_option():
    out = run_main("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"nbrmm {nbrmm.__version__}"


@pytest.mark.parametrize("args", [["--bogus"], ["extra"], ["--no-allocate=1"]])
def test_bad_arguments_exit_with_usage(args):
    out = run_main(*args)
    assert out.returncode == 2
    assert "usage: python -m nbrmm" in out.stderr and out.stdout == ""


def test_report_lists_versions_and_devices():
    out = run_main()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"nbrmm {nbrmm.__version__}"
    assert lines[1].startswith("librmm 26.10")
    assert lines[5] == f"CUDA devices: {nbrmm.get_device_count()}"
    assert "device -1" not in out.stdout
    if nbrmm.get_device_count() > 0:
        assert "current resource:" in out.stdout
        assert out.stdout.count("allocated and freed 1 MiB through it: ok") == (
            nbrmm.get_device_count()
        )
        assert "What works without a GPU" not in out.stdout
    else:
        reason = main_module.no_gpu_reason(nbrmm._nbrmm.get_versions())
        assert reason in lines
        assert "Current resource (no current device): <nbrmm.mr.CudaMemoryResource" in out.stdout
        assert main_module.WITHOUT_GPU in out.stdout
        assert "allocated and freed" not in out.stdout


def test_no_allocate_only_reports():
    buf = io.StringIO()
    assert main_module.main(["--no-allocate"], out=buf) == 0
    assert "allocated and freed" not in buf.getvalue()
    assert f"CUDA devices: {nbrmm.get_device_count()}" in buf.getvalue()


def test_main_reads_the_current_resource_that_was_set():
    heap = HostHeap()
    host = heap.resource()
    nbrmm.mr.set_current_device_resource(host)
    buf = io.StringIO()
    assert main_module.main(["--no-allocate"], out=buf) == 0
    assert repr(host) in buf.getvalue()


@pytest.mark.parametrize(
    "versions, environ, expected",
    [
        ({"cuda_driver": 0, "cuda_runtime": 13000}, {}, "No usable CUDA driver was found"),
        (
            {"cuda_driver": 12040, "cuda_runtime": 13000},
            {},
            "supports CUDA 12.4, older than the CUDA 13.0 runtime nbrmm uses: update",
        ),
        ({"cuda_driver": 13000, "cuda_runtime": 13000}, {}, "(13.0) found no usable GPU (is one"),
        (
            {"cuda_driver": 13020, "cuda_runtime": 13000},
            {"CUDA_VISIBLE_DEVICES": ""},
            "CUDA_VISIBLE_DEVICES='' limits",
        ),
    ],
)
def test_no_gpu_reason_names_the_cause(versions, environ, expected):
    assert expected in main_module.no_gpu_reason(versions, environ)


@pytest.mark.parametrize(
    "make",
    [
        lambda h: nbrmm.mr.PoolMemoryResource(h, initial_pool_size="1MiB"),
        lambda h: nbrmm.mr.BinningMemoryResource(h, 10, 20),
        lambda h: nbrmm.mr.FixedSizeMemoryResource(h, block_size=1 << 16, blocks_to_preallocate=2),
        lambda h: nbrmm.mr.LimitingResourceAdaptor(h, 1 << 20),
        lambda h: nbrmm.mr.StatisticsResourceAdaptor(h),
        lambda h: nbrmm.mr.TrackingResourceAdaptor(h),
        lambda h: nbrmm.mr.AlignedResourceAdaptor(h, 4096),
        lambda h: nbrmm.mr.ThreadSafeResourceAdaptor(h),
        lambda h: nbrmm.mr.FailureCallbackResourceAdaptor(h, lambda nbytes: False),
    ],
    ids=["pool", "binning", "fixed", "limiting", "statistics", "tracking", "aligned",
         "thread-safe", "failure-callback"],
)
def test_what_the_report_says_works_without_a_gpu_does(make, tmp_path):
    # Every resource the no-GPU report names as working over host memory allocates there.
    heap = HostHeap()
    res = make(heap.resource())
    buf = nbrmm.Buffer(1000, mr=res)
    assert buf.mr is res and buf.size == 1000 and heap.bytes_in_use > 0
    logged = nbrmm.mr.LoggingResourceAdaptor(res, str(tmp_path / "log.csv"))
    nbrmm.Buffer(10, mr=logged).close()
    logged.flush()
    assert "allocate" in pathlib.Path(logged.get_file_name()).read_text()
    del buf, res, logged
