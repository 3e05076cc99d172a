"""Generates the type stubs of nbrmm's extension with nanobind's stubgen.

A type checker names a class after the module whose stub declares it (mypy ignores a
``__module__`` that the stub assigns). The extension's classes are published under public
modules at runtime (``nbrmm.Buffer``, ``nbrmm.mr.PoolMemoryResource``: see
``nbrmm._public``), so each one is declared in the stub of the module it is published
under, and the extension's stub re-exports it from there:

``nbrmm/_nbrmm.pyi``
    The extension's functions and attributes, private ones included (nbrmm's Python
    modules call them, and mypy checks those calls), and the classes that no public module
    publishes; the others are imported from their public modules.
``<public module>.pyi`` (``nbrmm/__init__.pyi``, ``nbrmm/mr/__init__.pyi``, ...)
    For each module that publishes classes of the extension: those classes, and the rest
    of the module as its source defines it. A stub hides its module's ``.py`` from type
    checkers, so this one declares everything the ``.py`` exports: the imports of the names
    in ``__all__`` (re-exported), the imports of submodules, the signatures and docstrings
    of its functions, the assignments those signatures use, and ``__all__`` itself.
    ``scripts/check_types.py package`` type-checks the ``.py``.

The stubs must not depend on the Python version that generates them: slots that only some
versions expose as methods (``__buffer__``/``__release_buffer__``, Python >= 3.12) are left
out, and so is ``__del__``, the wrapper CPython shows for a type's garbage-collector
finalizer (not a method to call). What comes from the Python sources is copied as it is
written there.

Each public function and method of the extension has a second overload, a catch-all that
reports calls the first one refuses (``src/core/call_errors.cpp``); it is no part of the
interface, and the stubs declare only the first.

Two imports that stubgen derives from the runtime module are dropped: the test-only
submodule ``_testing`` (no stub), and ``nbrmm._pickle``'s reduce functions, which
``nbrmm._pickle`` installs on ``Buffer`` at import (stubgen would declare them as
module-level names; ``object`` already declares both methods).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The folder that holds the package ``nbrmm`` (the default output folder).
PYTHON = ROOT / "python"
EXTENSION = "nbrmm._nbrmm"

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
    out: list[str] = []
    skip_indent: int | None = None
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

# The public module of each class of the extension, as `import nbrmm` leaves it.
PLACES = """
import json
import nbrmm
from nbrmm import _nbrmm

print(json.dumps({name: obj.__module__ for name, obj in vars(_nbrmm).items()
                  if isinstance(obj, type) and obj.__module__ != "nbrmm._nbrmm"}))
"""


def extension_stub() -> str:
    """nanobind's stub of the extension, normalized (every class declared in it)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = pathlib.Path(tmp) / "_nbrmm.pyi"
        # NBRMM_STUBGEN: the package leaves the classes' module names as the extension's
        # (nbrmm._public), so that stubgen declares them all in this one stub.
        subprocess.run(
            [sys.executable, "-c", STUBGEN, "-q", "--include-private",
             "-m", EXTENSION, "-o", str(raw)],
            check=True,
            env={**os.environ, "NBRMM_STUBGEN": "1"},
        )
        return normalize(raw.read_text())


def published_modules() -> dict[str, str]:
    """``{class name: public module}`` for the classes of the extension, read at runtime."""
    env = {k: v for k, v in os.environ.items() if k != "NBRMM_STUBGEN"}
    out = subprocess.run(
        [sys.executable, "-c", PLACES], check=True, capture_output=True, text=True, env=env
    )
    places: dict[str, str] = json.loads(out.stdout)
    return places


def module_source(module: str) -> pathlib.Path:
    """The source file of a module of the package: ``nbrmm.mr`` ->
    ``python/nbrmm/mr/__init__.py``, ``nbrmm.logger`` -> ``python/nbrmm/logger.py``."""
    base = PYTHON.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def stub_file(module: str) -> pathlib.Path:
    """Where the stub of a module goes, relative to the folder of the package."""
    return module_source(module).relative_to(PYTHON).with_suffix(".pyi")


# -- Reading statements ------------------------------------------------------------------


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def references(nodes: Iterable[ast.AST]) -> set[str]:
    """The names and dotted names (with every prefix: ``nbrmm``, ``nbrmm._typing``, ...)
    that ``nodes`` use."""
    found: set[str] = set()
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, (ast.Name, ast.Attribute)):
                name = dotted(node)
                if name is not None:
                    parts = name.split(".")
                    found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return found


