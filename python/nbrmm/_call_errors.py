"""The message of a call that the extension's bindings do not accept.

Every public function, method and constructor of ``nbrmm._nbrmm`` has, after its real
overload, a catch-all that nanobind reaches only when the real overload refuses the call
(``src/core/call_errors.cpp``). It calls :func:`call_error`, which reads the real
overload's signature and says what is wrong in Python's words: a missing or unexpected
argument (with the closest valid keyword), too many positional arguments, ``None`` where it
is not allowed, an argument of the wrong type or a class where an instance is expected.
The message starts with the parameter at fault, or with the callable's public name for a
call of the wrong shape.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import os
import re
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from nbrmm._nbrmm import _CATCH_ALL_NOTE, _NOT_INITIALIZED_NOTE

#: What the catch-all's signature line says after the callable's name (call_errors.cpp).
CATCH_ALL_NOTE: str = _CATCH_ALL_NOTE

_REQUIRED = object()  # a parameter without a default


def is_catch_all(signature: str) -> bool:
    """Whether an entry of a function's ``__nb_signature__`` is the catch-all's."""
    return signature.endswith(CATCH_ALL_NOTE)


class _Param(NamedTuple):
    name: str
    kind: str  # "positional", "either", "keyword", "*args" or "**kwargs"
    default: object  # _REQUIRED or a placeholder
    annotation: ast.expr | None


class _Accepts(NamedTuple):
    """One alternative of an annotation: what it is called and which values it accepts."""

    text: str
    test: Callable[[object], bool]
    cls: type | None = None  # the class whose instances it accepts, if one


def call_error(scope: object, name: str, kind: str, args: tuple[Any, ...],
               kwargs: dict[str, Any], ready: bool | None = None,
               unready: list[object] | None = None) -> str:
    """The message for a call of ``scope.name`` that its real overload refused.

    Parameters
    ----------
    scope : module or type
        Where the callable is defined.
    name : str
        Its name there.
    kind : str
        ``"function"``, ``"method"`` (``args[0]`` is ``self``) or ``"staticmethod"``.
    args, kwargs
        The call's arguments.
    ready : bool or None
        For a method whose ``args[0]`` is an instance of one of nbrmm's classes: whether
        its ``__init__`` ran.
    unready : list or None
        The arguments that are instances of nbrmm's classes whose ``__init__`` never ran.

    Returns
    -------
    str
        The TypeError's message.
    """
    func = scope.__dict__[name] if isinstance(scope, type) else getattr(scope, name)
    title = _title(scope, name, kind, args)
    params = _parameters(func.__nb_signature__[0][0])
    if kind == "method" and params and params[0].kind in ("positional", "either"):
        self_param, params = params[0], params[1:]
        if not args:
            return f"{title}: missing required argument '{self_param.name}'"
        self, args = args[0], args[1:]
        if name != "__init__" and isinstance(scope, type) and not _passes(_class_accepts(scope), self):
            return _wrong_value(self_param.name, [_class_accepts(scope)], self)
        if name == "__init__" and ready:
            return f"{title}: the object is already initialized (__init__ runs once)"
        if name != "__init__" and ready is False:
            instance = _article(_public_name(type(self)))
            return f"{title}: called on {instance}{_NOT_INITIALIZED_NOTE}"
    bound = _bind(title, params, args, kwargs)
    if isinstance(bound, str):
        return bound
    for param in params:
        if param.name not in bound or param.annotation is None:
            continue
        value = bound[param.name]
        accepts = _alternatives(param.annotation, scope)
        if any(value is u for u in unready or ()):
            got = _public_name(type(value))
            return f"{param.name}: expected {_expected(accepts)}, got {got}{_NOT_INITIALIZED_NOTE}"
        if not any(_passes(a, value) for a in accepts):
            return _wrong_value(param.name, accepts, value)
    shown = ", ".join(p.name for p in params)
    return f"{title}: the arguments do not match its parameters ({shown})"


def _passes(accepts: _Accepts, value: object) -> bool:
    """Whether ``value`` is what ``accepts`` describes; an object that raises when asked
    (its ``__getattr__``, its buffer) is not."""
    try:
        return accepts.test(value)
    except Exception:  # noqa: BLE001 - the user's object, asked about itself
        return False


def _title(scope: object, name: str, kind: str, args: tuple[Any, ...]) -> str:
    """The callable's public name, as the start of a message: ``PoolMemoryResource()``,
    ``Buffer.resize()``, ``set_current_device_resource()``."""
    if not isinstance(scope, type):
        return f"{name}()"
    owner = scope.__name__
    if kind == "method" and args and isinstance(args[0], scope):
        owner = type(args[0]).__name__
    return f"{owner}()" if name == "__init__" else f"{owner}.{name}()"


_parsed: dict[str, tuple[_Param, ...]] = {}  # by signature


def _parameters(signature: str) -> tuple[_Param, ...]:
    """The parameters of a signature as nanobind writes it (``def f(a: int = \\0) -> T``,
    defaults written ``\\N``, perhaps after decorator lines)."""
    if (known := _parsed.get(signature)) is not None:
        return known
    text = re.sub(r"\\\d+", "...", signature.strip())
    tree = ast.parse(text + ": ...")
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef)
    a = func.args
    params: list[_Param] = []
    positional = [*a.posonlyargs, *a.args]
    first_default = len(positional) - len(a.defaults)
    for i, arg in enumerate(positional):
        kind = "positional" if i < len(a.posonlyargs) else "either"
        default = _REQUIRED if i < first_default else ...
        params.append(_Param(arg.arg, kind, default, arg.annotation))
    if a.vararg is not None:
        params.append(_Param(a.vararg.arg, "*args", ..., a.vararg.annotation))
    for arg, value in zip(a.kwonlyargs, a.kw_defaults):
        params.append(_Param(arg.arg, "keyword", _REQUIRED if value is None else ..., arg.annotation))
    if a.kwarg is not None:
        params.append(_Param(a.kwarg.arg, "**kwargs", ..., a.kwarg.annotation))
    _parsed[signature] = tuple(params)
    return _parsed[signature]


def _names(names: list[str]) -> str:
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _bind(title: str, params: tuple[_Param, ...], args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> dict[str, Any] | str:
    """The arguments by parameter name, or the message of a call of the wrong shape."""
    positional = [p for p in params if p.kind in ("positional", "either")]
    star = any(p.kind == "*args" for p in params)
    star_star = any(p.kind == "**kwargs" for p in params)
    if len(args) > len(positional) and not star:
        keyword_only = [p.name for p in params if p.kind == "keyword"]
        if not positional:
            message = f"{title}: takes no positional arguments ({len(args)} given)"
        else:
            most = len(positional)
            message = (f"{title}: takes at most {most} positional argument"
                       f"{'' if most == 1 else 's'} ({len(args)} given)")
        if keyword_only:
            message += f"; pass {_names(keyword_only)} by keyword"
        return message
    bound = {p.name: v for p, v in zip(positional, args)}
    by_name = {p.name: p for p in params if p.kind in ("either", "keyword")}
    for key in kwargs:
        param = by_name.get(key)
        if param is None:
            if star_star:
                continue
            if any(p.name == key and p.kind == "positional" for p in params):
                return f"{title}: '{key}' is a positional-only argument; pass it without its name"
            message = f"{title}: unexpected keyword argument '{key}'"
            close = difflib.get_close_matches(key, list(by_name), n=1, cutoff=0.6)
            if close:
                return f"{message} (did you mean '{close[0]}'?)"
            if by_name:
                return f"{message} (its keyword arguments are {_names(list(by_name))})"
            return f"{message} (it takes no keyword arguments)"
        if key in bound:
            return f"{title}: got multiple values for argument '{key}'"
        bound[key] = kwargs[key]
    missing = [p.name for p in params
               if p.default is _REQUIRED and p.kind in ("positional", "either", "keyword")
               and p.name not in bound]
    if missing:
        s = "" if len(missing) == 1 else "s"
        return f"{title}: missing required argument{s} {_names(missing)}"
    return bound


# -- Annotations ----------------------------------------------------------------------------


def _article(text: str) -> str:
    return f"an {text}" if text[:1].lower() in "aeio" or text.startswith("nbrmm") else f"a {text}"


def _public_name(cls: type) -> str:
    """``nbrmm.mr.PoolMemoryResource`` (builtins without their module)."""
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    if module.startswith("nbrmm._"):  # published by no public module: the bare name
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def _class_accepts(cls: type) -> _Accepts:
    return _Accepts(_article(_public_name(cls)), lambda v: isinstance(v, cls), cls)


def _subclass_accepts(cls: type) -> _Accepts:
    def test(value: object) -> bool:
        return isinstance(value, type) and issubclass(value, cls)

    return _Accepts(f"a subclass of {_public_name(cls)}", test)


def _has(attr: str) -> Callable[[object], bool]:
    return lambda v: hasattr(v, attr)


def _is_int(value: object) -> bool:
    return not isinstance(value, bool) and hasattr(type(value), "__index__")


def _is_float(value: object) -> bool:
    return not isinstance(value, bool) and (hasattr(type(value), "__float__") or _is_int(value))


def _is_buffer(value: object) -> bool:
    try:
        memoryview(value).release()  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def _is_capsule(value: object) -> bool:
    return type(value).__name__ == "PyCapsule"


def _is_ndarray(value: object) -> bool:
    import numpy

    return isinstance(value, numpy.ndarray)


_ANYTHING = _Accepts("any object", lambda v: True)
_STREAM = _Accepts("an nbrmm.Stream or an object implementing __cuda_stream__",
                   _has("__cuda_stream__"))

# Names in signatures (last component of a dotted name) that are no class of nbrmm's.
_KNOWN: dict[str, _Accepts] = {
    "None": _Accepts("None", lambda v: v is None),
    "int": _Accepts("an int", _is_int),
    "float": _Accepts("a float", _is_float),
    "bool": _Accepts("a bool", lambda v: isinstance(v, bool)),
    "str": _Accepts("a str", lambda v: isinstance(v, str)),
    "bytes": _Accepts("a bytes object", lambda v: isinstance(v, bytes)),
    "tuple": _Accepts("a tuple", lambda v: isinstance(v, tuple)),
    "list": _Accepts("a list", lambda v: isinstance(v, list)),
    "dict": _Accepts("a dict", lambda v: isinstance(v, dict)),
    "object": _ANYTHING,
    "Any": _ANYTHING,
    "Callable": _Accepts("a callable", callable),
    "SupportsInt": _Accepts("an int", _has("__int__")),
    "SupportsIndex": _Accepts("an int", _is_int),
    "PathLike": _Accepts("an os.PathLike", lambda v: isinstance(v, os.PathLike)),
    "TracebackType": _Accepts("a traceback", lambda v: isinstance(v, types.TracebackType)),
    "BaseException": _Accepts("an exception", lambda v: isinstance(v, BaseException),
                              BaseException),
    "CapsuleType": _Accepts("a capsule", _is_capsule),
    "Buffer": _Accepts("a bytes-like object", _is_buffer),
    "NDArray": _Accepts("a NumPy array", _is_ndarray),
    "CudaStreamLike": _STREAM,
    "CudaArrayLike": _Accepts("an object implementing __cuda_array_interface__",
                              _has("__cuda_array_interface__")),
    "HasPoolHandle": _Accepts("an object with pool_handle()", _has("pool_handle")),
    "HostBufferT": _Accepts("a writable bytes-like object", _is_buffer),
}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _alternatives(node: ast.expr, scope: object) -> list[_Accepts]:
    """What an annotation accepts, as alternatives (``int | str | None``: three)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _alternatives(node.left, scope) + _alternatives(node.right, scope)
    if isinstance(node, ast.Constant):
        return [_KNOWN["None"]] if node.value is None else [_ANYTHING]
    if isinstance(node, ast.Subscript):
        base = _dotted(node.value)
        if base in ("type", "typing.Type"):
            classes = [c.cls for c in _alternatives(node.slice, scope) if c.cls is not None]
            return [_subclass_accepts(c) for c in classes] or [_ANYTHING]
        return _alternatives(node.value, scope)
    name = _dotted(node)
    if name is None:
        return [_ANYTHING]
    last = name.rsplit(".", 1)[-1]
    if last == "Self" and isinstance(scope, type):
        return [_class_accepts(scope)]
    if last in _KNOWN:
        return [_KNOWN[last]]
    cls = _resolve(name)
    return [_class_accepts(cls)] if isinstance(cls, type) else [_ANYTHING]


def _resolve(name: str) -> object:
    """The object a name of a signature stands for (``DeviceMemoryResource`` of the
    extension, ``nbrmm.logger.level_enum``), or None."""
    from nbrmm import _nbrmm

    if "." not in name:
        return getattr(_nbrmm, name, None)
    module, _, attr = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr, None)
    except ImportError:
        return None


def _expected(accepts: list[_Accepts]) -> str:
    texts = list(dict.fromkeys(a.text for a in accepts))
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " or " + texts[-1]


def _wrong_value(param: str, accepts: list[_Accepts], value: object) -> str:
    expected = _expected(accepts)
    if value is None:
        return f"{param}: expected {expected}, got None"
    if isinstance(value, type):
        got = f"the class {value.__qualname__}"
        if any(a.cls is not None and issubclass(value, a.cls) for a in accepts):
            got += f"; pass an instance, e.g. {value.__qualname__}(...)"
        return f"{param}: expected {expected}, got {got}"
    return f"{param}: expected {expected}, got {_public_name(type(value))}"
