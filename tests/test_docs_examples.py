"""The documentation's examples run: every ``pycon`` block as a doctest, every ``python``
block as a script, page by page (see ``tests/doc_examples.py`` for the conventions).
Examples marked ``# needs a GPU`` run on a GPU only; without one, each page's other
examples still run."""

from __future__ import annotations

import doctest
import gc
import io
import pathlib
import subprocess
import sys

import pytest

from doc_examples import GPU_MARK, ROOT, Block, blocks, count_examples, pages

#: Packages that some examples use and the test environment may lack; an example that
#: fails to import one is skipped (and, with --require-gpu, a skipped GPU test fails).
OPTIONAL = ("cupy", "torch", "numba", "distributed", "dask", "dask_cuda", "cuda")

# IGNORE_EXCEPTION_DETAIL: an example shows ``nbrmm.OutOfMemory: ...``; the class
# is checked, not its module path or message.
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.IGNORE_EXCEPTION_DETAIL

PAGES = {page: blocks(page) for page in pages()}


def page_id(page: pathlib.Path) -> str:
    return str(page.relative_to(ROOT))


def _missing_optional(exc: BaseException | None) -> str | None:
    """The optional module whose absence caused ``exc`` (directly, or through the
    ImportError with advice that nbrmm.dask raises from it), or None."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            top = exc.name.split(".")[0]
            if top in OPTIONAL:
                return exc.name
        exc = exc.__cause__ if isinstance(exc, ImportError) else None
        seen += 1
    return None


class _Runner(doctest.DocTestRunner):
    """A doctest runner that remembers the first unexpected exception."""

    def __init__(self):
        super().__init__(optionflags=FLAGS)
        self.exception: BaseException | None = None

    def report_unexpected_exception(self, out, test, example, exc_info):
        if self.exception is None:
            self.exception = exc_info[1]
        super().report_unexpected_exception(out, test, example, exc_info)


def run_block(block: Block, namespace: dict) -> None:
    """Run one block in ``namespace``; fails the test with the block's location."""
    if block.language == "python":
        code = compile(block.text, block.where(), "exec")
        try:
            exec(code, namespace)  # noqa: S102 - the documentation's own example
        except Exception as exc:  # noqa: BLE001 - reported below
            if (name := _missing_optional(exc)) is not None:
                pytest.skip(f"{block.where()} needs {name}")
            raise
        return
    test = doctest.DocTestParser().get_doctest(
        block.text, namespace, block.where(), str(block.page), block.line - 1
    )
    test.globs = namespace  # DocTest works on a copy; later blocks need the names
    runner = _Runner()
    out = io.StringIO()
    result = runner.run(test, out=out.write, clear_globs=False)
    if result.failed:
        if (name := _missing_optional(runner.exception)) is not None:
            pytest.skip(f"{block.where()} needs {name}")
        pytest.fail(f"example at {block.where()} failed:\n{out.getvalue()}", pytrace=False)


def run_page(selected: list[Block]) -> None:
    namespace: dict = {"__name__": "__docs__"}
    try:
        for block in selected:
            run_block(block, namespace)
    finally:
        # Buffers first, then resources, then the rest newest first: what frees memory goes
        # before the functions and libraries its callbacks use (a name bound again later in
        # a page keeps its first place in the namespace).
        import nbrmm.mr

        def rank(name):
            value = namespace[name]
            if isinstance(value, nbrmm.Buffer):
                return 0
            return 1 if isinstance(value, nbrmm.mr.DeviceMemoryResource) else 2

        names = list(reversed(list(namespace)))
        for name in sorted(names, key=rank):
            del namespace[name]
        gc.collect()


CPU_PAGES = [p for p, bs in PAGES.items() if any(not b.needs_gpu for b in bs)]
GPU_PAGES = [p for p, bs in PAGES.items() if any(b.needs_gpu for b in bs)]


#: A page whose examples install nbrmm under rmm's name runs as a program of its own: in
#: this process the real rmm may be imported already (install() refuses then), and the
#: alias would stay for the tests after it.
_FRESH_PROCESS = "compat.install()"
_SKIPPED = 3  # the child's exit status for a skipped page


