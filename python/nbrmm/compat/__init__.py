"""Run programs written for rmm on nbrmm, unchanged: ``import rmm`` imports nbrmm.

Opt-in, for trying nbrmm on an existing code base. Either run the program through nbrmm::

    python -m nbrmm.compat script.py [args...]
    python -m nbrmm.compat -m package.module [args...]

or call :func:`install` before anything imports rmm. The runner also sets ``NBRMM_COMPAT=1``
in the program's environment: every Python process started with that variable set (child
processes of ``multiprocessing``, Dask's workers, ``subprocess`` running Python) calls
:func:`install` at startup, through the ``nbrmm-compat.pth`` file nbrmm installs, so
the whole program runs on nbrmm. From then on ``import rmm`` gives the
``nbrmm`` package and ``import rmm.X.Y`` gives ``nbrmm.X.Y`` (the very module objects:
``rmm.mr is nbrmm.mr``); a module that nbrmm lacks (rmm's private modules, such as
``rmm._cuda``) raises ``ModuleNotFoundError`` naming it. The real rmm is never imported
while the mapping is installed, and :func:`install` refuses when it already is.

Examples
--------
>>> import nbrmm.compat
>>> nbrmm.compat.install()
>>> import rmm, rmm.mr
>>> rmm.mr is nbrmm.mr and rmm.DeviceBuffer is nbrmm.DeviceBuffer
True
>>> nbrmm.compat.uninstall()
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
import types
from collections.abc import Sequence

__all__ = ["ENVIRONMENT_VARIABLE", "RmmAlreadyImportedError", "install", "installed", "uninstall"]

#: Where set to ``"1"``, Python processes map rmm to nbrmm from startup (see the module's
#: description); ``python -m nbrmm.compat`` sets it for the program it runs.
ENVIRONMENT_VARIABLE = "NBRMM_COMPAT"

_ALIAS = "rmm"
_TARGET = "nbrmm"
_lock = threading.Lock()


class RmmAlreadyImportedError(ImportError):
    """The real rmm is already imported in this process, so nbrmm cannot stand in for it.

    Two memory managers in one process would each keep their own current resource; call
    :func:`install` (or use ``python -m nbrmm.compat``) before anything imports rmm.
    """


def _target_name(fullname: str) -> str | None:
    """``nbrmm.X`` for ``rmm.X`` (None for a module outside rmm)."""
    if fullname == _ALIAS:
        return _TARGET
    if fullname.startswith(_ALIAS + "."):
        return _TARGET + fullname[len(_ALIAS):]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Hands over an already imported nbrmm module as the module being imported."""

    def __init__(self, module: types.ModuleType) -> None:
        self._module = module
        self._spec = module.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self._module

    def exec_module(self, module: types.ModuleType) -> None:
        # The nbrmm module is imported already. The import system gave it the alias's
        # spec: it keeps its own (importlib.resources, reload and find_spec read it).
        module.__spec__ = self._spec


class _RmmFinder(importlib.abc.MetaPathFinder):
    """Resolves ``rmm`` and ``rmm.*`` to the nbrmm modules of the same dotted path."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        target_name = _target_name(fullname)
        if target_name is None:
            return None
        try:
            module = importlib.import_module(target_name)
        except ModuleNotFoundError as exc:
            if exc.name != target_name:
                raise
            # Not None: no other finder may load the real rmm in its place.
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: nbrmm.compat maps {fullname!r} to "
                f"{target_name!r}, which nbrmm does not have (nbrmm provides rmm's public "
                "modules only)",
                name=fullname,
            ) from None
        return importlib.machinery.ModuleSpec(
            fullname,
            _AliasLoader(module),
            is_package=hasattr(module, "__path__"),
        )


_finder: _RmmFinder | None = None


def installed() -> bool:
    """Whether :func:`install` is in effect (``import rmm`` gives nbrmm).

    Returns
    -------
    bool
        True between :func:`install` and :func:`uninstall`.
    """
    return _finder is not None


def _real_rmm_modules() -> list[str]:
    """Names of imported modules of the real rmm (not nbrmm stand-ins)."""
    found = []
    for name, module in list(sys.modules.items()):
        if _target_name(name) is None or module is None:
            continue
        if not getattr(module, "__name__", "").startswith(_TARGET):
            found.append(name)
    return sorted(found)


def install() -> None:
    """Make ``import rmm`` and ``import rmm.X`` import nbrmm and ``nbrmm.X``.

    Call it before anything imports rmm. Calling it again does nothing.

    Raises
    ------
    RmmAlreadyImportedError
        If the real rmm is already imported in this process (an ``ImportError``); nothing
        is changed then.
    """
    global _finder
    with _lock:
        if _finder is not None:
            return
        real = _real_rmm_modules()
        if real:
            origin = getattr(sys.modules[real[0]], "__file__", None) or "unknown location"
            raise RmmAlreadyImportedError(
                f"the real rmm is already imported in this process ({real[0]} from "
                f"{origin}): nbrmm cannot stand in for it. Install nbrmm.compat (or run "
                "'python -m nbrmm.compat ...') before anything imports rmm.",
                name=_ALIAS,
            )
        importlib.import_module(_TARGET)
        _finder = _RmmFinder()
        sys.meta_path.insert(0, _finder)


def uninstall() -> None:
    """Undo :func:`install`: forget the ``rmm`` names it gave to nbrmm's modules.

    Objects the program already holds (modules, resources, buffers) stay nbrmm's. Calling
    it when nothing is installed does nothing.
    """
    global _finder
    with _lock:
        if _finder is None:
            return
        try:
            sys.meta_path.remove(_finder)
        except ValueError:
            pass
        _finder = None
        for name in [n for n in sys.modules if _target_name(n) is not None]:
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__name__", "").startswith(_TARGET):
                del sys.modules[name]


def _startup() -> None:
    """Called at interpreter startup by ``nbrmm-compat.pth`` where ``NBRMM_COMPAT=1``."""
    try:
        install()
    except Exception as exc:  # noqa: BLE001 - startup goes on; the program sees no rmm
        sys.stderr.write(
            f"nbrmm.compat: {ENVIRONMENT_VARIABLE}=1, but rmm could not be mapped to "
            f"nbrmm: {type(exc).__name__}: {exc}\n"
        )
