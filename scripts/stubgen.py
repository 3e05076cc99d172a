"""Generates python/nbrmm/_nbrmm.pyi with nanobind's stubgen.

The stub declares the private functions too (nbrmm's Python modules call them, and mypy
checks those calls). It must not depend on the Python version that generates it: slots
that only some versions expose as methods (``__buffer__``/``__release_buffer__``, Python
>= 3.12) are left out, and so is ``__del__``, the wrapper CPython shows for a type's
garbage-collector finalizer (not a method to call).

Each public function and method of the extension has a second overload, a catch-all that
reports calls the first one refuses (``src/core/call_errors.cpp``); it is no part of the
interface, and the stub declares only the first.

Two imports that stubgen derives from the runtime module are dropped: the test-only
submodule ``_testing`` (no stub), and ``nbrmm._pickle``'s reduce functions, which
``nbrmm._pickle`` installs on ``Buffer`` at import (stubgen would declare them as
module-level names; ``object`` already declares both methods).
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

LEFT_OUT = ("__buffer__", "__release_buffer__", "__del__")


# Imports of the generated stub that are dropped (whole statements, as stubgen writes them).
LEFT_OUT_IMPORTS = (
    re.compile(r"^from nbrmm\._nbrmm import _testing as _testing\n", re.M),
    re.compile(r"^from nbrmm\._pickle import \([^)]*\)\n", re.M),
    re.compile(r"^from nbrmm\._pickle import [^(\n]*\n", re.M),
)


def normalize(text: str) -> str:
    """Drop the left-out methods (with their docstrings) and imports from a stub."""
    for pattern in LEFT_OUT_IMPORTS:
        text = pattern.sub("", text)
    # Module attributes that are capsules: stubgen names their runtime type.
    text = text.replace(": PyCapsule = ...", ": CapsuleType = ...")
    lines = text.splitlines(keepends=True)
    out, skip_indent = [], None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if line.strip() and indent <= skip_indent:
                skip_indent = None
            else:
                continue
        m = re.match(r"\s*def (\w+)\(", line)
        if m and m.group(1) in LEFT_OUT:
            skip_indent = indent
            while out and out[-1].strip() == "":
                out.pop()
            out.append("\n")
            continue
        out.append(line)
    return "".join(out)


# Runs nanobind's stubgen with the catch-all overloads left out (see above).
STUBGEN = """
import sys
import nanobind.stubgen as stubgen
from nbrmm._call_errors import is_catch_all

put_nb_func = stubgen.StubGen.put_nb_func


def put_without_catch_all(self, fn, name=None, is_classmethod=False):
    real = [s for s in fn.__nb_signature__ if not is_catch_all(s[0])]
    if len(real) == 1 and len(fn.__nb_signature__) == 2:
        self.put_nb_overload(fn, real[0], name, is_classmethod=is_classmethod)
    else:
        put_nb_func(self, fn, name, is_classmethod)


stubgen.StubGen.put_nb_func = put_without_catch_all
stubgen.main(sys.argv[1:])
"""


def generate(output: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = pathlib.Path(tmp) / "_nbrmm.pyi"
        # NBRMM_STUBGEN: the package leaves the classes' module names as the extension's
        # (nbrmm._public), which is where the stub declares them.
        subprocess.run(
            [sys.executable, "-c", STUBGEN, "-q", "--include-private",
             "-m", "nbrmm._nbrmm", "-o", str(raw)],
            check=True,
            env={**os.environ, "NBRMM_STUBGEN": "1"},
        )
        output.write_text(normalize(raw.read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "-o", "--output", type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parent.parent / "python/nbrmm/_nbrmm.pyi",
    )
    args = parser.parse_args()
    generate(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
