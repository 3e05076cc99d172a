"""Type checks (through scripts/check_types.py): ``mypy --strict`` over the
documentation's examples and over the package itself (its Python modules and the
extension's stub), and ``mypy.stubtest`` of the package against the runtime."""

import re
import subprocess
import sys

import pytest

from doc_examples import ROOT

SCRIPT = ROOT / "scripts" / "check_types.py"

# mypy comes with the test extra; machines that carry only the runtime packages skip.
pytest.importorskip("mypy", reason="the type checks need mypy (the test extra)")


def check_types(which):
    """Runs one check; returns (exit status, output). A run in which mypy itself did not
    get to check anything (mypy missing or broken) raises, with mypy's output."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), which], capture_output=True, text=True, timeout=600
    )
    text = out.stdout + out.stderr
    ran = re.search(r"^(Found \d+ errors? in|Success:|error: not checking stubs)", text, re.M)
    if which == "stubtest":
        ran = ran or re.search(r"^(Found \d+ errors? \(checked|Success: no issues)", text, re.M)
    if ran is None:
        raise RuntimeError(f"mypy did not run:\n{text}")
    return out.returncode, text


@pytest.mark.parametrize("which", ["examples", "package", "stubtest"])
def test_type_check_passes(which):
    """``examples``: mypy --strict over the docs' examples; ``package``: mypy --strict
    over nbrmm; ``stubtest``: mypy.stubtest."""
    rc, text = check_types(which)
    assert rc == 0, text


def test_examples_are_written_one_module_per_page(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import check_types as script
    finally:
        sys.path.remove(str(SCRIPT.parent))
    written = script.write_examples(tmp_path)
    names = {p.name for p in written}
    assert {"docs_getting_started.py", "readme.py", "docs_errors.py"} <= names
    text = (tmp_path / "docs_getting_started.py").read_text()
    assert "# docs/getting-started.md:" in text
    assert "host = nbrmm.mr.CallbackMemoryResource(allocate, deallocate)" in text
    compile(text, "docs_getting_started.py", "exec")  # every page's code is valid Python
    for path in written:
        compile(path.read_text(), path.name, "exec")



def run_mypy(path):
    """``mypy --strict`` over one file, with nbrmm's configuration; returns (exit status,
    output)."""
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--strict", str(path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    return out.returncode, out.stdout + out.stderr


#: Expressions, each with the class of the extension that mypy must name as its type.
REVEALED = [
    ("nbrmm.Buffer(1)", "Buffer"),
    ("nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource())", "PoolMemoryResource"),
    ("nbrmm.CudaUnavailableError()", "CudaUnavailableError"),
    ("nbrmm.mr.experimental.CudaAsyncManagedMemoryResource()",
     "CudaAsyncManagedMemoryResource"),
    ("nbrmm.DEFAULT_STREAM", "Stream"),
    ("nbrmm.mr.get_current_device_resource()", "DeviceMemoryResource"),
    ("nbrmm.to_device(b'x')", "DeviceBuffer"),
]


def test_type_checkers_name_the_public_modules(tmp_path):
    """mypy names each class of the extension after the module it is published under at
    runtime (``nbrmm.Buffer``, ``nbrmm.mr.PoolMemoryResource``), never ``nbrmm._nbrmm``:
    in revealed types and in what it says of a wrong call."""
    from nbrmm import _nbrmm

    classes = {name: obj for name, obj in vars(_nbrmm).items() if isinstance(obj, type)}
    public = {name: f"{cls.__module__}.{name}" for name, cls in classes.items()}
    lines = [f"import {module}" for module in sorted({c.__module__ for c in classes.values()})]
    expected = {}
    for expression, name in REVEALED:
        lines.append(f"reveal_type({expression})")
        expected[len(lines)] = public[name]
    # Every class, written with its public module in an annotation.
    lines.append(f"def every_class({', '.join(f'{n}: {p}' for n, p in public.items())}) -> None:")
    for name in classes:
        lines.append(f"    reveal_type({name})")
        expected[len(lines)] = public[name]
    lines += ["nbrmm.Buffer(1, nbites=3)", "nbrmm.Buffer(1, mr=nbrmm.Buffer(1))"]
    wrong = len(lines) - 1
    snippet = tmp_path / "public_names.py"
    snippet.write_text("\n".join(lines) + "\n")

    rc, text = run_mypy(snippet)
    note = r'public_names\.py:(?P<line>\d+): note: Revealed type is "(?P<type>.*)"'
    revealed = {int(m["line"]): m["type"] for m in re.finditer(note, text)}
    assert revealed == expected, text
    assert public["Buffer"] == "nbrmm.Buffer"
    assert public["PoolMemoryResource"] == "nbrmm.mr.PoolMemoryResource"
    assert public["CudaUnavailableError"] == "nbrmm.CudaUnavailableError"
    assert public["CudaAsyncManagedMemoryResource"] == (
        "nbrmm.mr.experimental.CudaAsyncManagedMemoryResource")
    # The wrong calls are refused, and what mypy says of them names the public module.
    assert rc == 1, text
    where = f"public_names.py:{wrong}"
    assert f'{where}: error: Unexpected keyword argument "nbites" for "Buffer"' in text
    assert f'{where}: note: "Buffer" defined in "nbrmm"' in text
    assert f'public_names.py:{wrong + 1}: error: Argument "mr" to "Buffer"' in text
    assert "Found 2 errors in 1 file" in text
    assert "_nbrmm" not in text
