"""``python -m nbrmm.compat``: run a program that imports rmm on nbrmm, unchanged.

Usage::

    python -m nbrmm.compat script.py [args...]
    python -m nbrmm.compat -m package.module [args...]
    python -m nbrmm.compat -c "code" [args...]

The program sees the same ``sys.argv`` as with ``python script.py args...``; ``import rmm``
inside it imports nbrmm (see :mod:`nbrmm.compat`), and so it does in the Python processes
the program starts (``NBRMM_COMPAT=1`` is set in its environment).
"""

import os
import runpy
import sys

import nbrmm.compat

USAGE = (
    "usage: python -m nbrmm.compat script.py [args...]\n"
    "       python -m nbrmm.compat -m module [args...]\n"
    "       python -m nbrmm.compat -c code [args...]\n"
    "Runs a program that imports rmm on nbrmm, unchanged.\n"
)


def main(argv: list[str] | None = None) -> int:
    """Run the program named by ``argv`` (default ``sys.argv[1:]``) with rmm mapped.

    Returns
    -------
    int
        0 once the program has run (its own ``sys.exit`` propagates); 2 for a usage error.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stderr.write(USAGE)
        return 0 if args else 2
    if args[0] in ("-m", "-c") and len(args) < 2:
        sys.stderr.write(f"nbrmm.compat: argument expected for {args[0]}\n" + USAGE)
        return 2
    try:
        nbrmm.compat.install()
    except nbrmm.compat.RmmAlreadyImportedError as exc:
        sys.stderr.write(f"nbrmm.compat: {exc}\n")
        return 1
    # Python processes the program starts map rmm too (nbrmm-compat.pth reads it).
    os.environ[nbrmm.compat.ENVIRONMENT_VARIABLE] = "1"
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]  # sys.path[0] is the working directory already
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        code = compile(args[1], "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102
    else:
        sys.argv = args
        # As `python script.py` does: the script's folder, not the working directory.
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
