"""The checked-in stub matches what nanobind's stubgen makes of the built extension."""

import pathlib
import subprocess
import sys

import nbrmm

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUB = pathlib.Path(nbrmm.__file__).with_name("_nbrmm.pyi")


def test_stub_is_up_to_date(tmp_path):
    out = tmp_path / "_nbrmm.pyi"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "stubgen.py"), "-o", str(out)], check=True
    )
    assert STUB.exists(), "python/nbrmm/_nbrmm.pyi is missing: run scripts/gen-stubs"
    assert out.read_text() == STUB.read_text(), "stale stub: run scripts/gen-stubs"


def test_py_typed_marker_is_shipped():
    assert STUB.with_name("py.typed").exists()
