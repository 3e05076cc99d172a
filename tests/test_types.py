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
