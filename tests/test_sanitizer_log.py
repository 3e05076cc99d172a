"""scripts/sanitizer_api_errors.py: how gpu-check reads compute-sanitizer's memcheck log."""

import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "sanitizer_api_errors.py"

PROBE = (
    '========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on '
    "CUDA API call to cuGetProcAddress_v2.\n"
)
PEER = (
    '========= Program hit CUDA_ERROR_INVALID_DEVICE (error 101) due to "invalid device '
    'ordinal" on CUDA API call to cuMemPoolSetAccess.\n'
)
INVALID_READ = (
    "========= Invalid __global__ read of size 4 bytes\n"
    "=========     at kernel+0x70\n"
)


def frames(*modules):
    return "".join(
        f"=========     Host Frame: f{i} [0x{i:x}] in {m}\n" for i, m in enumerate(modules)
    )


def log(tmp_path, name, *records, leaked=0):
    body = "========= COMPUTE-SANITIZER\n" + "=========\n".join(records)
    body += f"========= LEAK SUMMARY: {leaked} bytes leaked in {int(bool(leaked))} allocations\n"
    body += f"========= ERROR SUMMARY: {len(records)} errors\n"
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def run(*paths):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *paths], capture_output=True, text=True, timeout=60
    )


def test_api_errors_of_other_libraries_pass_and_are_attributed(tmp_path):
    plain = log(tmp_path, "plain.log", PROBE, PROBE, PEER)
    traced = log(
        tmp_path, "traced.log",
        PROBE + frames("libcuda.so.1", "/site/cuda/bindings/_internal/driver.cpython-312.so"),
        PEER + frames("libcuda.so.1", "/site/cuda/core/_peer_access_utils.so"),
    )
    out = run(plain, traced)
    assert out.returncode == 0, out.stdout
    assert "cuGetProcAddress_v2 -> CUDA_ERROR_INVALID_VALUE, 2x" in out.stdout
    assert "called from f1 in _peer_access_utils.so (1x)" in out.stdout
    assert "0 memory errors, 0 bytes leaked, 3 API calls returning errors (0 made" in out.stdout


@pytest.mark.parametrize("module", ["/site/nbrmm/_nbrmm.cpython-312-x86_64-linux-gnu.so",
                                    "/site/librmm/lib64/librmm.so"])
def test_api_errors_of_nbrmm_or_librmm_fail(tmp_path, module):
    plain = log(tmp_path, "plain.log", PEER)
    traced = log(tmp_path, "traced.log", PEER + frames("libcuda.so.1", module))
    out = run(plain, traced)
    assert out.returncode == 99 and "(1 made from nbrmm or librmm)" in out.stdout


def test_memory_errors_leaks_and_unattributed_api_errors_fail(tmp_path):
    assert run(log(tmp_path, "a.log", INVALID_READ)).returncode == 99
    assert run(log(tmp_path, "b.log", leaked=64)).returncode == 99
    out = run(log(tmp_path, "c.log", PROBE))
    assert out.returncode == 99 and "could not be attributed" in out.stdout
    assert run(log(tmp_path, "d.log")).returncode == 0
    assert run(str(tmp_path / "missing.log")).returncode == 2
