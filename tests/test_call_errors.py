"""Calls that nbrmm's bindings refuse say what is wrong in Python's words.

The test walks every public callable that the extension's stubs declare (``_nbrmm.pyi``,
and each class in the stub of the module that publishes it): its functions, and the
``__init__``, methods and static methods of its classes. Each is
called with the mistakes a user makes: a required argument left out, a misspelt keyword,
``None`` where the annotation has no None, an argument of the wrong type, and a class
where an instance of it is expected. Every such call must raise TypeError (or the
ValueError nbrmm documents for the argument) with a message that names the parameter at
fault (or, for a call of the wrong shape, the callable) and carries no text of the binding
layer. A callable added to the extension is walked as soon as the stub declares it.
"""

from __future__ import annotations

import ast
import ctypes
import enum
import pathlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import nbrmm
import nbrmm.mr
from helpers import HostHeap, extension_declarations, extension_stubs
from nbrmm import _nbrmm
from nbrmm._call_errors import CATCH_ALL_NOTE, is_catch_all

HAVE_GPU = nbrmm.get_device_count() > 0

#: Text of the binding layer that no message may carry.
FORBIDDEN = ("incompatible function arguments", "Invoked with", "nanobind", "nb_type",
             "nbrmm._nbrmm", "std::")

#: What a refused argument may raise besides TypeError: rmm raises ValueError for some
#: (a pool handle, an array without ``__cuda_array_interface__``), nbrmm's range errors.
ARGUMENT_ERRORS = (TypeError, ValueError)


@dataclass
class Param:
    name: str
    annotation: str  # as the stub writes it
    required: bool
    positional: bool  # may be passed by position
    keyword: bool  # may be passed by name


@dataclass
class PublicCallable:
    owner: str | None  # the class, or None for a function of the module
    name: str
    kind: str  # "function", "method", "staticmethod" or "init"
    params: list[Param] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.owner}.{self.name}" if self.owner else self.name

    @property
    def title(self) -> str:
        if self.kind == "init":
            return f"{self.owner}()"
        return f"{self.id}()"


def _params(node: ast.FunctionDef, skip_self: bool) -> list[Param]:
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    first_default = len(positional) - len(a.defaults)
    params = [
        Param(arg.arg, ast.unparse(arg.annotation) if arg.annotation else "",
              i < first_default, True, i >= len(a.posonlyargs))
        for i, arg in enumerate(positional)
    ]
    params += [
        Param(arg.arg, ast.unparse(arg.annotation) if arg.annotation else "", d is None,
              False, True)
        for arg, d in zip(a.kwonlyargs, a.kw_defaults)
    ]
    return params[1:] if skip_self else params


def _is_plain_class(name: str) -> bool:
    cls = getattr(_nbrmm, name)
    return not issubclass(cls, (enum.Enum, BaseException))


def public_callables() -> list[PublicCallable]:
    """Every public callable of the stubs: functions not starting with ``_``, and the
    ``__init__``, public methods and static methods of its public classes."""
    found = []
    for node in extension_declarations():
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            found.append(PublicCallable(None, node.name, "function", _params(node, False)))
        elif (isinstance(node, ast.ClassDef) and not node.name.startswith("_")
              and _is_plain_class(node.name)):
            for item in node.body:
                if not isinstance(item, ast.FunctionDef):
                    continue
                if item.name.startswith("_") and item.name != "__init__":
                    continue
                decorators = {ast.unparse(d) for d in item.decorator_list}
                if "property" in decorators:
                    continue
                kind = ("init" if item.name == "__init__"
                        else "staticmethod" if "staticmethod" in decorators else "method")
                found.append(PublicCallable(node.name, item.name, kind,
                                            _params(item, kind != "staticmethod")))
    return found


CALLABLES = public_callables()

# -- Objects to call with ---------------------------------------------------------------

_heap = HostHeap()
HOST = _heap.resource()
_libc = ctypes.CDLL(None)


def _tmp_log() -> str:
    import tempfile

    return str(pathlib.Path(tempfile.mkdtemp()) / "log.csv")