def annotation_nodes(annotation: ast.expr) -> list[ast.AST]:
    """An annotation, and the expressions written as strings inside it (``"Buffer"``)."""
    nodes: list[ast.AST] = [annotation]
    for node in ast.walk(annotation):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                nodes.append(ast.parse(node.value, mode="eval"))
            except SyntaxError:
                pass
    return nodes


def signature_nodes(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """What a function's stub uses: its decorators, annotations and defaults."""
    args = node.args
    nodes: list[ast.AST] = [*node.decorator_list, *args.defaults]
    nodes += [d for d in args.kw_defaults if d is not None]
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None and arg.annotation is not None:
            nodes += annotation_nodes(arg.annotation)
    if node.returns is not None:
        nodes += annotation_nodes(node.returns)
    return nodes


def bound_names(node: ast.stmt) -> list[str]:
    """The names a statement binds in its module (in the blocks of an ``if`` or ``try``
    too, not in a function's or a class's body)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [Alias.of(a, node).bound for a in node.names]
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    names = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            names += bound_names(child)
        elif isinstance(child, ast.ExceptHandler):
            names += [child.name] if child.name else []
            for stmt in child.body:
                names += bound_names(stmt)
    return names


@dataclass(frozen=True)
class Alias:
    """One name of an import statement."""

    module: str | None  # ``from module import name``; None for ``import name``
    name: str
    asname: str | None

    @classmethod
    def of(cls, alias: ast.alias, statement: ast.Import | ast.ImportFrom) -> Alias:
        module = statement.module if isinstance(statement, ast.ImportFrom) else None
        if isinstance(statement, ast.ImportFrom) and statement.level:
            raise ValueError(f"relative import of {module!r}: write it absolute")
        return cls(module, alias.name, alias.asname)

    @property
    def bound(self) -> str:
        """The name bound in the importing module."""
        if self.asname:
            return self.asname
        return self.name if self.module is not None else self.name.split(".")[0]

    def needed_by(self, used: set[str]) -> bool:
        if self.module is None and not self.asname:
            return self.name in used  # ``import a.b``: used as ``a.b.<something>``
        return self.bound in used

    def text(self) -> str:
        return f"{self.name} as {self.asname}" if self.asname else self.name


def render_imports(aliases: list[Alias]) -> list[str]:
    """Import statements for ``aliases``, one ``from`` statement per module (in order)."""
    lines, modules = [], {}
    for alias in aliases:
        if alias.module is None:
            lines.append(f"import {alias.text()}")
        elif alias.module not in modules:
            modules[alias.module] = len(lines)
            lines.append(alias.module)
    for module, index in modules.items():
        names = [a.text() for a in aliases if a.module == module]
        line = f"from {module} import {', '.join(names)}"
        if len(line) > 92:
            line = f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")"
        lines[index] = line
    return lines


# -- The extension's stub ---------------------------------------------------------------


@dataclass
class ExtensionStub:
    """nanobind's stub of the extension, statement by statement."""

    docstring: str
    imports: list[list[Alias]]  # the import block, in groups (blank lines between them)
    statements: list[tuple[ast.stmt, str]]  # everything else, with its text

    @classmethod
    def parse(cls, text: str) -> ExtensionStub:
        tree = ast.parse(text)
        lines = text.splitlines()
        body = list(tree.body)
        docstring = ""
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            docstring = "\n".join(lines[body[0].lineno - 1:body[0].end_lineno])
            body = body[1:]
        imports: list[list[Alias]] = []
        statements = []
        last_import_line = None
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if last_import_line is None or node.lineno > last_import_line + 1:
                    imports.append([])
                imports[-1] += [Alias.of(a, node) for a in node.names]
                last_import_line = node.end_lineno
                continue
            start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
            statements.append((node, "\n".join(lines[start - 1:node.end_lineno])))
        return cls(docstring, imports, statements)

    def classes(self) -> dict[str, tuple[ast.ClassDef, str]]:
        return {node.name: (node, text) for node, text in self.statements
                if isinstance(node, ast.ClassDef)}

    def needed_imports(self, used: set[str]) -> list[list[Alias]]:
        """The groups of the import block, less the names that ``used`` does not use."""
        groups = [[a for a in group if a.needed_by(used)] for group in self.imports]
        return [group for group in groups if group]


# -- A public module's stub -------------------------------------------------------------


@dataclass
class SourceModule:
    """What a public module's stub takes from the module's source."""

    module: str
    docstring: str = ""
    imports: list[Alias] = field(default_factory=list)
    exported: list[str] = field(default_factory=list)  # its __all__
    # (names bound, text, what the text uses), in the order of the source
    statements: list[tuple[list[str], str, set[str]]] = field(default_factory=list)
    # Private assignments, kept when a kept statement uses them.
    private: dict[str, tuple[str, set[str]]] = field(default_factory=dict)

    @classmethod
    def read(cls, module: str) -> SourceModule:
        path = module_source(module)
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        self = cls(module)

        def where(node: ast.AST) -> str:
            return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"

        for index, node in enumerate(tree.body):
            if (index == 0 and isinstance(node, ast.Expr)
                    and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)):
                self.docstring = "\n".join(lines[node.lineno - 1:node.end_lineno])
            elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imports += [Alias.of(a, node) for a in node.names]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.statements.append(
                    ([node.name], function_stub(lines, node), references(signature_nodes(node)))
                )
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                names = bound_names(node)
                if names == ["__all__"]:
                    assert isinstance(node, ast.Assign)
                    self.exported = list(ast.literal_eval(node.value))
                    text = "\n".join(lines[node.lineno - 1:node.end_lineno])
                    self.statements.append((names, text, set()))
                    continue
                if isinstance(node, ast.AnnAssign):
                    text = f"{ast.get_source_segment(source, node.target)}: " + str(
                        ast.get_source_segment(source, node.annotation))
                    used = references([node.annotation])
                else:
                    text = "\n".join(lines[node.lineno - 1:node.end_lineno])
                    used = references([node.value])
                if all(n.startswith("_") for n in names):
                    for name in names:
                        self.private[name] = (text, used)
                else:
                    self.statements.append((names, text, used))
            elif isinstance(node, ast.ClassDef):
                raise ValueError(
                    f"{where(node)}: class {node.name} is defined in a module whose stub is "
                    "generated; define it in a private module and import it"
                )
            elif public := [n for n in bound_names(node) if not n.startswith("_")]:
                raise ValueError(f"{where(node)}: {', '.join(public)} bound where the stub "
                                 "cannot see it; bind it at the top level of the module")
            # Anything else (calls, ``if`` blocks that bind private names) is no part of
            # the module's interface.
        return self

    def is_submodule(self, alias: Alias) -> bool:
        """Whether an import binds a submodule of the package (``from nbrmm import mr``)."""
        if alias.module is None or alias.module.split(".")[0] != "nbrmm":
            return False
        base = PYTHON.joinpath(*alias.module.split("."), alias.name)
        return base.is_dir() or base.with_suffix(".py").is_file()


