"""Type checks of nbrmm's public API, with mypy (configuration: ``[tool.mypy]`` in
pyproject.toml).

    python scripts/check_types.py examples   # mypy --strict over the docs' examples
    python scripts/check_types.py package    # mypy --strict over nbrmm itself
    python scripts/check_types.py stubtest   # mypy.stubtest: stubs against the runtime
    python scripts/check_types.py            # all three

``examples`` writes the Python code of each documentation page (``docs/**/*.md`` and
README.md: ``pycon`` statements and ``python`` blocks, in order) to a module of its own
and runs ``mypy --strict`` over them, so that a user's code written like the examples
type-checks against nbrmm's stubs. A ``pycon`` statement whose expected output is a
``TypeError`` shows an argument that nbrmm refuses by its type: it is written with
``# type: ignore``, and as ``--strict`` reports an unused ignore, mypy must refuse it too.
``package`` runs ``mypy --strict -p nbrmm`` over nbrmm's Python modules and its stubs.
A module with a stub of its own (``nbrmm``, ``nbrmm.mr``: those that publish the
extension's classes, scripts/stubgen.py) is read from the stub there, so its source is
checked too, from a copy under a module name of its own
(``build/shadowed-sources/source_of_nbrmm_mr.py`` for ``python/nbrmm/mr/__init__.py``):
the copy's line numbers are the source's. ``stubtest`` runs ``python -m mypy.stubtest nbrmm`` with
``scripts/stubtest-allowlist.txt``; each entry there says why it is allowed. Run it where
nbrmm imports (installed, or ``PYTHONPATH=python``). The exit status is mypy's.
"""

from __future__ import annotations

import argparse
import doctest
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "scripts" / "stubtest-allowlist.txt"
sys.path.insert(0, str(ROOT / "tests"))

from doc_examples import Block, blocks, pages  # noqa: E402

# A doctest's expected exception: "TypeError: ..." (doctest keeps the line after the traceback).
_TYPE_ERROR = re.compile(r"TypeError\b")


def module_name(page: pathlib.Path) -> str:
    """A module name for a page: ``docs/getting-started.md`` -> ``docs_getting_started``."""
    relative = page.relative_to(ROOT).with_suffix("")
    return re.sub(r"\W", "_", "_".join(relative.parts)).lower()


def typed_source(block: Block) -> str:
    """The code of a block, with ``# type: ignore`` on the first line of each ``pycon``
    statement that is expected to raise ``TypeError``."""
    if block.language != "pycon":
        return block.source
    parts = []
    for example in doctest.DocTestParser().get_examples(block.text):
        source = example.source
        if example.exc_msg is not None and _TYPE_ERROR.match(example.exc_msg):
            first, newline, rest = source.partition("\n")
            source = f"{first}  # type: ignore{newline}{rest}"
        parts.append(source)
    return "".join(parts)


def write_examples(folder: pathlib.Path) -> list[pathlib.Path]:
    """One module per page that has Python examples, in ``folder``; returns their paths."""
    written = []
    for page in pages():
        code = [
            f"# {block.where()}\n{typed_source(block)}"
            for block in blocks(page)
            if block.source.strip()
        ]
        if code:
            path = folder / f"{module_name(page)}.py"
            path.write_text("\n".join(code))
            written.append(path)
    return written


def mypy(*args: str) -> int:
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args]
    return subprocess.run(command, cwd=ROOT).returncode


def check_examples() -> int:
    # A fixed folder, so that mypy's cache serves the next run.
    folder = ROOT / "build" / "doc-examples"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    files = write_examples(folder)
    print(f"mypy --strict over the examples of {len(files)} pages", flush=True)
    return mypy("--strict", *map(str, files))


def shadowed_sources() -> list[pathlib.Path]:
    """The sources of nbrmm's modules that have a stub of their own (which hides them from
    type checkers)."""
    package = ROOT / "python" / "nbrmm"
    return sorted(
        source
        for stub in package.rglob("*.pyi")
        if (source := stub.with_suffix(".py")).is_file()
    )


def write_shadowed_sources(folder: pathlib.Path) -> list[tuple[pathlib.Path, pathlib.Path]]:
    """A copy of each of :func:`shadowed_sources` in ``folder``, named after its module
    (``source_of_nbrmm_mr.py``), so that mypy checks it as a module of its own; returns
    (copy, source) for each."""
    written = []
    for source in shadowed_sources():
        parts = source.relative_to(ROOT / "python").with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        path = folder / f"source_of_{'_'.join(parts)}.py"
        shutil.copyfile(source, path)
        written.append((path, source))
    return written


def check_package() -> int:
    folder = ROOT / "build" / "shadowed-sources"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    copies = write_shadowed_sources(folder)
    print("mypy --strict python/nbrmm, and the sources its stubs hide:", flush=True)
    for copy, source in copies:
        print(f"  {copy.relative_to(ROOT)} is {source.relative_to(ROOT)}", flush=True)
    # The package as a folder (mypy takes no -p beside files); it reads the stubs there.
    return mypy("--strict", str(ROOT / "python" / "nbrmm"), *(str(c) for c, _ in copies))


def check_stubs() -> int:
    print("python -m mypy.stubtest nbrmm", flush=True)
    command = [
        sys.executable, "-m", "mypy.stubtest", "nbrmm",
        "--mypy-config-file", str(ROOT / "pyproject.toml"),
        "--allowlist", str(ALLOWLIST),
        # Entries for the modules that import optional packages (the allocator hooks,
        # nbrmm.interop) are unused where those packages are installed.
        "--ignore-unused-allowlist",
    ]
    return subprocess.run(command, cwd=ROOT).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "check", nargs="?", choices=["examples", "package", "stubtest", "all"], default="all"
    )
    args = parser.parse_args(argv)
    rc = 0
    if args.check in ("examples", "all"):
        rc |= check_examples()
    if args.check in ("package", "all"):
        rc |= check_package()
    if args.check in ("stubtest", "all"):
        rc |= check_stubs()
    return rc


if __name__ == "__main__":
    sys.exit(main())
