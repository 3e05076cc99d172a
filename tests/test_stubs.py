"""The checked-in stub matches what nanobind's stubgen makes of the built extension, and
types what it declares precisely."""

import ast
import fnmatch
import pathlib
import subprocess
import sys

import nbrmm

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUB = pathlib.Path(nbrmm.__file__).with_name("_nbrmm.pyi")


def test_stub_is_up_to_date(tmp_path):
    out = tmp_path / "_nbrmm.pyi"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "stubgen.py"), "-o", str(out)], check=True
    )
    assert STUB.exists(), "python/nbrmm/_nbrmm.pyi is missing: run scripts/stubgen.py"
    assert out.read_text() == STUB.read_text(), "stale stub: run scripts/stubgen.py"


def test_py_typed_marker_is_shipped():
    assert STUB.with_name("py.typed").exists()


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


def test_stub_types_nothing_as_object_unless_allowed():
    entries = object_typed(STUB.read_text())
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
    params = {f"{name}:{param}": ast.unparse(ann)
              for name, param, ann in annotations(ast.parse(STUB.read_text()))}
    capsules = {k: v for k, v in params.items() if k.endswith(":capsule")}
    assert set(capsules) >= {
        "DeviceMemoryResource._from_capsule:capsule",
        "Buffer._from_capsule:capsule",
    }
    assert set(capsules.values()) == {"CapsuleType"}
    assert params["DeviceMemoryResource.__nbrmm_resource__:return"] == "CapsuleType"
    # typing.CapsuleType is Python 3.13's: the stub takes typing_extensions' (>= 4.12).
    imported = {
        (node.module, alias.name)
        for node in ast.walk(ast.parse(STUB.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname in (None, alias.name)
    }
    assert ("typing_extensions", "CapsuleType") in imported
