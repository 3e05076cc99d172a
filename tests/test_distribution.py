"""What the wheel and the sdist contain, and the metadata they publish.

The wheel is read from ``$NBRMM_WHEEL`` when set (.ci/run sets it to the wheel that
scripts/build-wheels built), otherwise from the record of the installed distribution when
``nbrmm`` is imported from it. The sdist is read from ``$NBRMM_SDIST`` when set, otherwise
built here with scikit-build-core's sdist hook where scikit-build-core is installed.
"""

import email.parser
import importlib.metadata
import os
import pathlib
import re
import tarfile
import tomllib
import zipfile

import pytest

import nbrmm
from doc_examples import ROOT

PACKAGE = pathlib.Path(nbrmm.__file__).parent


def installed_distribution():
    """The installed distribution that ``nbrmm`` is imported from, or None."""
    try:
        dist = importlib.metadata.distribution("nbrmm")
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.files:
        located = pathlib.Path(dist.locate_file("nbrmm/__init__.py")).resolve()
        if located == pathlib.Path(nbrmm.__file__).resolve():
            return dist
    return None


NO_WHEEL = "nbrmm is not imported from an installed wheel (set NBRMM_WHEEL to check one)"


def wheel_files():
    """The paths inside the wheel (``nbrmm/...`` and ``nbrmm-<version>.dist-info/...``)."""
    if path := os.environ.get("NBRMM_WHEEL"):
        with zipfile.ZipFile(path) as whl:
            return [name for name in whl.namelist() if not name.endswith("/")]
    if dist := installed_distribution():
        # Less what installing added: bytecode, and scripts outside the package.
        return [
            str(f) for f in dist.files
            if not str(f).startswith("..") and "__pycache__" not in f.parts
        ]
    pytest.skip(NO_WHEEL)


def wheel_dist_info(name):
    """The text of ``nbrmm-<version>.dist-info/<name>`` (METADATA, WHEEL) of the wheel."""
    if path := os.environ.get("NBRMM_WHEEL"):
        with zipfile.ZipFile(path) as whl:
            (member,) = [
                n for n in whl.namelist() if re.fullmatch(rf"nbrmm-[^/]+\.dist-info/{name}", n)
            ]
            return whl.read(member).decode()
    if (dist := installed_distribution()) and (text := dist.read_text(name)) is not None:
        return text
    pytest.skip(NO_WHEEL)


def parse_headers(text):
    return email.parser.Parser().parsestr(text)


@pytest.fixture(scope="module")
def metadata():
    return parse_headers(wheel_dist_info("METADATA"))


@pytest.fixture(scope="module")
def pyproject():
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


