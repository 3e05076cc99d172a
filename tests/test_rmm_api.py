"""Rule 1 of the drop-in: every public module and name of rmm 26.10 exists under nbrmm at the
same dotted path, as nbrmm's own object.

The list of rmm's modules and names is tests/data/rmm-26.10-api.json, generated from the
rmm-cu13 26.10.0 wheel by scripts/gen_rmm_api.py (which also records which names are the
same object at several paths, and the public members of each class).
"""

import importlib
import inspect
import json
import pathlib
import types

import pytest

import nbrmm
from helpers import run_python

API = json.loads((pathlib.Path(__file__).parent / "data" / "rmm-26.10-api.json").read_text())
MODULES = API["modules"]
NAMES = [
    (module, name, info)
    for module, entry in sorted(MODULES.items())
    for name, info in sorted(entry["names"].items())
]
FRAMEWORKS = ("cupy", "torch", "numba")


def nbrmm_path(rmm_path):
    """``nbrmm.X.Y`` for ``rmm.X.Y``."""
    assert rmm_path == "rmm" or rmm_path.startswith("rmm.")
    return "nbrmm" + rmm_path[len("rmm"):]


def resolve(path):
    """The object at a dotted path such as ``nbrmm.pylibrmm.stream.Stream``."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_list_is_rmm_26_10_and_complete():
    assert API["version"].startswith("26.10")
    assert len(MODULES) == 19
    assert len(NAMES) == 136  # if rmm's list is regenerated, this count changes with it
    assert {"rmm.pylibrmm.helper", "rmm.pylibrmm.utils", "rmm.rmm"} <= set(MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_exists_at_the_same_path(module):
    mod = importlib.import_module(nbrmm_path(module))
    assert mod.__name__ == nbrmm_path(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_names_exist_at_the_same_path(module):
    mod = importlib.import_module(nbrmm_path(module))
    missing = [name for name in MODULES[module]["names"] if not hasattr(mod, name)]
    assert missing == [], f"{mod.__name__} lacks {missing}"


def test_all_rmm_names_are_present():
    present = [
        f"{m}.{n}" for m, n, _ in NAMES if hasattr(importlib.import_module(nbrmm_path(m)), n)
    ]
    assert len(present) == len(NAMES) == 136


@pytest.mark.parametrize("module", sorted(MODULES))
def test_aliases_are_one_object(module):
    # Where rmm has one object at two paths, nbrmm has one object at both too.
    mod = importlib.import_module(nbrmm_path(module))
    aliases = {n: i["same_as"] for n, i in MODULES[module]["names"].items() if "same_as" in i}
    different = [n for n, same_as in aliases.items()
                 if getattr(mod, n) is not resolve(nbrmm_path(same_as))]
    assert different == []


def test_the_alias_list_is_not_empty():
    assert sum("same_as" in info for _, _, info in NAMES) >= 50


@pytest.mark.parametrize("module", sorted(MODULES))
def test_classes_have_rmms_members(module):
    mod = importlib.import_module(nbrmm_path(module))
    missing = [
        f"{name}.{member}"
        for name, info in MODULES[module]["names"].items()
        for member in info.get("members", ())
        if not hasattr(getattr(mod, name), member)
    ]
    assert missing == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_names_are_nbrmms_own_objects(module):
    # No second class hierarchy: every class and function is defined by nbrmm, and a
    # class that the extension defines is that very class wherever rmm's path puts it.
    mod = importlib.import_module(nbrmm_path(module))
    for name in MODULES[module]["names"]:
        obj = getattr(mod, name)
        if isinstance(obj, types.ModuleType):
            assert obj.__name__ == nbrmm_path(f"{module}.{name}")
            continue
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue  # a constant (a Stream, None, a record object)
        assert obj.__module__.split(".")[0] == "nbrmm", (name, obj)
        if inspect.isclass(obj) and hasattr(nbrmm._nbrmm, name):
            assert obj is getattr(nbrmm._nbrmm, name), name


def test_import_nbrmm_makes_rmms_submodules_attributes():
    # `import rmm` makes rmm.statistics, rmm.pylibrmm, ... usable without importing them.
    expected = API["submodules_after_import"]
    out = run_python(
        "import json, types, nbrmm\n"
        f"names = {expected!r}\n"
        "print(json.dumps([n for n in names if isinstance(getattr(nbrmm, n, None),"
        " types.ModuleType) and getattr(nbrmm, n).__name__ == 'nbrmm.' + n]))"
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == expected


def test_hook_modules_import_without_their_frameworks():
    hooks = [m for m in MODULES if m.startswith("rmm.allocators.")]
    assert len(hooks) == 3
    blocked = "".join(f"sys.modules[{f!r}] = None\n" for f in FRAMEWORKS)
    checks = "".join(
        f"m = importlib.import_module({nbrmm_path(h)!r})\n"
        + "".join(f"assert hasattr(m, {n!r})\n" for n in MODULES[h]["names"])
        for h in hooks
    )
    out = run_python(f"import importlib, sys\n{blocked}{checks}print('ok')")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_git_commit_and_version():
    assert isinstance(nbrmm.__git_commit__, str)
    assert nbrmm.__git_commit__ == "" or len(nbrmm.__git_commit__) == 40
    assert nbrmm.rmm.RMMError is nbrmm.RMMError
    err = nbrmm.RMMError(7, "what happened")
    assert isinstance(err, Exception) and err.errcode == 7 and str(err) == "what happened"
