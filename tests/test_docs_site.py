"""The documentation site: its API reference documents every public name and every public
member of the extension's classes (checked against the site's ``objects.inv``), in
signatures that name public types and real defaults, with the guides linking into it, the
changelog and the performance plot in it, and the copy button and links to other projects
set up.

The checks of the built site need the packages of the docs extra. They build the site
once per test session into a temporary folder (about 30 s on two cores, without network:
``NBRMM_DOCS_OFFLINE=1``), or read an already built one from ``NBRMM_DOCS_HTML`` (a build
of ``docs/`` with the same configuration); without the docs extra they skip.
"""

import ast
import functools
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest

from doc_examples import ROOT
from helpers import extension_declarations

DOCS = ROOT / "docs"
API = DOCS / "api"

#: The public modules the API reference documents.
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
#: The hook modules import their framework: their names are read from their source.
HOOK_MODULES = ["nbrmm.allocators.cupy", "nbrmm.allocators.torch", "nbrmm.allocators.numba"]

#: Protocol methods and attributes a reader needs to see, beside the public names.
PROTOCOL_MEMBERS = {
    "__cuda_array_interface__",
    "__cuda_stream__",
    "__dlpack__",
    "__dlpack_device__",
    "__nbrmm_resource__",
}

_DOCS_PACKAGES = ["sphinx", "myst_parser", "numpydoc", "pydata_sphinx_theme", "sphinx_copybutton"]


@functools.cache
def _build():
    """``(html folder, None)`` of the site, or ``(None, why not)``."""
    if given := os.environ.get("NBRMM_DOCS_HTML"):
        html = Path(given)
        if not (html / "objects.inv").is_file():
            return None, f"NBRMM_DOCS_HTML={given} holds no built site (no objects.inv)"
        return html, None
    missing = [name for name in _DOCS_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        return None, f"the docs extra is not installed (no {', '.join(missing)})"
    html = Path(tempfile.mkdtemp(prefix="nbrmm-docs-")) / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(html)],
        capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "NBRMM_DOCS_OFFLINE": "1"},
    )
    if result.returncode != 0:
        pytest.fail(f"the documentation does not build:\n{result.stdout}\n{result.stderr}")
    return html, None


def built_site():
    """The folder of the built site (skips the calling test where it cannot be built)."""
    html, why = _build()
    if html is None:
        pytest.skip(why)
    return html


@pytest.fixture(scope="module")
def site():
    return built_site()


def read_inventory(path):
    """``{name: (role, uri)}`` of a Sphinx ``objects.inv`` (version 2)."""
    data = path.read_bytes()
    header = data.split(b"\n", 4)
    assert header[0] == b"# Sphinx inventory version 2", header[0]
    found = {}
    for line in zlib.decompress(header[4]).decode().splitlines():
        m = re.match(r"(?P<name>.+?)\s+(?P<role>\S+:\S+)\s+-?\d+\s+(?P<uri>\S+)\s+.*$", line)
        assert m, line
        found[m["name"]] = (m["role"], m["uri"])
    return found


@pytest.fixture(scope="module")
def inventory(site):
    return read_inventory(site / "objects.inv")