#: An instance of each class whose methods the test calls; None: only with a GPU.
INSTANCES: dict[str, Callable[[], Any] | None] = {
    "Stream": lambda: nbrmm.DEFAULT_STREAM,
    "CudaStreamPool": (lambda: nbrmm.CudaStreamPool(2)) if HAVE_GPU else None,
    "DeviceMemoryResource": lambda: HOST,
    "UpstreamResourceAdaptor": lambda: nbrmm.mr.StatisticsResourceAdaptor(HOST),
    "CudaMemoryResource": nbrmm.mr.CudaMemoryResource,
    "CallbackMemoryResource": lambda: HOST,
    "ManagedMemoryResource": nbrmm.mr.ManagedMemoryResource,
    "SystemMemoryResource": nbrmm.mr.SystemMemoryResource if HAVE_GPU else None,
    "SamHeadroomMemoryResource": (lambda: nbrmm.mr.SamHeadroomMemoryResource(0)) if HAVE_GPU else None,
    "PinnedHostMemoryResource": nbrmm.mr.PinnedHostMemoryResource,
    "CudaAsyncMemoryResource": nbrmm.mr.CudaAsyncMemoryResource if HAVE_GPU else None,
    "CudaAsyncViewMemoryResource": (
        (lambda: nbrmm.mr.CudaAsyncViewMemoryResource(nbrmm.mr.CudaAsyncMemoryResource()))
        if HAVE_GPU else None),
    "CudaAsyncManagedMemoryResource": (
        (lambda: nbrmm.mr.experimental.CudaAsyncManagedMemoryResource()) if HAVE_GPU else None),
    "PoolMemoryResource": lambda: nbrmm.mr.PoolMemoryResource(HOST, initial_pool_size=0),
    "ArenaMemoryResource": (
        (lambda: nbrmm.mr.ArenaMemoryResource(nbrmm.mr.CudaMemoryResource(), arena_size="1MiB"))
        if HAVE_GPU else None),
    "FixedSizeMemoryResource": lambda: nbrmm.mr.FixedSizeMemoryResource(HOST, 256, 1),
    "BinningMemoryResource": lambda: nbrmm.mr.BinningMemoryResource(HOST),
    "LimitingResourceAdaptor": lambda: nbrmm.mr.LimitingResourceAdaptor(HOST, 1 << 20),
    "LoggingResourceAdaptor": lambda: nbrmm.mr.LoggingResourceAdaptor(HOST, _tmp_log()),
    "StatisticsResourceAdaptor": lambda: nbrmm.mr.StatisticsResourceAdaptor(HOST),
    "TrackingResourceAdaptor": lambda: nbrmm.mr.TrackingResourceAdaptor(HOST),
    "FailureCallbackResourceAdaptor": lambda: nbrmm.mr.FailureCallbackResourceAdaptor(
        HOST, lambda n: False),
    "PrefetchResourceAdaptor": lambda: nbrmm.mr.PrefetchResourceAdaptor(HOST),
    "AlignedResourceAdaptor": lambda: nbrmm.mr.AlignedResourceAdaptor(HOST),
    "ThreadSafeResourceAdaptor": lambda: nbrmm.mr.ThreadSafeResourceAdaptor(HOST),
    "Buffer": lambda: nbrmm.Buffer(8, mr=HOST),
    "DeviceBuffer": lambda: nbrmm.DeviceBuffer(size=8, mr=HOST),
}


def _gpu_only(make: Callable[[], Any]) -> Callable[[], Any]:
    def made() -> Any:
        if not HAVE_GPU:
            pytest.skip("a valid argument needs a GPU (its gpu-marked run covers it)")
        return make()

    return made

#: Valid arguments by parameter name (``(callable id, name)`` first), so that a call
#: that passes a bad value for one parameter is wrong in that parameter alone.
VALID_BY_CALL: dict[tuple[str, str], Callable[[], Any]] = {
    ("CallbackMemoryResource.__init__", "allocate_func"): lambda: _heap.allocate,
    ("CallbackMemoryResource.__init__", "deallocate_func"): lambda: _heap.deallocate,
    ("CudaAsyncViewMemoryResource.__init__", "pool_handle"):
        _gpu_only(nbrmm.mr.CudaAsyncMemoryResource),
    ("DeviceMemoryResource.deallocate", "ptr"): lambda: 0,
    ("DeviceMemoryResource.deallocate", "nbytes"): lambda: 0,
}
VALID_BY_NAME: dict[str, Callable[[], Any]] = {
    "device": nbrmm.get_current_device,
    "mr": lambda: HOST,
    "upstream_mr": lambda: HOST,
    "bin_resource": lambda: HOST,
    "stream": lambda: nbrmm.DEFAULT_STREAM,
    "callback": lambda: (lambda nbytes: False),
    "level": lambda: nbrmm.level_enum.info,
    "allocation_limit": lambda: 1 << 20,
    "allocation_size": lambda: 1024,
    "headroom": lambda: 0,
    "log_file_name": _tmp_log,
    "b": lambda: b"12345678",
    "hb": lambda: bytearray(8),
    "ary": lambda: bytearray(8),
    "cuda_ary": lambda: nbrmm.Buffer(8, mr=HOST),
    "db": lambda: 0,
    "d_src": lambda: 0,
    "d_dst": lambda: 0,
    "count": lambda: 0,
    "new_size": lambda: 8,
    "new_capacity": lambda: 8,
    "nbytes": lambda: 256,
    "memo": dict,
}


