"""What the wheel and the sdist contain.

The wheel is read from ``$NBRMM_WHEEL`` when set (.ci/run sets it to the wheel it
built), otherwise from the record of the installed distribution when ``nbrmm`` is
imported from it. The sdist is read from ``$NBRMM_SDIST`` when set, otherwise built
here with scikit-build-core's sdist hook where scikit-build-core is installed.
"""

import importlib.metadata
import os
import pathlib
import re
import tarfile
import zipfile

import pytest

import nbrmm
from doc_examples import ROOT

PACKAGE = pathlib.Path(nbrmm.__file__).parent


def wheel_files():
    """The paths inside the wheel (``nbrmm/...`` and ``nbrmm-<version>.dist-info/...``)."""
    if path := os.environ.get("NBRMM_WHEEL"):
        with zipfile.ZipFile(path) as whl:
            return [name for name in whl.namelist() if not name.endswith("/")]
    try:
        dist = importlib.metadata.distribution("nbrmm")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None and dist.files:
        located = pathlib.Path(dist.locate_file("nbrmm/__init__.py")).resolve()
        if located == pathlib.Path(nbrmm.__file__).resolve():
            # Less what installing added: bytecode, and scripts outside the package.
            return [
                str(f) for f in dist.files
                if not str(f).startswith("..") and "__pycache__" not in f.parts
            ]
    pytest.skip("nbrmm is not imported from an installed wheel (set NBRMM_WHEEL to check one)")


REQUIRED = [
    r"nbrmm/__init__\.py",
    r"nbrmm/__main__\.py",
    r"nbrmm/_nbrmm\.cpython-[\w-]+\.so",  # the extension
    r"nbrmm/_nbrmm\.pyi",  # its stub
    r"nbrmm/py\.typed",
    r"nbrmm/include/nbrmm/nbrmm\.hpp",  # the public C++ header
    r"nbrmm/include/nbrmm/nbrmm\.pxd",  # its Cython declarations
    r"nbrmm/include/nbrmm/librmm\.pxd",  # the librmm types they use
    r"nbrmm/mr/__init__\.py",
    r"nbrmm/mr/experimental\.py",
    r"nbrmm/statistics\.py",
    r"nbrmm/logger\.py",
    r"nbrmm/plot\.py",
    r"nbrmm/allocators/(__init__|cupy|torch|numba)\.py",
    r"nbrmm-[\w.]+\.dist-info/licenses/LICENSE",
    r"nbrmm-[\w.]+\.dist-info/METADATA",
    r"nbrmm-compat\.pth",  # NBRMM_COMPAT=1 maps rmm at startup (nbrmm.compat)
]


def test_wheel_has_the_package_extension_stubs_header_and_license():
    files = wheel_files()
    for pattern in REQUIRED:
        assert any(re.fullmatch(pattern, f) for f in files), f"the wheel lacks {pattern}"
    assert sum(bool(re.fullmatch(r"nbrmm/allocators/\w+\.py", f)) for f in files) == 4


def test_wheel_holds_only_the_package_and_its_metadata():
    for f in wheel_files():
        assert re.match(r"nbrmm/|nbrmm-[\w.]+\.dist-info/|nbrmm-compat\.pth$", f), (
            f"unexpected file {f}"
        )
        assert "__pycache__" not in f


def test_shipped_header_stub_and_license_are_the_sources():
    if not os.environ.get("NBRMM_WHEEL"):
        pytest.skip("compares a wheel file (NBRMM_WHEEL) with the source tree")
    with zipfile.ZipFile(os.environ["NBRMM_WHEEL"]) as whl:
        names = whl.namelist()
        for name in ("nbrmm.hpp", "nbrmm.pxd", "librmm.pxd"):
            assert whl.read(f"nbrmm/include/nbrmm/{name}") == (
                ROOT / "include/nbrmm" / name
            ).read_bytes()
        assert whl.read("nbrmm/_nbrmm.pyi") == (ROOT / "python/nbrmm/_nbrmm.pyi").read_bytes()
        assert whl.read("nbrmm-compat.pth") == (ROOT / "python/nbrmm-compat.pth").read_bytes()
        (license_name,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert whl.read(license_name) == (ROOT / "LICENSE").read_bytes()


def test_wheel_has_nothing_test_only():
    files = wheel_files()
    test_only = [f for f in files if re.search(r"(^|/)(_testing|tests?)/|cpp_ext|cython_", f)]
    assert test_only == []


def sdist_files(tmp_path_factory):
    if path := os.environ.get("NBRMM_SDIST"):
        tar = pathlib.Path(path)
    else:
        backend = pytest.importorskip(
            "scikit_build_core.build", reason="builds the sdist (or set NBRMM_SDIST)"
        )
        out = tmp_path_factory.mktemp("sdist")
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            tar = out / backend.build_sdist(str(out))
        finally:
            os.chdir(cwd)
    with tarfile.open(tar) as archive:
        names = archive.getnames()
    top = names[0].split("/")[0]
    return [n[len(top) + 1:] for n in names if n != top]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    return sdist_files(tmp_path_factory)


def test_sdist_has_what_a_build_needs(sdist):
    for required in ["pyproject.toml", "CMakeLists.txt", "README.md", "LICENSE",
                     "include/nbrmm/nbrmm.hpp", "include/nbrmm/nbrmm.pxd",
                     "include/nbrmm/librmm.pxd", "python/nbrmm/__init__.py",
                     "python/nbrmm/_nbrmm.pyi", "python/nbrmm-compat.pth", "src/module.cpp",
                     "PKG-INFO"]:
        assert required in sdist, f"the sdist lacks {required}"


def test_sdist_has_no_benchmark_results_or_build_output(sdist):
    for name in sdist:
        assert not re.match(r"benchmark-analysis/results/.*\.(png|csv)$", name), name
        assert not re.match(r"(build|dist|docs/_build|\.venv|\.mypy_cache)/", name), name
        assert not name.endswith((".so", ".pyc")), name
    assert "benchmark-analysis/results/report.md" in sdist  # the report's text stays