def public_names(module):
    """The ``__all__`` of a module, read from its source where importing it needs a framework."""
    if module in HOOK_MODULES:
        source = ROOT / "python" / Path(*module.split(".")).with_suffix(".py")
        for node in ast.parse(source.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                return list(ast.literal_eval(node.value))
        raise AssertionError(f"{module}: no __all__")
    return list(importlib.import_module(module).__all__)


def documented_as(name, module, inventory):
    """The name under which ``module.name`` is in the inventory: its own, or that of the
    same object in another public module (``nbrmm.enable_logging`` is documented as
    ``nbrmm.logger.enable_logging``)."""
    if f"{module}.{name}" in inventory:
        return f"{module}.{name}"
    if module in HOOK_MODULES:
        return None
    obj = getattr(importlib.import_module(module), name)
    for other in MODULES:
        if other != module and getattr(importlib.import_module(other), name, None) is obj:
            if f"{other}.{name}" in inventory:
                return f"{other}.{name}"
    return None


@pytest.mark.parametrize("module", MODULES + HOOK_MODULES)
def test_every_public_name_is_in_the_reference(module, inventory):
    assert inventory.get(module, ("",))[0] == "py:module", f"{module} has no module entry"
    missing = [name for name in public_names(module)
               if documented_as(name, module, inventory) is None]
    assert not missing, f"{module}: not in the API reference: {missing}"


def stub_classes():
    """``{class name: [public member names]}`` of the classes of the extension's stubs."""
    classes = {}
    for node in extension_declarations():
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        members = []
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [item.name]
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names = [item.target.id]
            elif isinstance(item, ast.Assign):
                names = [t.id for t in item.targets if isinstance(t, ast.Name)]
            else:
                continue
            members += [n for n in names
                        if (not n.startswith("_") or n in PROTOCOL_MEMBERS) and n not in members]
        classes[node.name] = members
    return classes


def public_paths(cls_name):
    """The public dotted names of a class of the extension (``nbrmm.mr.PoolMemoryResource``)."""
    from nbrmm import _nbrmm

    cls = getattr(_nbrmm, cls_name)
    return [f"{module}.{cls_name}" for module in MODULES
            if cls_name in importlib.import_module(module).__all__
            and getattr(importlib.import_module(module), cls_name) is cls]


def test_the_stub_is_read():
    classes = stub_classes()
    assert "mr" in classes["Buffer"] and "__cuda_array_interface__" in classes["Buffer"]
    assert "__cuda_stream__" in classes["Stream"]
    assert public_paths("PoolMemoryResource") == ["nbrmm.mr.PoolMemoryResource"]


@pytest.mark.parametrize("cls_name", sorted(stub_classes()))
def test_every_public_member_of_the_extension_is_in_the_reference(cls_name, inventory):
    paths = public_paths(cls_name)
    if not paths:
        pytest.skip(f"{cls_name} is not public")
    path = next((p for p in paths if p in inventory), None)
    assert path, f"none of {paths} is in the API reference"
    missing = [m for m in stub_classes()[cls_name] if f"{path}.{m}" not in inventory]
    assert not missing, f"{path}: members not in the API reference: {missing}"


def test_each_class_and_function_has_a_page_of_its_own(inventory):
    for name in ["nbrmm.Buffer", "nbrmm.mr.PoolMemoryResource", "nbrmm.to_device",
                 "nbrmm.statistics.Statistics", "nbrmm.interop.to_cuda_core_buffer"]:
        role, uri = inventory[name]
        assert uri.startswith(f"api/generated/{name}.html"), (name, uri)
    # A member is on its class's page.
    assert inventory["nbrmm.Buffer.mr"][1].startswith("api/generated/nbrmm.Buffer.html")
    assert inventory["nbrmm.Buffer.mr"][0] == "py:property"


def text_of(html_file):
    """The text of a page, without its tags."""
    text = re.sub(r"<[^>]+>", "", html_file.read_text())
    return (text.replace("&lt;", "<").replace("&gt;", ">").replace("&#8212;", "—")
            .replace("&amp;", "&"))


def test_signatures_name_public_types_and_real_defaults(site):
    buffer = text_of(site / "api" / "generated" / "nbrmm.Buffer.html")
    assert "stream: CudaStreamLike = DEFAULT_STREAM" in buffer
    assert "nbrmm._typing" not in buffer
    assert not re.search(r"= \.\.\.\s*[,)]", buffer), "a default shown as ..."
    pool = text_of(site / "api" / "generated" / "nbrmm.CudaStreamPool.html")
    assert "flags: CudaStreamFlags | None = CudaStreamFlags.SYNC_DEFAULT" in pool
    # The types link to their description.
    html = (site / "api" / "generated" / "nbrmm.Buffer.html").read_text()
    assert re.search(r'href="[^"]*types.html#nbrmm._typing.CudaStreamLike"', html)
    assert re.search(r'href="[^"]*nbrmm.mr.DeviceMemoryResource.html#nbrmm.mr.DeviceMemoryResource"',
                     html)


def test_the_catch_all_overloads_are_not_in_the_reference(site):
    """The overload that reports refused calls is no signature of the interface."""
    from nbrmm._call_errors import CATCH_ALL_NOTE

    pages = sorted((site / "api").rglob("*.html"))
    assert len(pages) > 50
    for page in pages:
        assert "other arguments raise TypeError" not in text_of(page), page.name
    assert CATCH_ALL_NOTE.startswith("(...): other arguments raise TypeError")


def test_the_guides_link_into_the_reference(site):
    for page in ["moving-from-rmm", "differences", "buffers"]:
        html = (site / f"{page}.html").read_text()
        assert 'href="api/generated/nbrmm.Buffer.html#nbrmm.Buffer"' in html, page


def test_the_changelog_and_the_performance_plot_are_in_the_site(site):
    changelog = text_of(site / "changelog.html")
    first_entry = next(line[2:].strip() for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
                       if line.startswith("- "))
    assert first_entry.split(",")[0] in changelog
    performance = (site / "performance.html").read_text()
    assert re.search(r'<img [^>]*src="_images/report.png"', performance)
    assert (site / "_images" / "report.png").stat().st_size > 10_000


def test_the_copy_button_drops_prompts(site):
    index = (site / "index.html").read_text()
    assert "_static/copybutton.js" in index
    script = (site / "_static" / "copybutton.js").read_text()
    # Prompts of Python (>>> and ...) and of a shell ($), as a regular expression, and only
    # the lines with a prompt copied (not the output).
    assert "formatCopyText(text, '>>> |\\\\.\\\\.\\\\. |\\\\$ ', true, true, true" in script


def run_conf(offline):
    """The intersphinx mapping docs/conf.py makes with ``NBRMM_DOCS_OFFLINE=offline``."""
    env = {k: v for k, v in os.environ.items() if k != "NBRMM_DOCS_OFFLINE"}
    if offline is not None:
        env["NBRMM_DOCS_OFFLINE"] = offline
    return subprocess.run(
        [sys.executable, "-c",
         "import runpy, sys; sys.path.insert(0, 'docs'); "
         "print(sorted(runpy.run_path('docs/conf.py')['intersphinx_mapping']))"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def test_links_to_other_projects_follow_nbrmm_docs_offline(site):
    online = run_conf("0")
    assert online.returncode == 0, online.stderr
    assert online.stdout.splitlines()[-1] == "['cuda.core', 'cupy', 'numpy', 'python']"
    offline = run_conf("1")
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.splitlines()[-1] == "[]"
    wrong = run_conf("yes")
    assert wrong.returncode != 0 and "NBRMM_DOCS_OFFLINE" in wrong.stderr


def test_every_user_page_is_in_the_site():
    index = (DOCS / "index.md").read_text()
    for page in sorted(DOCS.glob("*.md")):
        if page.stem != "index":
            assert re.search(rf"^{page.stem}$", index, re.M), f"{page.name} is not in index.md"


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
        if page.name.startswith("allocators-"):
            continue  # their modules import their framework
        for line in page.read_text().splitlines():
            if m := re.match(r"\.\. currentmodule:: ([\w.]+)", line):
                current = m[1]
            elif m := re.match(r"   ~?([\w.]+)$", line):
                path = m[1]
                assert resolve(path) is not None or resolve(f"{current}.{path}") is not None, (
                    f"{page.name}: {path} does not exist"
                )