def valid(c: PublicCallable, p: Param) -> Any:
    maker = VALID_BY_CALL.get((f"{c.owner}.{c.name}", p.name)) or VALID_BY_NAME.get(p.name)
    assert maker is not None, f"add a valid value for {c.id}'s parameter {p.name!r}"
    return maker()


def target(c: PublicCallable) -> tuple[Callable[..., Any], str]:
    """What to call (the function, the class for __init__, the bound method of an
    instance or the static method) and how messages name it: ``PoolMemoryResource()``,
    ``Buffer.resize()``, by the class of the instance for an inherited method."""
    if c.owner is None:
        return getattr(_nbrmm, c.name), c.title
    cls = getattr(_nbrmm, c.owner)
    if c.kind == "init":  # arguments are checked before anything needs a GPU
        return cls, c.title
    if c.kind == "staticmethod":
        return getattr(cls, c.name), c.title
    assert c.owner in INSTANCES, f"add an instance of {c.owner} to INSTANCES"
    make = INSTANCES[c.owner]
    if make is None:
        pytest.skip(f"an instance of {c.owner} needs a GPU (its gpu-marked run covers it)")
    instance = make()
    return getattr(instance, c.name), f"{type(instance).__name__}.{c.name}()"


def check(exc: BaseException, *names: str) -> str:
    """The message of ``exc``, asserted to name each of ``names`` and to carry no text of
    the binding layer."""
    message = str(exc)
    for bad in FORBIDDEN:
        assert bad not in message, f"{message!r} has {bad!r}"
    for name in names:
        assert name in message, f"{message!r} does not name {name!r}"
    return message


def gpu_variants(callables: list[PublicCallable]) -> list[Any]:
    """Each callable once, and once more marked ``gpu`` where it is skipped without one."""
    params = []
    for c in callables:
        params.append(pytest.param(c, id=c.id))
        needs_gpu = (c.id == "CudaAsyncViewMemoryResource.__init__"
                     or c.kind == "method" and INSTANCES.get(c.owner, 0) is None)
        if needs_gpu:
            params.append(pytest.param(c, id=f"{c.id}-gpu", marks=pytest.mark.gpu))
    return params


def with_required(c: PublicCallable, **override: Any) -> dict[str, Any]:
    """Valid values for every required parameter of ``c``, by name, then ``override``."""
    kwargs = {p.name: valid(c, p) for p in c.params if p.required and p.name not in override}
    return kwargs | override


# -- The walk -------------------------------------------------------------------------------


def test_the_walk_covers_every_public_callable_of_the_extension(capsys):
    """The stub and the extension agree on the public callables, each has the catch-all
    that reports refused calls, and the walk is not empty."""
    runtime = set()
    for name, obj in vars(_nbrmm).items():
        if name.startswith("_"):
            continue
        if hasattr(obj, "__nb_signature__") and not isinstance(obj, type):
            runtime.add(name)
            assert is_catch_all(obj.__nb_signature__[-1][0]), name
        elif isinstance(obj, type) and _is_plain_class(name):
            for attr, member in vars(obj).items():
                if (attr.startswith("_") and attr != "__init__") or not hasattr(member, "__nb_signature__"):
                    continue
                runtime.add(f"{name}.{attr}")
                assert is_catch_all(member.__nb_signature__[-1][0]), f"{name}.{attr}"
    walked = {c.id for c in CALLABLES}
    assert walked == runtime
    assert len(CALLABLES) >= 80
    with capsys.disabled():
        print(f"\ntest_call_errors: {len(CALLABLES)} public callables of the extension walked")


@pytest.mark.parametrize("c", gpu_variants([c for c in CALLABLES if any(p.required for p in c.params)]))
def test_a_missing_argument_is_named(c):
    call, title = target(c)
    with pytest.raises(TypeError) as info:
        call()
    missing = [p.name for p in c.params if p.required]
    message = check(info.value, title, "missing required argument", *missing)
    assert message.startswith(title), message


