"""The extensions of the test suite, built on first use and never installed.

``cpp_ext`` and ``nbrmm_testing`` (C++) and ``cython_ext`` (Cython; sources in
``tests/ext``) are what a third-party extension is: they use librmm directly and reach
nbrmm only through its public header and Cython declarations (``nbrmm.get_include()``).
They are built with CMake against the installed nbrmm, once per
source version, Python and nbrmm build, into ``build/test-extensions/<key>`` beside the
sources (or ``$NBRMM_TEST_EXT_DIR``); concurrent test processes (pytest-xdist) share one
build. Building needs the packages of the ``test`` extra (CMake, Ninja, nanobind, Cython,
the CUDA runtime headers) and a C++20 compiler; without Cython, ``cython_ext`` is not built.
"""

import fcntl
import hashlib
import importlib.util
import os
import pathlib
import subprocess
import sys
import sysconfig

import nbrmm

SOURCE = pathlib.Path(__file__).resolve().parent / "ext"
NAMES = ("cpp_ext", "nbrmm_testing", "cython_ext")


def _have_cython():
    return importlib.util.find_spec("Cython") is not None


def _key():
    digest = hashlib.sha256()
    for path in sorted(SOURCE.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    for name in ("nbrmm.hpp", "nbrmm.pxd", "librmm.pxd"):
        path = pathlib.Path(nbrmm.get_include(), "nbrmm", name)
        digest.update(name.encode() + (path.read_bytes() if path.exists() else b""))
    digest.update(b"cython" if _have_cython() else b"")
    digest.update(sys.executable.encode() + sys.version.encode())
    digest.update(os.path.realpath(nbrmm._nbrmm.__file__).encode())
    return digest.hexdigest()[:16]


def _root():
    if env := os.environ.get("NBRMM_TEST_EXT_DIR"):
        return pathlib.Path(env)
    return SOURCE.parent.parent / "build" / "test-extensions"


def _prefix_path():
    """Where CMake finds librmm, rapids_logger and nanobind (their wheels' folders)."""
    import librmm
    import nanobind
    import rapids_logger

    return ";".join([os.path.dirname(librmm.__file__), os.path.dirname(rapids_logger.__file__),
                     nanobind.cmake_dir()])


def _tool(name):
    """CMake or Ninja: from their wheels when installed (as the build requirements are),
    else the one on PATH."""
    try:
        if name == "cmake":
            import cmake

            return os.path.join(cmake.CMAKE_BIN_DIR, "cmake")
        import ninja

        return os.path.join(ninja.BIN_DIR, "ninja")
    except (ImportError, AttributeError):
        exe = pathlib.Path(sysconfig.get_path("scripts")) / name
        return str(exe) if exe.exists() else name


def _build(out):
    build = out / "cmake"
    run = dict(check=True, capture_output=True, text=True)
    try:
        subprocess.run([_tool("cmake"), "-S", str(SOURCE), "-B", str(build), "-G", "Ninja",
                        f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}",
                        "-DCMAKE_BUILD_TYPE=Release",
                        f"-DPython_EXECUTABLE={sys.executable}",
                        f"-DCMAKE_PREFIX_PATH={_prefix_path()}",
                        f"-DNBRMM_INCLUDE_DIR={nbrmm.get_include()}",
                        f"-DNBRMM_CYTHON={'ON' if _have_cython() else 'OFF'}",
                        f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out}"], **run)
        subprocess.run([_tool("cmake"), "--build", str(build)], **run)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"building the test extensions failed:\n{e.stdout}\n{e.stderr}") from None
    (out / "complete").write_text("")


def _built():
    out = _root() / _key()
    if not (out / "complete").exists():
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process builds; the others wait for it
            if not (out / "complete").exists():
                _build(out)
    return out


def load(name):
    """Import the test extension ``name`` (building the extensions first if needed)."""
    if name not in NAMES:
        raise ValueError(f"name: one of {NAMES}")
    if name in sys.modules:
        return sys.modules[name]
    if name == "cython_ext" and not _have_cython():
        raise ModuleNotFoundError("cython_ext needs Cython (the test extra)", name="Cython")
    out = _built()
    (path,) = out.glob(f"{name}.*so")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def __getattr__(name):
    """``extensions.testing``, ``extensions.cpp_ext`` and ``extensions.cython_ext``: the
    loaded extensions."""
    if name == "testing":
        return load("nbrmm_testing")
    if name in ("cpp_ext", "cython_ext"):
        return load(name)
    raise AttributeError(name)
