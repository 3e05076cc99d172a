"""The code examples of nbrmm's documentation (``docs/**/*.md`` and ``README.md``).

A fenced block whose language is ``pycon`` is a doctest (``>>>`` lines and their expected
output); one whose language is ``python`` (or ``py``) is a script. Blocks of one page run
in order in one namespace, as a reader would type them. A block whose first line is the
comment ``# needs a GPU`` (``>>> # needs a GPU`` in a ``pycon`` block) runs only where a
GPU is usable; the other blocks of its page run before it there too. Used by
``tests/test_docs_examples.py`` (running them) and ``scripts/check_types.py`` (``mypy
--strict`` over them).
"""

from __future__ import annotations

import doctest
import pathlib
import re
import textwrap
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: The first line of an example that needs a GPU.
GPU_MARK = "# needs a GPU"

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_LANGUAGES = {"pycon": "pycon", "python": "python", "py": "python"}


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, the line of its first code line, its language
    (``"pycon"`` or ``"python"``) and its text."""

    page: pathlib.Path
    line: int
    language: str
    text: str

    @property
    def needs_gpu(self) -> bool:
        for raw in self.text.splitlines():
            line = raw.strip()
            if line.startswith(">>>"):
                line = line[3:].strip()
            if line:
                # "# needs a GPU", possibly followed by what else it needs
                return line == GPU_MARK or line.startswith(GPU_MARK + " ")
        return False

    @property
    def source(self) -> str:
        """The Python code of the block (a doctest's statements, without their output)."""
        if self.language == "python":
            return self.text
        examples = doctest.DocTestParser().get_examples(self.text)
        return "".join(example.source for example in examples)

    def where(self) -> str:
        """``page:line``, the page relative to the source tree when it is inside."""
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def pages(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The documentation's markdown pages (the built site left out) and the README."""
    docs = root / "docs"
    found = [p for p in sorted(docs.rglob("*.md")) if "_build" not in p.relative_to(docs).parts]
    return found + [root / "README.md"]


def blocks(page: pathlib.Path) -> list[Block]:
    """The Python code blocks of a markdown page, in order."""
    found = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        fence, info = m["fence"], m["info"].strip()
        language = _LANGUAGES.get(info.split()[0] if info else "")
        start = i + 1
        i = start
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if (
                close is not None
                and close["fence"][0] == fence[0]
                and len(close["fence"]) >= len(fence)
                and not close["info"].strip()
            ):
                break
            i += 1
        if language is not None:
            # A block inside a list item is indented like the item's text.
            text = textwrap.dedent("\n".join(lines[start:i])) + "\n"
            found.append(Block(page, start + 1, language, text))
        i += 1
    return found


def count_examples(block: Block) -> int:
    """How many examples a block holds: ``>>>`` statements, or 1 for a script."""
    if block.language == "python":
        return 1
    return len(doctest.DocTestParser().get_examples(block.text))