@pytest.mark.parametrize("c", gpu_variants(CALLABLES))
def test_an_unknown_keyword_is_named_with_the_closest_one(c):
    call, title = target(c)
    keywords = [p for p in c.params if p.keyword]
    if not keywords:
        with pytest.raises(TypeError) as info:
            call(bogus=1)
        check(info.value, title, "unexpected keyword argument 'bogus'")
        return
    for p in keywords:
        misspelt = p.name + p.name[-1]  # "mr" -> "mrr"
        with pytest.raises(TypeError) as info:
            call(**with_required(c), **{misspelt: 1})
        check(info.value, title, f"unexpected keyword argument '{misspelt}'",
              f"did you mean '{p.name}'?")


@pytest.mark.parametrize("c", gpu_variants(CALLABLES))
def test_too_many_positional_arguments_are_counted(c):
    call, title = target(c)
    most = sum(p.positional for p in c.params)
    with pytest.raises(TypeError) as info:
        call(*([object()] * (most + 2)))
    message = check(info.value, title, f"({most + 2} given)")
    assert message.startswith(title), message


@pytest.mark.parametrize("c", gpu_variants([c for c in CALLABLES if c.params]))
def test_none_where_it_is_not_allowed_is_named(c):
    params = [p for p in c.params if p.annotation and "None" not in p.annotation.split(" | ")
              and p.annotation not in ("object", "typing.Any")]
    if not params:
        pytest.skip("every parameter accepts None")
    for p in params:
        with pytest.raises(ARGUMENT_ERRORS) as info:
            target(c)[0](**with_required(c, **{p.name: None}))
        message = check(info.value, p.name)
        assert message.startswith(f"{p.name}:"), message


@pytest.mark.parametrize("c", gpu_variants([c for c in CALLABLES if c.params]))
def test_a_wrong_type_is_named(c):
    params = [p for p in c.params if p.annotation not in ("object", "typing.Any", "")]
    if not params:
        pytest.skip("every parameter accepts any object")
    for p in params:
        with pytest.raises(ARGUMENT_ERRORS) as info:
            target(c)[0](**with_required(c, **{p.name: object()}))
        message = check(info.value, p.name)
        assert message.startswith(f"{p.name}:"), message


def _nbrmm_class(annotation: str) -> type | None:
    """The first nbrmm class among the alternatives of an annotation
    (``DeviceMemoryResource | None``; not inside brackets, as in ``Callable[[int, Stream], int]``)."""
    for part in annotation.split(" | "):
        name = part.rsplit(".", 1)[-1]
        if name == "CudaStreamLike":
            return nbrmm.Stream
        cls = getattr(_nbrmm, name, None)
        if isinstance(cls, type) and not issubclass(cls, BaseException):
            return cls
    return None


@pytest.mark.parametrize("c", gpu_variants([c for c in CALLABLES if any(
    _nbrmm_class(p.annotation) for p in c.params)]))
def test_a_class_where_an_instance_is_expected_is_named(c):
    for p in c.params:
        cls = _nbrmm_class(p.annotation)
        if cls is None:
            continue
        given = nbrmm.mr.CudaMemoryResource if cls is nbrmm.mr.DeviceMemoryResource else cls
        with pytest.raises(ARGUMENT_ERRORS) as info:
            target(c)[0](**with_required(c, **{p.name: given}))
        message = check(info.value, p.name, f"the class {given.__name__}")
        assert message.startswith(f"{p.name}:"), message
        assert "pass an instance" in message or "pass a member" in message, message


@pytest.mark.parametrize("c", [pytest.param(c, id=c.id) for c in CALLABLES if c.kind == "method"])
def test_a_method_called_on_the_wrong_object_names_self(c):
    method = getattr(getattr(_nbrmm, c.owner), c.name)
    with pytest.raises(TypeError) as info:
        method(object())
    message = check(info.value, "self", c.owner)
    assert message.startswith("self:"), message
    with pytest.raises(TypeError) as info:
        method()
    check(info.value, "missing required argument 'self'")


NOT_INITIALIZED = ("that is not initialized (its __init__ did not run; a subclass's __init__ "
                   "must call super().__init__())")


def uninitialized(cls: type) -> Any:
    """An instance of ``cls`` whose ``__init__`` never ran."""
    return cls.__new__(cls)


@pytest.mark.parametrize("c", [pytest.param(c, id=c.id) for c in CALLABLES if c.kind == "method"])
def test_a_method_called_on_an_uninitialized_instance_says_so(c):
    cls = getattr(_nbrmm, c.owner)
    method = getattr(cls, c.name)
    with pytest.raises(TypeError) as info:
        method(uninitialized(cls), **with_required(c))
    message = check(info.value, NOT_INITIALIZED)
    assert message.startswith((f"{c.title}: called on ", "self: expected ")), message


