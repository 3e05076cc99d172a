"""The checked-in stubs match what scripts/stubgen.py makes of the built extension (with
nanobind's stubgen) and of the modules that publish its classes, declare each class where
it is published, and type what they declare precisely."""

import ast
import fnmatch
import importlib
import pathlib
import subprocess
import sys

import pytest

import nbrmm
from helpers import PACKAGE_FOLDER, extension_declarations, extension_stubs, stub_of

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUB = stub_of("nbrmm._nbrmm")


def stubs_under(folder):
    """``{path relative to folder: text}`` of the stubs of the package under ``folder``."""
    return {path.relative_to(folder).as_posix(): path.read_text()
            for path in sorted((folder / "nbrmm").rglob("*.pyi"))}


def test_stubs_are_up_to_date(tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "stubgen.py"), "-o", str(tmp_path)], check=True
    )
    generated, present = stubs_under(tmp_path), stubs_under(PACKAGE_FOLDER)
    assert "nbrmm/_nbrmm.pyi" in generated
    assert sorted(present) == sorted(generated), "stubs missing or left over: run stubgen.py"
    stale = [name for name in generated if present[name] != generated[name]]
    assert stale == [], f"stale stubs {stale}: run scripts/stubgen.py"


def test_py_typed_marker_is_shipped():
    assert STUB.with_name("py.typed").exists()


def top_level_classes(stub):
    return {node.name for node in ast.parse(stub.read_text()).body
            if isinstance(node, ast.ClassDef)}


def test_each_class_is_declared_in_the_stub_of_its_public_module():
    """A type checker names a class after the module whose stub declares it: that is the
    module the class is published under at runtime (``nbrmm.mr.PoolMemoryResource``), and
    the extension's stub re-exports it from there."""
    from nbrmm import _nbrmm

    classes = {name: obj for name, obj in vars(_nbrmm).items() if isinstance(obj, type)}
    assert {"Buffer", "PoolMemoryResource", "CudaUnavailableError", "level_enum"} <= set(classes)
    declared = {stub: top_level_classes(stub) for stub in extension_stubs()}
    imported = {
        alias.name: (node.module, alias.asname)
        for node in ast.parse(STUB.read_text()).body if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    for name, cls in classes.items():
        # Every class is published (else a type checker would name nbrmm._nbrmm).
        assert cls.__module__ != "nbrmm._nbrmm", f"{name} is not published by `import nbrmm`"
        where = [stub for stub, names in declared.items() if name in names]
        assert where == [stub_of(cls.__module__)], (name, cls.__module__, where)
        assert imported[name] == (cls.__module__, name), name


#: The modules that publish classes of the extension, and so have a stub of their own.
PUBLISHING = sorted(
    {obj.__module__ for obj in vars(nbrmm._nbrmm).values() if isinstance(obj, type)}
    - {"nbrmm._nbrmm"}
)


def test_the_main_public_modules_have_stubs():
    assert {"nbrmm", "nbrmm.mr", "nbrmm.mr.experimental"} <= set(PUBLISHING)


@pytest.mark.parametrize("module", PUBLISHING)
def test_a_public_module_stub_declares_what_the_module_exports(module):
    """The stub hides the module's source from type checkers: its ``__all__`` is the
    module's, and it binds each of those names, classes and functions of its own and
    imports as re-exports (``from m import name as name``)."""
    runtime = importlib.import_module(module)
    stub = stub_of(module)
    assert stub in extension_stubs()
    tree = ast.parse(stub.read_text())
    (all_node,) = [node for node in tree.body if isinstance(node, ast.Assign)
                   and [ast.unparse(t) for t in node.targets] == ["__all__"]]
    assert ast.literal_eval(all_node.value) == runtime.__all__
    bound = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            bound[node.name] = "defined"
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                bound[alias.asname or alias.name] = (
                    "re-exported" if alias.asname == alias.name else "imported")

    def expected(obj):
        # Classes and functions of the module (those of its source, and the extension's
        # classes published here) are declared in the stub; the rest is imported.
        defined = callable(obj) and getattr(obj, "__module__", None) == module
        return "defined" if defined else "re-exported"

    assert {name: bound.get(name) for name in runtime.__all__} == {
        name: expected(getattr(runtime, name)) for name in runtime.__all__
    }


# Where the stub may say `object`: "qualified name:parameter" ("return" for the return
# type; fnmatch patterns), each with the reason. Anything else typed `object` (alone, or
# inside a union or a generic) is a signature to make precise with nb::sig.
OBJECT_ALLOWED = {
    "*.__eq__:other": "compares with any object (False for other types), as object.__eq__",
    "_raw_outstanding:mr": "counts the raw allocations whose owner is the given object, "
    "whatever it is (0 for anything that is not a resource)",
}


def annotations(tree):
    """(qualified name, parameter or "return", annotation) for every function of a stub."""

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef):
                name = prefix + child.name
                args = child.args
                for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                            args.vararg, args.kwarg]:
                    if arg is not None and arg.annotation is not None:
                        yield name, arg.arg, arg.annotation
                if child.returns is not None:
                    yield name, "return", child.returns
            elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
                yield prefix + child.target.id, "type", child.annotation

    return list(visit(tree, ""))


