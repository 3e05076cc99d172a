"""``python -m nbrmm.memory SNAPSHOT -o report.html``: the HTML report of a memory snapshot.

``SNAPSHOT`` is a pickle written by :meth:`nbrmm.memory.Snapshot.dump` or by PyTorch's
``torch.cuda.memory._dump_snapshot``. The report is the page of
:meth:`nbrmm.memory.Snapshot.to_html`. A file that cannot be read, or is not a snapshot
pickle, ends the command with exit status 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import os
import sys

from nbrmm.memory._html import write_html
from nbrmm.memory._torch_format import SnapshotFormatError, load

__all__ = ["main"]

PROG = "python -m nbrmm.memory"


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, or 2 for a snapshot or output that cannot be used (bad
        arguments exit with 2 through :mod:`argparse`).
    """
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Write the HTML report of a memory snapshot: live bytes over time by tag, "
            "the top call sites, the resource chains and the largest allocations."
        ),
    )
    parser.add_argument(
        "snapshot",
        help="a snapshot pickle (Snapshot.dump, or torch.cuda.memory._dump_snapshot)",
    )
    parser.add_argument(
        "-o",
        "--output",
        help="the HTML file to write (default: the snapshot's name with suffix .html)",
    )
    parser.add_argument("--title", help="the page title (default: from the snapshot's name)")
    args = parser.parse_args(argv)

    output = args.output or os.path.splitext(args.snapshot)[0] + ".html"
    if os.path.abspath(output) == os.path.abspath(args.snapshot):
        return _fail(f"the output would replace the snapshot: {output}")
    try:
        snapshot = load(args.snapshot)
    except FileNotFoundError:
        return _fail(f"no such file: {args.snapshot}")
    except IsADirectoryError:
        return _fail(f"a directory, not a snapshot file: {args.snapshot}")
    except OSError as e:
        return _fail(f"cannot read {args.snapshot}: {e.strerror or e}")
    except SnapshotFormatError as e:
        return _fail(str(e))
    title = args.title or f"nbrmm memory report: {os.path.basename(args.snapshot)}"
    try:
        write_html(snapshot, output, title=title)
    except OSError as e:
        return _fail(f"cannot write {output}: {e.strerror or e}")
    print(
        _printable(
            f"{args.snapshot}: {len(snapshot.allocations)} live allocations, "
            f"{len(snapshot.events)} events; wrote {output}"
        )
    )
    return 0


def _printable(text: str) -> str:
    """``text`` with the lone surrogates of undecodable file names as Python escapes, which
    every stream can print."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _fail(message: str) -> int:
    print(_printable(f"{PROG}: error: {message}"), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