def _run_page_in_child(page: pathlib.Path, gpu: bool) -> None:
    code = (
        "import sys, _pytest.outcomes as o, test_docs_examples as t\n"
        f"page = t.pathlib.Path({str(page)!r})\n"
        f"try:\n    t.run_page([b for b in t.blocks(page) if {gpu!r} or not b.needs_gpu])\n"
        f"except o.Skipped as e:\n    print(e.msg)\n    sys.exit({_SKIPPED})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=pathlib.Path(__file__).parent)
    if out.returncode == _SKIPPED:
        pytest.skip(out.stdout.strip())
    assert out.returncode == 0, out.stdout + out.stderr


def _run(page: pathlib.Path, gpu: bool) -> None:
    if any(_FRESH_PROCESS in b.text for b in PAGES[page]):
        _run_page_in_child(page, gpu)
    else:
        run_page([b for b in PAGES[page] if gpu or not b.needs_gpu])


@pytest.mark.parametrize("page", CPU_PAGES, ids=page_id)
def test_cpu_examples(page):
    _run(page, gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("page", GPU_PAGES, ids=page_id)
def test_gpu_examples(page):
    _run(page, gpu=True)


def test_a_page_that_installs_the_rmm_alias_runs_apart(tmp_path):
    """differences.md installs nbrmm as rmm: it runs in a child, which leaves this process
    without the alias; a failing example there fails the test."""
    page = ROOT / "docs" / "differences.md"
    assert any(_FRESH_PROCESS in b.text for b in PAGES[page])
    _run(page, gpu=False)
    assert "rmm" not in sys.modules or "nbrmm" not in getattr(sys.modules["rmm"], "__name__", "")
    bad = tmp_path / "bad.md"
    bad.write_text("# Bad\n\n```pycon\n>>> import nbrmm.compat\n>>> 1 + 1\n3\n```\n")
    with pytest.raises(AssertionError, match="1 \\+ 1"):
        _run_page_in_child(bad, gpu=False)


def test_examples_are_found_and_counted():
    """The collector sees the examples of the pages (and nothing outside fences)."""
    all_blocks = [b for bs in PAGES.values() for b in bs]
    assert any(b.page.name == "getting-started.md" and not b.needs_gpu for b in all_blocks)
    assert sum(count_examples(b) for b in all_blocks if not b.needs_gpu) >= 50
    for b in all_blocks:
        assert b.text.strip(), f"empty example at {b.where()}"


def test_collector_conventions(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "```pycon\n>>> x = 1\n>>> x + 1\n2\n```\n\n"
        "````markdown\n```python\nnot code of this page\n```\n````\n\n"
        f"```python\n{GPU_MARK}\ny = 2\n```\n\n"
        "```bash\necho no\n```\n\n"
        f"~~~pycon\n>>> {GPU_MARK}\n>>> 3\n3\n~~~\n"
    )
    found = blocks(page)
    assert [(b.language, b.line, b.needs_gpu) for b in found] == [
        ("pycon", 4, False),
        ("python", 16, True),
        ("pycon", 25, True),
    ]
    assert found[0].source == "x = 1\nx + 1\n"
    assert [count_examples(b) for b in found] == [2, 1, 1]
    namespace: dict = {}
    run_block(found[0], namespace)
    assert namespace["x"] == 1


def test_a_wrong_example_fails_with_its_location(tmp_path):
    page = tmp_path / "bad.md"
    page.write_text("```pycon\n>>> 1 + 1\n3\n```\n")
    (block,) = blocks(page)
    block = Block(ROOT / "docs" / "bad.md", block.line, block.language, block.text)
    with pytest.raises(pytest.fail.Exception, match=r"docs/bad.md:2"):
        run_block(block, {})


@pytest.mark.parametrize("language, text", [
    ("python", "import cupy.not_a_module_of_cupy\n"),
    ("pycon", ">>> import cupy.not_a_module_of_cupy\n"),
])
def test_an_example_needing_a_missing_framework_is_skipped(language, text):
    # With or without CuPy installed, this import fails with CuPy's name on it.
    block = Block(ROOT / "docs" / "x.md", 1, language, text)
    with pytest.raises(pytest.skip.Exception, match="x.md:1 needs cupy"):
        run_block(block, {})


@pytest.mark.parametrize("language", ["python", "pycon"])
def test_an_import_error_with_advice_over_a_missing_framework_is_skipped(language):
    # nbrmm.dask raises an ImportError with advice, chained to Dask's ModuleNotFoundError.
    source = ("try:\n    import dask.not_a_module_of_dask\n"
              "except ImportError as exc:\n    raise ImportError('install it') from exc\n")
    text = source if language == "python" else "".join(
        (">>> " if i == 0 else "... ") + line + "\n" for i, line in enumerate(source.splitlines())
    ) + "...\n"
    with pytest.raises(pytest.skip.Exception, match="x.md:1 needs dask"):
        run_block(Block(ROOT / "docs" / "x.md", 1, language, text), {})


def test_an_import_error_with_advice_over_another_module_fails():
    source = ("try:\n    import not_a_module\n"
              "except ImportError as exc:\n    raise ImportError('install it') from exc\n")
    with pytest.raises(ImportError, match="install it"):
        run_block(Block(ROOT / "docs" / "x.md", 1, "python", source), {})


def test_an_example_needing_another_missing_module_fails():
    with pytest.raises(ModuleNotFoundError):
        run_block(Block(ROOT / "docs" / "x.md", 1, "python", "import not_a_module\n"), {})
    with pytest.raises(pytest.fail.Exception, match="not_a_module"):
        run_block(Block(ROOT / "docs" / "x.md", 1, "pycon", ">>> import not_a_module\n"), {})


def _package_folder(package):
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def _cuda_include_folder():
    """The CUDA runtime's headers, found as nbrmm's build finds them: the wheels of the
    build requirements (nvidia-cuda-runtime with nvidia-cuda-crt), else a CUDA toolkit
    (CUDAToolkit_ROOT, CUDA_HOME, CUDA_PATH, nvcc's, /usr/local/cuda). A folder counts only
    when it is complete: some environments carry the runtime's wheel without crt/."""
    import os
    import shutil

    wheel = _package_folder("nvidia.cu13")
    candidates = [wheel / "include"] if wheel is not None else []
    for var in ("CUDAToolkit_ROOT", "CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(pathlib.Path(os.environ[var]) / "include")
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        candidates.append(pathlib.Path(nvcc).resolve().parent.parent / "include")
    candidates.append(pathlib.Path("/usr/local/cuda/include"))
    for folder in candidates:
        if (folder / "cuda_runtime_api.h").is_file() and (folder / "crt/host_defines.h").is_file():
            return folder
    return None


def _include_folders():
    """The include folders a C++ extension of nbrmm compiles with, or None when the
    headers (the CUDA runtime's come with the build requirements) are not installed."""
    import shutil
    import sysconfig

    import nbrmm

    folders = [pathlib.Path(nbrmm.get_include()), pathlib.Path(sysconfig.get_paths()["include"])]
    for package, sub in (("nanobind", "include"), ("librmm", "include"),
                         ("librmm", "include/rapids"), ("rapids_logger", "include")):
        root = _package_folder(package)
        if root is None:
            return None
        folders.append(root / sub)
    folders.append(_cuda_include_folder())
    if not all(f is not None and f.is_dir() for f in folders) or shutil.which("g++") is None:
        return None
    return [str(f) for f in folders]


def test_cpp_extension_example_compiles(tmp_path):
    """The extension on the C++ page compiles against <nbrmm/nbrmm.hpp> and librmm."""
    import subprocess

    folders = _include_folders()
    if folders is None:
        pytest.skip("needs g++ and the headers of nanobind, librmm and the CUDA runtime")
    text = (ROOT / "docs" / "cpp-extensions.md").read_text()
    sources = [b for b in text.split("```cpp\n")[1:] if "NB_MODULE" in b.split("```")[0]]
    assert len(sources) == 1
    source = tmp_path / "my_ext.cpp"
    source.write_text(sources[0].split("```")[0])
    # librmm's CMake package sets these for its users.
    defines = ["-DCCCL_DISABLE_PDL", "-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CUDA",
               "-DTHRUST_HOST_SYSTEM=THRUST_HOST_SYSTEM_CPP"]
    out = subprocess.run(
        ["g++", "-std=c++20", "-fsyntax-only", *defines,
         *(f"-I{f}" for f in folders), str(source)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-4000:]


@pytest.mark.parametrize(
    "module", ["nbrmm", "nbrmm.mr", "nbrmm.statistics", "nbrmm.logger", "nbrmm.plot"]
)
def test_docstring_examples_of_the_api_reference(module):
    """The examples in the docstrings that the API reference shows (the hook modules'
    need their framework and a GPU, and are shown as such)."""
    import importlib

    mod = importlib.import_module(module)
    result = doctest.testmod(mod, optionflags=FLAGS, report=False)
    assert result.failed == 0
    if module == "nbrmm.statistics":
        assert result.attempted >= 2  # profiler's example
