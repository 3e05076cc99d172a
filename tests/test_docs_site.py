"""The documentation site's API reference covers every public name (the site itself is
built with warnings as errors by .ci/run)."""

import importlib
import re

import pytest

from doc_examples import ROOT

API = ROOT / "docs" / "api"

#: The public modules the API reference documents (the hook modules need their
#: framework to import; their pages are checked by name below).
MODULES = [
    "nbrmm",
    "nbrmm.mr",
    "nbrmm.mr.experimental",
    "nbrmm.statistics",
    "nbrmm.logger",
    "nbrmm.plot",
    "nbrmm.dask",
    "nbrmm.interop",
    "nbrmm.compat",
]
HOOK_MODULES = ["nbrmm.allocators", "nbrmm.allocators.cupy", "nbrmm.allocators.torch",
                "nbrmm.allocators.numba"]

_AUTOMODULE = re.compile(r"^\.\. automodule:: (?P<module>[\w.]+)\n(?P<options>(?:   :.*\n)*)", re.M)


def automodules():
    """``{module: (options text, page)}`` of every automodule directive of the reference."""
    found = {}
    for page in sorted(API.glob("*.md")):
        for m in _AUTOMODULE.finditer(page.read_text()):
            found[m["module"]] = (m["options"], page)
    return found


def excluded(options):
    m = re.search(r":exclude-members: (.*)", options)
    return {name.strip() for name in m[1].split(",")} if m else set()


def test_every_public_module_has_a_reference():
    found = automodules()
    for module in MODULES + HOOK_MODULES:
        assert module in found, f"no automodule for {module} in docs/api"
    for module in MODULES + HOOK_MODULES[1:]:
        assert ":members:" in found[module][0], f"{module}: automodule without :members:"


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_documented_once_somewhere(module):
    mod = importlib.import_module(module)
    options, page = automodules()[module]
    text = page.read_text()
    for name in excluded(options):
        assert name in mod.__all__, f"{module}: excluded {name} is not public"
        obj = getattr(mod, name)
        elsewhere = [
            other for other in MODULES
            if other != module and getattr(importlib.import_module(other), name, None) is obj
            and name not in excluded(automodules()[other][0])
        ]
        described = re.search(rf"^\.\. (data|function):: {re.escape(name)}\b", text, re.M)
        documented_here = name in ("__version__", "mr", "experimental") and name in text
        assert elsewhere or described or documented_here, (
            f"{module}.{name} is excluded from {page.name} but documented nowhere else"
        )


def resolve(path):
    """The object at a dotted path (a module, then attributes), or None."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr, None)
        return obj
    return None


def test_summary_tables_name_existing_objects():
    current = None
    for page in sorted(API.glob("*.md")):
        for line in page.read_text().splitlines():
            if m := re.match(r"\.\. currentmodule:: ([\w.]+)", line):
                current = m[1]
            elif m := re.match(r"   ~?([\w.]+)$", line):
                path = m[1]
                assert resolve(path) is not None or resolve(f"{current}.{path}") is not None, (
                    f"{page.name}: {path} does not exist"
                )


def test_every_user_page_is_in_the_site():
    index = (ROOT / "docs" / "index.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.stem != "index":
            assert re.search(rf"^{page.stem}$", index, re.M), f"{page.name} is not in index.md"