class Forgetful(nbrmm.mr.DeviceMemoryResource):
    """A resource whose __init__ forgets to call DeviceMemoryResource's."""

    def __init__(self) -> None:
        pass


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: nbrmm.Buffer(8, mr=Forgetful()),
         f"mr: expected an nbrmm.mr.DeviceMemoryResource, got {__name__}.Forgetful "
         f"{NOT_INITIALIZED}"),
        (lambda: nbrmm.mr.set_current_device_resource(Forgetful()),
         f"mr: expected an nbrmm.mr.DeviceMemoryResource, got {__name__}.Forgetful "
         f"{NOT_INITIALIZED}"),
        (lambda: nbrmm.mr.StatisticsResourceAdaptor(Forgetful()),
         f"upstream_mr: expected an nbrmm.mr.DeviceMemoryResource, got {__name__}.Forgetful "
         f"{NOT_INITIALIZED}"),
        (lambda: Forgetful().allocate(8),
         f"self: expected an nbrmm.mr.DeviceMemoryResource, got {__name__}.Forgetful "
         f"{NOT_INITIALIZED}"),
        (lambda: nbrmm.Buffer(8, mr=HOST, stream=uninitialized(nbrmm.Stream)),
         "stream: expected an nbrmm.Stream or an object implementing __cuda_stream__, got "
         f"nbrmm.Stream {NOT_INITIALIZED}"),
        (lambda: HOST.allocate(8, uninitialized(nbrmm.Stream)),
         "stream: expected an nbrmm.Stream or an object implementing __cuda_stream__, got "
         f"nbrmm.Stream {NOT_INITIALIZED}"),
        (lambda: nbrmm.Stream(uninitialized(nbrmm.Stream)),
         "obj: expected an nbrmm.Stream or an object implementing __cuda_stream__, got "
         f"nbrmm.Stream {NOT_INITIALIZED}"),
        (lambda: nbrmm.CudaStreamPool.__new__(nbrmm.CudaStreamPool).get_stream(),
         f"CudaStreamPool.get_stream(): called on an nbrmm.CudaStreamPool {NOT_INITIALIZED}"),
        (lambda: uninitialized(nbrmm.mr.CudaMemoryResource).__nbrmm_resource__(),
         "CudaMemoryResource.__nbrmm_resource__(): called on an nbrmm.mr.CudaMemoryResource "
         f"{NOT_INITIALIZED}"),
        (lambda: Forgetful().device,
         f"Forgetful.device: read from a {__name__}.Forgetful {NOT_INITIALIZED}"),
        (lambda: uninitialized(nbrmm.Buffer).__dlpack__(),
         f"Buffer.__dlpack__(): called on an nbrmm.Buffer {NOT_INITIALIZED}"),
        (lambda: uninitialized(nbrmm.Stream).synchronize(),
         f"Stream.synchronize(): called on an nbrmm.Stream {NOT_INITIALIZED}"),
        (lambda: uninitialized(nbrmm.Buffer).tobytes(),
         f"Buffer.tobytes(): called on an nbrmm.Buffer {NOT_INITIALIZED}"),
    ],
)
def test_an_uninitialized_argument_is_named(call, message):
    """An instance whose __init__ never ran (a subclass forgetting to call the base's) is
    refused with a message that says so, never read as a default stream or resource."""
    with pytest.raises(TypeError) as info:
        call()
    assert str(info.value) == message


def _properties() -> list[Any]:
    """(class, name) of every property of the extension's public classes."""
    found = []
    for name in dir(_nbrmm):
        cls = getattr(_nbrmm, name)
        if name.startswith("_") or not isinstance(cls, type) or issubclass(cls, enum.Enum):
            continue
        for attr, member in vars(cls).items():
            public = not attr.startswith("_") or attr == "__cuda_array_interface__"
            if isinstance(member, property) and public:
                found.append(pytest.param(cls, attr, id=f"{cls.__name__}.{attr}"))
    return found


@pytest.mark.parametrize(("cls", "name"), _properties())
def test_a_property_read_from_an_uninitialized_instance_says_so(cls, name):
    """nbrmm's message, and no warning of the binding layer (warnings are errors here)."""
    with pytest.raises(TypeError) as info:
        getattr(uninitialized(cls), name)
    message = check(info.value)
    assert message.startswith(f"{cls.__name__}.{name}: read from an "), message
    assert message.endswith(NOT_INITIALIZED), message