def function_stub(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """A function's decorators, signature and docstring, as its source writes them."""
    start = min([d.lineno for d in node.decorator_list] + [node.lineno])
    # The colon that ends the signature: the first one outside brackets.
    tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines[node.lineno - 1:])).readline)
    depth = 0
    for token in tokens:
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        elif token.type == tokenize.OP and token.string == ":" and depth == 0:
            end_row, end_col = token.end
            break
    else:
        raise ValueError(f"no end of the signature of {node.name}")
    last = node.lineno - 1 + end_row - 1
    text = "\n".join([*lines[start - 1:last], lines[last][:end_col]])
    first = node.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str) and first.lineno > last + 1):
        docstring = "\n".join(lines[first.lineno - 1:first.end_lineno])
        return f"{text}\n{docstring}"
    return f"{text} ..."


def public_stub(module: str, source: SourceModule, classes: list[tuple[ast.ClassDef, str]],
                extension: ExtensionStub, places: dict[str, str]) -> str:
    """The stub of a public module: the classes of the extension it publishes, and what
    its source defines and exports."""
    declared = {node.name for node, _ in classes}
    top_level = {name for node, _ in extension.statements for name in bound_names(node)}

    # What the classes' declarations use: names the extension's stub imports, and its
    # other names, each from the stub that declares it.
    class_uses = references(node for node, _ in classes)
    header = extension.needed_imports(class_uses)
    from_stubs = sorted(
        (Alias(places.get(name, EXTENSION), name, None)
         for name in class_uses & top_level - declared),
        key=lambda a: (a.module or "", a.name),
    )

    # The module's own statements, and the private assignments they use.
    kept = list(source.statements)
    used: set[str] = set().union(*(uses for _, _, uses in kept))
    private: list[tuple[list[str], str, set[str]]] = []
    pending = sorted(n for n in source.private if n in used)
    while pending:
        name = pending.pop(0)
        text, uses = source.private[name]
        if any(text == other for _, other, _ in private):
            continue
        private.append(([name], text, uses))
        used |= uses
        pending += sorted(n for n in source.private if n in uses)
    exported = set(source.exported)
    imports = []
    for alias in source.imports:
        if alias.module == EXTENSION and alias.bound == alias.name and alias.name in declared:
            continue  # declared here
        if alias.bound in exported:
            imports.append(Alias(alias.module, alias.name, alias.bound))  # re-exported
        elif alias.needed_by(used) or source.is_submodule(alias):
            imports.append(alias)

    # A name bound twice must be the same object: the classes' imports give way to the
    # module's own, and a name that means two things is an error.
    def origin(alias: Alias) -> tuple[str | None, str]:
        if alias.module == EXTENSION and alias.name in places:
            return places[alias.name], alias.name
        return alias.module, alias.name

    header_aliases = {a.bound: a for group in header for a in group}
    stub_aliases = {a.name: a for a in from_stubs}
    own = {name for names, _, _ in kept + private for name in names} | declared
    for alias in imports:
        other = header_aliases.get(alias.bound) or stub_aliases.get(alias.bound)
        if other is not None and origin(other) != origin(alias):
            raise ValueError(f"{module}: {alias.bound} is bound by the module's source and "
                             "means something else to the classes it publishes")
    if clash := sorted(own & (set(header_aliases) | set(stub_aliases))):
        raise ValueError(f"{module}: {', '.join(clash)} defined by the module's source and "
                         "imported for the classes it publishes")
    bound_by_source = {a.bound for a in imports}
    header = [[a for a in group if a.bound not in bound_by_source] for group in header]
    from_stubs = [a for a in from_stubs if a.name not in bound_by_source]

    parts = []
    if source.docstring:
        parts.append(source.docstring + "\n")
    blocks = ["\n".join(render_imports(group)) for group in [*header, from_stubs, imports]
              if group]
    if blocks:
        parts.append("\n\n".join(blocks) + "\n\n")
    body = [text for _, text in classes]
    body += [text for _, text, _ in private]
    body += [text for _, text, _ in kept]
    parts.append("\n\n".join(body) + "\n")
    return "\n".join(parts)


