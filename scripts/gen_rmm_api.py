"""Write the public API of an installed rmm as JSON (the test data of tests/test_rmm_api.py).

Run it with a Python that has rmm (no GPU needed), e.g.::

    python -m venv .venv-extra
    .venv-extra/bin/python -m pip install rmm-cu13==26.10.0   # or: pip install --group rmm-reference
    .venv-extra/bin/python scripts/gen_rmm_api.py -o tests/data/rmm-26.10-api.json

What counts as public:

- modules: ``rmm`` and every module below it whose dotted path has no component starting
  with ``_``;
- the names of a module: those in its ``__all__``, those its type stub (``.pyi``) declares,
  those its Python source defines at top level (``def``, ``class``, assignment; a module
  that cannot be imported here, e.g. one that needs Numba, is read from its source only),
  and every other attribute not starting with ``_`` whose value is an rmm module, an rmm
  class or function, or an instance of an rmm class (imports of other packages such as
  ``re``, ``numpy`` or ``typing`` names are not rmm's API);
- the members of a public class: the attributes not starting with ``_`` that the class or
  one of its rmm base classes defines, and the protocol methods a program relies on
  (``__cuda_stream__``, ``__cuda_array_interface__``, ``__len__``, ...).

Each name records ``same_as``: the first path (in sorted order) at which the very same object
is public, when it is public at more than one path, so that a test can check that the
counterparts are one object too.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import inspect
import json
import os
import pkgutil
import subprocess
import sys
import types
import typing

# Protocol methods a program may rely on (checked when the class defines them itself).
PROTOCOL_MEMBERS = (
    "__cuda_stream__",
    "__cuda_array_interface__",
    "__len__",
    "__bytes__",
    "__copy__",
    "__reduce__",
    "__sizeof__",
    "__enter__",
    "__exit__",
    "__call__",
)


def _is_rmm(obj) -> bool:
    mod = getattr(obj, "__module__", None)
    return isinstance(mod, str) and (mod == "rmm" or mod.startswith("rmm."))


def _module_names(root) -> list[str]:
    names = [root.__name__]
    for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        names.append(info.name)
    return sorted(set(names))


def _source_path(modname: str, suffixes) -> str | None:
    spec = importlib.util.find_spec(modname)
    if spec is None or spec.origin is None:
        return None
    origin = spec.origin
    base = os.path.dirname(origin)
    stem = "__init__" if spec.submodule_search_locations else modname.rsplit(".", 1)[-1]
    for suffix in suffixes:
        cand = os.path.join(base, stem + suffix)
        if os.path.exists(cand):
            return cand
    return None


def _top_level_statements(path: str):
    """The statements a Python source runs at module level, also inside try/if blocks."""
    with open(path, encoding="utf-8") as f:
        pending = list(ast.parse(f.read(), path).body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Try):
            pending[:0] = [*node.body, *node.orelse, *node.finalbody,
                           *(s for h in node.handlers for s in h.body)]
        elif isinstance(node, ast.If):
            pending[:0] = [*node.body, *node.orelse]
        else:
            yield node


def _top_level_defs(path: str) -> set[str]:
    """Names a Python source or stub defines at top level (also inside try/if blocks)."""
    out: set[str] = set()
    for node in _top_level_statements(path):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return {n for n in out if not n.startswith("_") and n != "TYPE_CHECKING"}


def _public(name: str) -> bool:
    """Not underscored, or a dunder such as ``__version__`` imported from the package."""
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _is_module_path(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ImportError:  # the parent is a plain module: the name is an attribute
        return False


def _imports(path: str, root_name: str) -> tuple[set[str], set[str]]:
    """The names a Python source binds by importing: (from rmm, from anything else).

    Modules of rmm bound by ``from rmm import pylibrmm`` count as imported from elsewhere:
    they are aliases, not part of the importing module's API.
    """
    ours: set[str] = set()
    theirs: set[str] = set()
    for node in _top_level_statements(path):
        if isinstance(node, ast.Import):
            theirs.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            from_root = node.module == root_name or node.module.startswith(root_name + ".")
            for alias in node.names:
                name = alias.asname or alias.name
                is_module = from_root and _is_module_path(f"{node.module}.{alias.name}")
                (ours if from_root and not is_module else theirs).add(name)
    return ({n for n in ours if _public(n)}, theirs)


def _is_submodule(value, modname: str, name: str) -> bool:
    return isinstance(value, types.ModuleType) and value.__name__ == f"{modname}.{name}"


def _kind(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    if inspect.isclass(obj):
        return "class"
    if callable(obj):
        return "function"
    return "value"


def _class_members(cls) -> list[str]:
    members = set()
    for klass in cls.__mro__:
        if klass is object or not _is_rmm(klass):
            continue
        for name in vars(klass):
            if not name.startswith("_") or name in PROTOCOL_MEMBERS:
                members.add(name)
    return sorted(members)


def _submodules_after_import(root_name: str) -> list[str]:
    """The submodules that are attributes of the package right after ``import <root>``,
    in a fresh interpreter (a program may use ``rmm.statistics`` without importing it)."""
    code = (
        f"import json, types, {root_name} as r\n"
        "print(json.dumps(sorted(n for n, v in vars(r).items()\n"
        "    if not n.startswith('_') and isinstance(v, types.ModuleType)\n"
        "    and v.__name__ == r.__name__ + '.' + n)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def collect(root_name: str = "rmm") -> dict:
    submodules_after_import = _submodules_after_import(root_name)
    root = importlib.import_module(root_name)
    modules: dict[str, dict] = {}
    objects: dict[int, list[str]] = {}  # id(obj) -> public paths holding it
    keep_alive = []
    for modname in _module_names(root):
        entry: dict = {"importable": True, "names": {}}
        try:
            mod = importlib.import_module(modname)
        except ImportError as exc:
            entry["importable"] = False
            entry["import_error"] = f"{type(exc).__name__}: {exc}"
            mod = None
        names: set[str] = set()
        stub = _source_path(modname, (".pyi",))
        src = _source_path(modname, (".py",))
        foreign: set[str] = set()
        if stub:
            names |= _top_level_defs(stub)
        if src:
            ours, foreign = _imports(src, root_name)
            defined = _top_level_defs(src) - foreign
            if mod is None:
                names |= defined | ours
            else:
                # Names the source binds and then deletes (``del sofile``) are not API.
                names |= {n for n in defined | ours if hasattr(mod, n)}
        if mod is not None:
            names |= set(getattr(mod, "__all__", ()))
            for name, value in vars(mod).items():
                if name.startswith("_") or name in foreign:
                    continue
                if isinstance(value, types.ModuleType):
                    if _is_submodule(value, modname, name):
                        names.add(name)
                elif _is_rmm(value) or _is_rmm(type(value)):
                    names.add(name)
        if mod is not None:
            # Typing helpers of annotations (``P = ParamSpec("P")``) are not API.
            names = {
                n for n in names
                if not isinstance(getattr(mod, n, None), (typing.TypeVar, typing.ParamSpec))
            }
        for name in sorted(names):
            info: dict = {}
            if mod is not None and hasattr(mod, name):
                value = getattr(mod, name)
                info["kind"] = _kind(value)
                info["runtime"] = True
                if inspect.isclass(value) and _is_rmm(value):
                    info["members"] = _class_members(value)
                if not isinstance(value, (int, str, float, bool, type(None))):
                    keep_alive.append(value)
                    objects.setdefault(id(value), []).append(f"{modname}.{name}")
            else:
                # Declared by the stub or the source but absent at run time (a Cython
                # cdef function in a stub, or a module that needs a missing package).
                info["runtime"] = False
            entry["names"][name] = info
        modules[modname] = entry

    for paths in objects.values():
        if len(paths) > 1:
            first = sorted(paths)[0]
            for path in paths:
                if path != first:
                    modname, name = path.rsplit(".", 1)
                    modules[modname]["names"][name]["same_as"] = first

    return {
        "package": root_name,
        "version": getattr(root, "__version__", ""),
        "git_commit": getattr(root, "__git_commit__", ""),
        "python": ".".join(map(str, sys.version_info[:3])),
        "submodules_after_import": submodules_after_import,
        "modules": modules,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", help="output file (default: stdout)")
    parser.add_argument("--package", default="rmm", help="the package to read (default rmm)")
    args = parser.parse_args(argv)
    data = collect(args.package)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