REQUIRED = [
    r"nbrmm/__init__\.py",
    r"nbrmm/__main__\.py",
    r"nbrmm/_nbrmm\.(cpython-[\w-]+|abi3)\.so",  # the extension
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
        stubs = sorted((ROOT / "python").glob("nbrmm/**/*.pyi"))
        assert ROOT / "python/nbrmm/_nbrmm.pyi" in stubs
        for stub in stubs:
            name = stub.relative_to(ROOT / "python").as_posix()
            assert whl.read(name) == stub.read_bytes(), name
        assert whl.read("nbrmm-compat.pth") == (ROOT / "python/nbrmm-compat.pth").read_bytes()
        (license_name,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert whl.read(license_name) == (ROOT / "LICENSE").read_bytes()


def test_wheel_has_nothing_test_only():
    files = wheel_files()
    test_only = [f for f in files if re.search(r"(^|/)(_testing|tests?)/|cpp_ext|cython_", f)]
    assert test_only == []


# --- the wheel's tags ---------------------------------------------------------------------

WHEEL_NAME = re.compile(
    r"nbrmm-(?P<version>[^-]+)-(?P<python>cp3\d+)-(?P<abi>cp3\d+t?|abi3)-(?P<platform>[\w.]+)\.whl"
)


def test_wheel_tags_are_manylinux_and_match_the_extension():
    """cp311-cp311 with a CPython-specific extension, or cp312-abi3 with a stable-ABI one;
    manylinux platform tags (auditwheel repair), the same in the name and in WHEEL."""
    path = os.environ.get("NBRMM_WHEEL")
    if not path:
        pytest.skip("checks the file name of a built wheel (NBRMM_WHEEL)")
    name = WHEEL_NAME.fullmatch(pathlib.Path(path).name)
    assert name, f"not a CPython wheel name: {pathlib.Path(path).name}"
    platforms = name["platform"].split(".")
    assert all(re.fullmatch(r"manylinux_2_\d+_x86_64", p) for p in platforms), platforms
    (extension,) = [f for f in wheel_files() if re.fullmatch(r"nbrmm/_nbrmm\.[\w-]+\.so", f)]
    if name["abi"] == "abi3":
        assert name["python"] == "cp312", "the stable-ABI wheel starts at Python 3.12"
        assert extension == "nbrmm/_nbrmm.abi3.so"
    else:
        assert name["abi"] == name["python"]
        assert extension.startswith(f"nbrmm/_nbrmm.cpython-{name['python'][2:]}-")
    wheel = parse_headers(wheel_dist_info("WHEEL"))
    assert wheel["Root-Is-Purelib"] == "false"
    tags = {f"{name['python']}-{name['abi']}-{p}" for p in platforms}
    assert set(wheel.get_all("Tag")) == tags
    assert name["version"] == nbrmm.__version__


# --- the metadata ----------------------------------------------------------------------------


def test_version_is_written_once(pyproject):
    """pyproject.toml has no version of its own: the metadata reads _version.py's."""
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    source = pyproject["tool"]["scikit-build"]["metadata"]["version"]["input"]
    assert (ROOT / source).resolve() == ROOT / "python/nbrmm/_version.py"
    written = re.findall(r"^__version__ = \"([^\"]+)\"$",
                         (ROOT / source).read_text(), re.MULTILINE)
    assert written == [nbrmm.__version__]


def test_metadata_version_is_the_package_version(metadata):
    assert metadata["Version"] == nbrmm.__version__
    assert metadata["Name"] == "nbrmm"
    assert metadata["Requires-Python"] == ">=3.11"


def test_metadata_has_project_urls(metadata):
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls)
    for label, url in urls.items():
        assert re.fullmatch(r"https://[\w.-]+/\S+", url), f"{label}: {url}"
    assert urls["Changelog"].endswith("/CHANGELOG.md")


def test_metadata_classifiers(metadata, pyproject):
    classifiers = metadata.get_all("Classifier") or []
    for required in [
        "Operating System :: POSIX :: Linux",
        "Typing :: Typed",
        "Environment :: GPU :: NVIDIA CUDA :: 13",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
    ]:
        assert required in classifiers, required
    # Every Python version named is one requires-python allows.
    for c in classifiers:
        if m := re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c):
            assert int(m[1]) >= 11, c
    # No license classifier beside the SPDX expression (PEP 639 forbids both).
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert metadata["License-Expression"] == pyproject["project"]["license"]
    # PyPI refuses an upload with a classifier it does not know.
    trove = pytest.importorskip("trove_classifiers")
    unknown = [c for c in classifiers if c not in trove.classifiers]
    assert unknown == []


def test_published_extras_are_for_users(metadata, pyproject):
    """Development tools are dependency groups, not extras: the real rmm (which makes
    nbrmm.compat refuse) is never an extra of nbrmm."""
    extras = set(metadata.get_all("Provides-Extra") or [])
    assert extras == set(pyproject["project"]["optional-dependencies"])
    assert extras.isdisjoint(pyproject["dependency-groups"])
    assert "rmm-reference" in pyproject["dependency-groups"]
    requires = metadata.get_all("Requires-Dist") or []
    assert not [r for r in requires if re.match(r"rmm(-cu\d+)?\b", r)], requires


def test_typed_package_ships_its_marker():
    assert "nbrmm/py.typed" in wheel_files()


# --- the sdist -------------------------------------------------------------------------------


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
        pkg_info = archive.extractfile(f"{top}/PKG-INFO").read().decode()
    return [n[len(top) + 1:] for n in names if n != top], pkg_info


@pytest.fixture(scope="module")
def sdist_and_metadata(tmp_path_factory):
    return sdist_files(tmp_path_factory)


@pytest.fixture(scope="module")
def sdist(sdist_and_metadata):
    return sdist_and_metadata[0]


def test_sdist_metadata_has_the_version_and_the_urls(sdist_and_metadata):
    pkg_info = parse_headers(sdist_and_metadata[1])
    assert pkg_info["Version"] == nbrmm.__version__
    assert "Version" not in (pkg_info.get_all("Dynamic") or [])
    assert any(u.startswith("Source, https://") for u in pkg_info.get_all("Project-URL") or [])


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