def extension_module_stub(extension: ExtensionStub, places: dict[str, str]) -> str:
    """The extension's stub, less the classes that public modules declare (imported from
    there)."""
    statements = [(node, text) for node, text in extension.statements
                  if not (isinstance(node, ast.ClassDef) and node.name in places)]
    used = references(node for node, _ in statements)
    groups = ["\n".join(render_imports(group)) for group in extension.needed_imports(used)]
    moved = [Alias(places[name], name, name) for name in extension.classes() if name in places]
    moved.sort(key=lambda a: (a.module or "", a.name))
    if moved:
        groups.append("\n".join(render_imports(moved)))
    parts = []
    if extension.docstring:
        parts.append(extension.docstring + "\n")
    parts.append("\n\n".join(groups) + "\n\n")
    parts.append("\n\n".join(text for _, text in statements) + "\n")
    return "\n".join(parts)


def stubs(extension_text: str, places: dict[str, str]) -> dict[pathlib.Path, str]:
    """``{path relative to the package's folder: text}`` of every stub, from nanobind's
    stub of the extension and the public module of each of its classes."""
    extension = ExtensionStub.parse(extension_text)
    classes = extension.classes()
    places = {name: module for name, module in places.items() if name in classes}
    out = {stub_file(EXTENSION): extension_module_stub(extension, places)}
    for module in sorted(set(places.values())):
        here = [classes[name] for name in classes if places.get(name) == module]
        source = SourceModule.read(module)
        out[stub_file(module)] = public_stub(module, source, here, extension, places)
    return out


def generate(folder: pathlib.Path) -> list[pathlib.Path]:
    """Writes every stub under ``folder`` (which holds the package ``nbrmm``); returns
    their paths."""
    written = []
    for relative, text in stubs(extension_stub(), published_modules()).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-o", "--output", type=pathlib.Path, default=PYTHON,
        help="the folder that holds the package nbrmm (default: python/)",
    )
    args = parser.parse_args()
    for path in generate(args.output):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