def names_object(annotation):
    """Whether an annotation is `object` or has `object` in it (`object | None`, ...)."""
    return any(isinstance(n, ast.Name) and n.id == "object" for n in ast.walk(annotation))


def object_typed(source):
    """The "name:parameter" entries of a stub's source that are typed with `object`."""
    found = annotations(ast.parse(source))
    return [f"{name}:{param}" for name, param, ann in found if names_object(ann)]


def allowed(entry):
    return any(fnmatch.fnmatchcase(entry, pattern) for pattern in OBJECT_ALLOWED)


def extension_object_typed():
    """The "name:parameter" entries of the extension's declarations typed with `object`."""
    return object_typed(ast.unparse(ast.Module(extension_declarations(), type_ignores=[])))


def test_stub_types_nothing_as_object_unless_allowed():
    entries = extension_object_typed()
    assert [e for e in entries if not allowed(e)] == []
    # Every allowed pattern is still needed.
    for pattern in OBJECT_ALLOWED:
        assert fnmatch.filter(entries, pattern), f"{pattern} no longer needed"


def test_object_check_finds_every_place_of_object():
    source = (
        "class A:\n"
        "    def f(self, a: object, /, b: int | object, *c: object, d: list[object],\n"
        "          **e: object) -> object: ...\n"
        "    def __eq__(self, other: object) -> bool: ...\n"
        "    x: object\n"
        "def g(capsule: CapsuleType, n: int = 0) -> tuple[int, object]: ...\n"
        "def h(o: objects, p: typing.object_like) -> None: ...\n"
    )
    entries = object_typed(source)
    assert entries == [
        "A.f:a", "A.f:b", "A.f:d", "A.f:c", "A.f:e", "A.f:return", "A.__eq__:other",
        "A.x:type", "g:return",
    ]
    assert [e for e in entries if not allowed(e)] == [e for e in entries if e != "A.__eq__:other"]


def test_capsules_are_typed_as_capsules():
    module = ast.Module(extension_declarations(), type_ignores=[])
    params = {f"{name}:{param}": ast.unparse(ann) for name, param, ann in annotations(module)}
    capsules = {k: v for k, v in params.items() if k.endswith(":capsule")}
    assert set(capsules) >= {
        "DeviceMemoryResource._from_capsule:capsule",
        "Buffer._from_capsule:capsule",
    }
    assert set(capsules.values()) == {"CapsuleType"}
    assert params["DeviceMemoryResource.__nbrmm_resource__:return"] == "CapsuleType"
    # typing.CapsuleType is Python 3.13's: the stubs take typing_extensions' (>= 4.12).
    for stub in extension_stubs():
        tree = ast.parse(stub.read_text())
        if "CapsuleType" not in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}:
            continue
        imported = {
            (node.module, alias.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if alias.asname in (None, alias.name)
        }
        assert ("typing_extensions", "CapsuleType") in imported, stub
