"""Sphinx configuration of nbrmm's documentation.

Build (warnings are errors, as in CI):

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The API reference is generated from the docstrings of the installed (or importable)
``nbrmm``: the module pages (``docs/api/*.md``) list the public names, and autosummary
writes one page per class and function into ``docs/api/generated/`` (a build output, from
the templates of ``docs/_templates/autosummary/``). The examples of the pages run as tests
(``tests/test_docs_examples.py``); ``tests/test_docs_site.py`` checks the built site.

Links to other projects' documentation (intersphinx: Python, NumPy, CuPy, cuda.core) need
their inventories, which are downloaded at build time. ``NBRMM_DOCS_OFFLINE`` decides:

- unset: each site is asked first (a few seconds at most), and the ones that cannot be
  reached are left out, so that a build without network still passes with ``-W`` (the
  names of those projects are then shown as plain text);
- ``1``: no inventory is downloaded (a build that must not touch the network);
- ``0``: every inventory is required: a site that cannot be reached fails the build.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import re
import urllib.request
from typing import Any

import nbrmm
import sphinx.util.inspect as _sphinx_inspect
from nbrmm._call_errors import CATCH_ALL_NOTE

project = "nbrmm"
author = "The nbrmm authors"
copyright = "2026, The nbrmm authors"
release = nbrmm.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx_copybutton",
]

# The pages are markdown; autosummary's generated pages are reStructuredText (it writes
# them with the first suffix).
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "pydata_sphinx_theme"
html_title = f"nbrmm {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
}
# The left column shows the whole site on every page (the theme's default shows only the
# pages under the current top-level page, none for a guide page).
html_sidebars = {"**": ["sidebar-nav-all"]}
html_static_path = ["_static"]
html_css_files = ["nbrmm.css"]

# The copy button copies a console example without its prompts and without its output
# (``>>>``/``...`` of Python, ``$`` of a shell); a block without prompts is copied whole.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True
copybutton_remove_prompts = True

# -- Links to other projects ----------------------------------------------------------

_INVENTORIES = {
    "python": ("https://docs.python.org/3", None),
    "numpy": ("https://numpy.org/doc/stable", None),
    "cupy": ("https://docs.cupy.dev/en/stable", None),
    "cuda.core": ("https://nvidia.github.io/cuda-python/cuda-core/latest", None),
}


def _reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/objects.inv", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def _intersphinx_mapping() -> dict[str, tuple[str, None]]:
    offline = os.environ.get("NBRMM_DOCS_OFFLINE", "")
    if offline not in ("", "0", "1"):
        raise ValueError(f"NBRMM_DOCS_OFFLINE must be unset, 0 or 1, not {offline!r}")
    if offline == "1":
        return {}
    if offline == "0":
        return dict(_INVENTORIES)
    with concurrent.futures.ThreadPoolExecutor(len(_INVENTORIES)) as pool:
        up = dict(zip(_INVENTORIES, pool.map(_reachable, (u for u, _ in _INVENTORIES.values()))))
    missing = sorted(name for name, ok in up.items() if not ok)
    if missing:
        print(f"nbrmm docs: no links to {', '.join(missing)} (inventory not reachable)")
    return {name: target for name, target in _INVENTORIES.items() if up[name]}


intersphinx_mapping = _intersphinx_mapping()
intersphinx_timeout = 10

# -- API reference ------------------------------------------------------------------

autodoc_default_options = {
    "members": True,
    "undoc-members": False,
    "show-inheritance": True,
}
autodoc_member_order = "groupwise"
autodoc_typehints = "signature"
# nanobind writes a function's signature as the first line of its docstring; autodoc
# reads it from there (for classes, from ``__init__``'s docstring).
autodoc_docstring_signature = True
autoclass_content = "both"
# One page per public class and function, written into api/generated/ by autosummary (the
# ``:toctree:`` lists of the module pages) from the templates in _templates/autosummary.
autosummary_generate = True
autosummary_generate_overwrite = True
autosummary_imported_members = True
# Type names in signatures link to their object and show its name without the module.
python_use_unqualified_type_names = True

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:  # its parent package is missing
        return True


# The allocator hooks import their framework: CuPy, PyTorch, Numba-CUDA and its
# cuda-bindings. Where one is not installed, the reference is built against stand-ins
# for it (only the modules' docstrings and signatures are read): a missing module is
# mocked, or its top-level package where that is missing too, and the CuPy hook's set-up,
# which inspects CuPy's classes, is skipped.
autodoc_mock_imports = sorted(
    {
        name if not _missing(name.split(".")[0]) else name.split(".")[0]
        for name in ["cupy", "torch", "numba", "cuda.bindings"]
        if _missing(name)
    }
)
# nanobind's functions are instances of ``nanobind.nb_func``, which Python's inspect
# does not count as routines; tell autodoc that they are built-in functions, so that
# ``automodule`` and ``autosummary`` document them as functions (not as data).
_isbuiltin = _sphinx_inspect.isbuiltin


def _is_builtin_or_nanobind(obj: Any) -> bool:
    kind = type(obj)
    return _isbuiltin(obj) or (kind.__module__ == "nanobind" and kind.__name__ == "nb_func")


_sphinx_inspect.isbuiltin = _is_builtin_or_nanobind

# A signature line as nanobind writes it: ``name(args) -> ret``.
_SIGNATURE_LINE = re.compile(r"^(?P<name>[A-Za-z_]\w*)\(.*\)(\s*->\s*.+)?$")


def _drop_signature_lines(app, what, name, obj, options, lines):
    """Remove nanobind's signature lines from a docstring.

    autodoc already takes the signature out of the docstrings it documents; autosummary's
    one-line summaries and overloads' extra lines still carry it. The line of the catch-all
    overload that reports refused calls (``name(...): other arguments raise TypeError
    ...``, see ``src/core/call_errors.cpp``) is no signature of the interface: it goes
    wherever it stands (a class's docstring carries its ``__init__``'s).
    """
    lines[:] = [line for line in lines if not line.endswith(CATCH_ALL_NOTE)]
    short = name.rsplit(".", 1)[-1]
    while lines and (m := _SIGNATURE_LINE.match(lines[0])) and m["name"] in (short, "__init__"):
        del lines[0]
        while lines and not lines[0].strip():
            del lines[0]


def _module_sections_as_rubrics(app, what, name, obj, options, lines):
    """Show the numpydoc-style sections of a module docstring (``Examples`` over a line
    of dashes) as rubrics: as sections they would be labels that clash across pages."""
    if what != "module":
        return
    i = 0
    while i + 1 < len(lines):
        title, rule = lines[i], lines[i + 1]
        if title.strip() and set(rule.strip()) == {"-"} and len(rule.strip()) >= len(title.strip()):
            lines[i : i + 2] = [f".. rubric:: {title.strip()}", ""]
        i += 1


# Defaults that nanobind's signatures write as ``...`` (a C++ value), by parameter: what
# they are in Python.
_DEFAULTS = {
    "stream": "DEFAULT_STREAM",
    "flags": "CudaStreamFlags.SYNC_DEFAULT",
}


def _clean_signature(app, what, name, obj, options, signature, return_annotation):
    """Show nanobind signatures the way Python ones read."""
    if signature:
        # A method's signature lists ``self``; Python methods' do not.
        signature = re.sub(r"^\(self(, )?", "(", signature)
        # A default stream argument shows as the object's repr.
        signature = signature.replace("<nbrmm.Stream handle=0x0>", "DEFAULT_STREAM")
        # ``stream: CudaStreamLike = ...``: the real default.
        signature = re.sub(
            r"\b(?P<param>\w+)(?P<annotation>: [^=,()]+)? = \.\.\.(?=[,)])",
            lambda m: (
                f"{m['param']}{m['annotation'] or ''} = {_DEFAULTS[m['param']]}"
                if m["param"] in _DEFAULTS
                else m[0]
            ),
            signature,
        )
    return signature, return_annotation


def _resolve_short_names(app, env, node, contnode):
    """Link a type named without its module (``DeviceMemoryResource`` in a signature of
    ``nbrmm.Buffer``) to the one documented object of that name."""
    if node.get("refdomain") != "py" or node.get("reftype") not in ("class", "obj", "exc"):
        return None
    target = node["reftarget"]
    domain = env.get_domain("py")
    if "." in target:
        return None
    matches = [
        name
        for name, entry in domain.objects.items()
        if entry.objtype in ("class", "exception", "data")
        and not entry.aliased
        and name.rsplit(".", 1)[-1] == target
    ]
    if len(matches) != 1:
        return None
    node = node.deepcopy()
    node["reftarget"] = matches[0]
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], matches[0], node, contnode)


def setup(app):
    app.connect("autodoc-process-docstring", _drop_signature_lines)
    app.connect("autodoc-process-docstring", _module_sections_as_rubrics)
    app.connect("autodoc-process-signature", _clean_signature)
    app.connect("missing-reference", _resolve_short_names)