def test_the_property_walk_is_not_empty():
    names = {p.id for p in _properties()}
    assert {"Buffer.size", "DeviceMemoryResource.device", "Stream.handle",
            "UpstreamResourceAdaptor.upstream_mr", "Buffer.__cuda_array_interface__"} <= names


def test_an_uninitialized_instance_is_no_value():
    """Compared, printed or read as an array, it is what it is: not initialized."""
    bare = uninitialized(nbrmm.Stream)
    assert bare != nbrmm.DEFAULT_STREAM
    assert nbrmm.DEFAULT_STREAM != bare
    assert repr(uninitialized(nbrmm.Buffer)) == "<nbrmm.Buffer (not initialized)>"
    assert repr(Forgetful()) == f"<{__name__}.Forgetful (not initialized)>"

    class ForgetfulStream(nbrmm.Stream):
        def __init__(self) -> None:
            pass

    class ForgetfulBuffer(nbrmm.Buffer):
        def __init__(self) -> None:
            pass

    assert repr(ForgetfulStream()) == f"<{__name__}.ForgetfulStream (not initialized)>"
    assert repr(ForgetfulBuffer()) == f"<{__name__}.ForgetfulBuffer (not initialized)>"
    closed = nbrmm.DeviceBuffer(size=8, mr=HOST)
    closed.close()
    assert repr(closed) == "<nbrmm.DeviceBuffer (closed)>"
    with pytest.raises(ValueError) as info:
        nbrmm.Buffer(8, mr=HOST).copy_from_device(uninitialized(nbrmm.Buffer))
    assert str(info.value).endswith(f"got nbrmm.Buffer {NOT_INITIALIZED}")


@pytest.mark.parametrize(
    ("call", "method"),
    [
        (lambda b: len(b), "Buffer.__len__()"),
        (lambda b: bytes(b), "Buffer.__bytes__()"),
        (lambda b: b.__sizeof__(), "Buffer.__sizeof__()"),
        (lambda b: b.__dlpack_device__(), "Buffer.__dlpack_device__()"),
        (lambda b: b.__deepcopy__({}), "Buffer.copy()"),
        (lambda b: b.__enter__(), "Buffer.__enter__()"),
    ],
)
def test_special_methods_of_an_uninitialized_buffer_say_so(call, method):
    with pytest.raises(TypeError) as info:
        call(uninitialized(nbrmm.Buffer))
    assert str(info.value) == f"{method}: called on an nbrmm.Buffer {NOT_INITIALIZED}"


def test_special_methods_of_other_uninitialized_objects_say_so():
    stream = uninitialized(nbrmm.Stream)
    assert repr(stream) == "<nbrmm.Stream (not initialized)>"
    for call, method in ((hash, "Stream.__hash__()"),
                         (lambda s: s.__cuda_stream__(), "Stream.__cuda_stream__()")):
        with pytest.raises(TypeError) as info:
            call(stream)
        assert str(info.value) == f"{method}: called on an nbrmm.Stream {NOT_INITIALIZED}"
    with pytest.raises(TypeError) as info:
        hash(Forgetful())
    assert str(info.value) == (f"Forgetful.__hash__(): called on a {__name__}.Forgetful "
                               f"{NOT_INITIALIZED}")
    with pytest.raises(TypeError) as info:
        memoryview(uninitialized(nbrmm.Buffer))
    assert str(info.value) == f"the buffer protocol: got an nbrmm.Buffer {NOT_INITIALIZED}"
    # Comparisons still answer NotImplemented, so == falls back to identity.
    assert nbrmm.DEFAULT_STREAM != 5 and not nbrmm.DEFAULT_STREAM == "x"


ALREADY_RUNNING = ("__init__: it is already running for this object (called again from a "
                   "callback it runs, or from another thread); an object is initialized once")


def test_init_called_again_from_a_callback_is_refused_and_leaks_nothing():
    """A resource callback that re-initializes the object whose __init__ is allocating
    would construct into the same storage; it is refused, and every byte comes back."""
    heap = HostHeap()
    inner: list[str] = []  # (messages: a traceback would keep the object alive)
    being_made: list[Any] = []

    def allocate(nbytes, stream):
        if being_made and not inner:
            try:
                nbrmm.Buffer.__init__(being_made[0], 32, mr=heap.resource())
            except TypeError as error:
                inner.append(str(error))
        return heap.allocate(nbytes, stream)

    reentrant = nbrmm.mr.CallbackMemoryResource(allocate, heap.deallocate)

    class Made(nbrmm.Buffer):
        def __init__(self):
            being_made.append(self)
            super().__init__(16, mr=reentrant)

    buffer = Made()
    assert inner == [ALREADY_RUNNING]
    assert buffer.size == 16
    being_made.clear()
    del buffer
    assert heap.live == {}

    # The same for a resource whose constructor allocates from a Python upstream.
    inner.clear()

    class Pool(nbrmm.mr.PoolMemoryResource):
        def __init__(self):
            being_made.append(self)
            super().__init__(reentrant, initial_pool_size=1 << 16)

    def allocate_pool(nbytes, stream):
        if being_made and not inner:
            try:
                nbrmm.mr.PoolMemoryResource.__init__(being_made[0], heap.resource(), 1 << 16)
            except TypeError as error:
                inner.append(str(error))
        return heap.allocate(nbytes, stream)

    reentrant = nbrmm.mr.CallbackMemoryResource(allocate_pool, heap.deallocate)
    pool = Pool()
    assert inner == [ALREADY_RUNNING]
    being_made.clear()
    del pool
    assert heap.live == {}


