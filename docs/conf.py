"""Sphinx configuration of nbrmm's documentation.

Build (warnings are errors, as in CI):

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The API reference is generated from the docstrings of the installed (or importable)
``nbrmm``; the examples of the pages run as tests (``tests/test_docs_examples.py``).
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import nbrmm
import sphinx.util.inspect as _sphinx_inspect

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
]

source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "pydata_sphinx_theme"
html_title = f"nbrmm {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []

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
autosummary_generate = False

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
    one-line summaries and overloads' extra lines still carry it.
    """
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


def _clean_signature(app, what, name, obj, options, signature, return_annotation):
    """Show nanobind signatures the way Python ones read."""
    if signature:
        # A method's signature lists ``self``; Python methods' do not.
        signature = re.sub(r"^\(self(, )?", "(", signature)
        # A default stream argument shows as the object's repr.
        signature = signature.replace("<nbrmm.Stream handle=0x0>", "DEFAULT_STREAM")
    return signature, return_annotation


def setup(app):
    app.connect("autodoc-process-docstring", _drop_signature_lines)
    app.connect("autodoc-process-docstring", _module_sections_as_rubrics)
    app.connect("autodoc-process-signature", _clean_signature)
