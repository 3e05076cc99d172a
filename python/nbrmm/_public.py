"""Public names for the extension's classes.

The classes and exceptions of ``nbrmm._nbrmm`` are reached through the public modules
(``nbrmm.Buffer``, ``nbrmm.mr.PoolMemoryResource``, ``nbrmm.CudaUnavailableError``), and
so are those that a package's private submodules define (``nbrmm.memory.Snapshot``,
``nbrmm.interop.NbrmmMemoryResource``); each public module calls :func:`publish` on what
it exports, so that reprs, tracebacks and pickles name the public module. Pickles that
name ``nbrmm._nbrmm`` or a private submodule (made by earlier versions) still load: the
classes stay there too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

_EXTENSION = "nbrmm._nbrmm"


def publish(module: str, namespace: dict[str, object], names: Iterable[str]) -> None:
    """Give the classes among ``names`` of ``namespace`` that the extension or a private
    submodule of ``module`` defines the module name ``module``.

    Parameters
    ----------
    module : str
        The public module, e.g. ``"nbrmm.mr"``.
    namespace : dict
        That module's globals.
    names : iterable of str
        The names it exports (its ``__all__``). A class already published under another
        module keeps that one (the first public module to export a class names it).
    """
    if os.environ.get("NBRMM_STUBGEN"):  # scripts/stubgen.py: the extension as it is
        return
    for name in names:
        obj = namespace.get(name)
        if isinstance(obj, type) and (
            obj.__module__ == _EXTENSION or obj.__module__.startswith(module + "._")
        ):
            obj.__module__ = module