def test_init_called_from_another_thread_while_it_runs_is_refused():
    import threading

    heap = HostHeap()
    entered, release = threading.Event(), threading.Event()

    def allocate(nbytes, stream):
        entered.set()
        release.wait(10)  # (waits without the GIL)
        return heap.allocate(nbytes, stream)

    slow = nbrmm.mr.CallbackMemoryResource(allocate, heap.deallocate)
    buffer = nbrmm.Buffer.__new__(nbrmm.Buffer)
    worker = threading.Thread(target=nbrmm.Buffer.__init__, args=(buffer, 8), kwargs={"mr": slow})
    worker.start()
    try:
        assert entered.wait(10)
        with pytest.raises(TypeError) as info:
            nbrmm.Buffer.__init__(buffer, 16, mr=heap.resource())
        assert str(info.value) == ALREADY_RUNNING
    finally:
        release.set()
        worker.join()
    assert buffer.size == 8
    del buffer
    assert heap.live == {}


def test_a_refused_call_late_at_exit_still_raises_type_error(tmp_path):
    """The catch-all's message module may be gone with the import system at exit."""
    import subprocess
    import sys

    script = tmp_path / "late.py"
    script.write_text(
        "import nbrmm\n"
        "class Late:\n"
        "    def __del__(self):\n"
        "        try:\n"
        "            nbrmm.Buffer.close(5)\n"
        "        except Exception as error:\n"
        "            print(type(error).__name__, error)\n"
        "late = Late()\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("TypeError "), done.stdout + done.stderr
    assert "ImportError" not in done.stdout + done.stderr


# -- Examples and conversions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: nbrmm.mr.PoolMemoryResource(),
         "PoolMemoryResource(): missing required argument 'upstream_mr'"),
        (lambda: nbrmm.mr.PoolMemoryResource(upstream=HOST),
         "PoolMemoryResource(): unexpected keyword argument 'upstream' (did you mean 'upstream_mr'?)"),
        (lambda: nbrmm.mr.set_current_device_resource(None),
         "mr: expected an nbrmm.mr.DeviceMemoryResource, got None"),
        (lambda: nbrmm.mr.CallbackMemoryResource(print),
         "CallbackMemoryResource(): missing required argument 'deallocate_func'"),
        (lambda: nbrmm.mr.StatisticsResourceAdaptor(None),
         "upstream_mr: expected an nbrmm.mr.DeviceMemoryResource, got None"),
        (lambda: nbrmm.Buffer(10, mrr=None),
         "Buffer(): unexpected keyword argument 'mrr' (did you mean 'mr'?)"),
        (lambda: nbrmm.mr.PoolMemoryResource(nbrmm.mr.CudaMemoryResource),
         "upstream_mr: expected an nbrmm.mr.DeviceMemoryResource, got the class "
         "CudaMemoryResource; pass an instance, e.g. CudaMemoryResource(...)"),
        (lambda: nbrmm.DeviceBuffer(8),
         "DeviceBuffer(): takes no positional arguments (1 given); pass 'ptr', 'size', "
         "'stream' and 'mr' by keyword"),
        (lambda: nbrmm.Buffer.resize(8, 16), "self: expected an nbrmm.Buffer, got int"),
        (lambda: nbrmm.get_device_count(1), "get_device_count(): takes no positional arguments (1 given)"),
        (lambda: nbrmm.set_logging_level(nbrmm.level_enum),
         "level: must be an instance of level_enum, got the class level_enum; pass a member, "
         "e.g. level_enum.trace"),
        (lambda: nbrmm.Buffer(8, mr=HOST, stream=nbrmm.Stream),
         "stream: expected an nbrmm.Stream or an object implementing __cuda_stream__, got the "
         "class Stream; pass an instance, e.g. Stream(...)"),
    ],
)
def test_messages(call, message):
    with pytest.raises(TypeError) as info:
        call()
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: nbrmm.set_current_device(2**64), nbrmm.ArgumentRangeError,
         "device: 18446744073709551616 is out of range for a device id"),
        (lambda: nbrmm.mr.set_per_device_resource(-2, HOST), ValueError,
         "device: device -2 does not exist"),
        (lambda: nbrmm.mr.get_per_device_resource(-2), ValueError, "device: device -2 does not exist"),
        (lambda: nbrmm.mr.reset_per_device_resource(-2), ValueError,
         "device: device -2 does not exist"),
        (lambda: nbrmm.get_device_info(-2), ValueError, "device: device -2 does not exist"),
        (lambda: nbrmm.available_device_memory(-2), ValueError, "device: device -2 does not exist"),
        (lambda: nbrmm.set_current_device(-2), ValueError, "device: device -2 does not exist"),
        (lambda: nbrmm.mr.BinningMemoryResource(HOST, 2**64), nbrmm.ArgumentRangeError,
         "min_size_exponent: 18446744073709551616 is out of range for an exponent"),
        (lambda: nbrmm.mr.BinningMemoryResource(HOST, -1, "x"), TypeError,
         "max_size_exponent: expected an int, got str"),
        (lambda: nbrmm.Buffer(8, mr=HOST).prefetch(device=-2), ValueError,
         "device: device -2 does not exist"),
        (lambda: nbrmm.Buffer(8, mr=HOST).prefetch(device="0"), TypeError,
         "device: expected an int, got str"),
    ],
)
def test_device_numbers_and_other_ints_name_their_parameter(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    check(info.value)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.skipif(HAVE_GPU, reason="checks the behaviour without a GPU")
def test_without_a_gpu_every_device_number_says_so():
    for call in (lambda: nbrmm.set_current_device(0), lambda: nbrmm.get_device_info(0),
                 lambda: nbrmm.mr.set_per_device_resource(0, HOST),
                 lambda: nbrmm.available_device_memory(1)):
        with pytest.raises(nbrmm.CudaUnavailableError) as info:
            call()
        assert str(info.value).startswith("device: device "), str(info.value)
        assert "needs a GPU, and there is no usable CUDA driver or GPU" in str(info.value)


class IntLike:
    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_calls_that_need_conversions_still_work():
    heap = HostHeap()
    host = heap.resource()
    assert nbrmm.Buffer(np.int64(8), mr=host).size == 8
    assert nbrmm.Buffer(IntLike(16), mr=host).size == 16
    assert nbrmm.mr.LimitingResourceAdaptor(host, np.uint64(1024)).get_allocation_limit() == 1024
    binning = nbrmm.mr.BinningMemoryResource(host, np.int32(-1), IntLike(-1))
    binning.add_bin(np.int64(512))
    del binning
    assert nbrmm.mr.FixedSizeMemoryResource(host, np.int64(256), IntLike(2)).get_block_size() == 256
    device = nbrmm.get_current_device()
    assert nbrmm.mr.get_per_device_resource(np.int64(device)) is not None
    assert nbrmm.mr.get_per_device_resource(IntLike(device)) is not None
    buf = nbrmm.Buffer(8, mr=host)
    buf.resize(np.int16(4))
    assert buf.size == 4
    del buf
    ptr = host.allocate(np.int64(100))
    host.deallocate(ptr, IntLike(100))
    nbrmm.set_logging_level(nbrmm.get_logging_level())
    assert heap.bytes_in_use == 0


def test_the_catch_all_is_left_out_of_the_stub_and_help():
    for path in extension_stubs():
        stub = path.read_text()
        assert CATCH_ALL_NOTE not in stub
        assert "@overload" not in stub
    # __doc__: the real signature, the catch-all's line, then the real docstring alone.
    doc = nbrmm.Buffer.resize.__doc__.splitlines()
    assert doc[0].startswith("resize(self, new_size: int | str")
    assert doc[1:4] == [f"resize{CATCH_ALL_NOTE}", "",
                        "Resize to ``new_size`` bytes on the buffer's own resource, keeping the prefix."]
    assert "Overloaded function" not in nbrmm.Buffer.resize.__doc__
    init = nbrmm.mr.PoolMemoryResource.__init__.__doc__.splitlines()
    assert init[0].startswith("__init__(self, upstream_mr: DeviceMemoryResource")
    assert init[1:] == [f"__init__{CATCH_ALL_NOTE}"]
