"""Reads a compute-sanitizer memcheck log and says what its error records are.

    python scripts/sanitizer_api_errors.py MEMCHECK_LOG [BACKTRACE_LOG]

memcheck records memory errors and leaks, and also every CUDA API call that returns an
error, including calls that a library makes expecting one (cuda-bindings probing driver
entry points that an older driver lacks, say). This script counts each kind; with
``BACKTRACE_LOG`` (the same program under memcheck with ``--show-backtrace host``), it
names the library that made each failing API call: the first host frame outside the
CUDA driver and runtime.

Exit status: 0 when the log has no record other than API calls returning errors, no
leaked bytes, and no failing API call made from nbrmm's extension or librmm; 99
otherwise, and when failing API calls cannot be attributed (memcheck's ``--error-exitcode`` in ``scripts/gpu-check``); 2 when the log
cannot be read.
"""

import collections
import re
import sys

RECORD = re.compile(r"^=========\s{1,2}(\S.*)$")
API_ERROR = re.compile(r'Program hit (\w+) \(error \d+\) due to ".*?" on CUDA API call to (\w+)')
FRAME = re.compile(r"Host Frame:\s*(.*)$")
MODULE = re.compile(r"(\S+\.so(?:\.\d+)*)")
LEAKS = re.compile(r"LEAK SUMMARY: (\d+) bytes leaked")
#: Libraries whose failing API calls fail the check (nbrmm's own code and librmm's).
OURS = re.compile(r"(^|/)(_nbrmm[.\w-]*\.so|librmm[.\w-]*\.so)")
#: The CUDA driver and runtime: the frames above the caller.
CUDA = re.compile(r"(^|/)(libcuda\.so|libcudart)")


def records(path):
    """(headline, [(symbol, module) frames]) for each record of a memcheck log."""
    found = []
    with open(path, errors="replace") as log:
        for line in log:
            frame = FRAME.search(line)
            if frame and found:
                text = frame.group(1)
                module = MODULE.search(text)
                symbol = re.split(r"\s*(?:\[0x|\sin\s)", text, maxsplit=1)[0].strip()
                found[-1][1].append((symbol, module.group(1) if module else text))
                continue
            match = RECORD.match(line.rstrip("\n"))
            if match and not match.group(1).startswith(" "):
                found.append((match.group(1), []))
    return found


def caller(frames):
    for symbol, module in frames:
        if not CUDA.search(module):
            return f"{symbol or '?'} in {module.rsplit('/', 1)[-1]}", bool(OURS.search(module))
    return "no host frame outside the CUDA driver", False


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    try:
        plain = records(argv[1])
        traced = records(argv[2]) if len(argv) > 2 else []
        leaked = [int(m.group(1)) for m in map(LEAKS.search, open(argv[1], errors="replace")) if m]
    except OSError as exc:
        print(f"cannot read the memcheck log: {exc}")
        return 2
    api = collections.Counter()
    other = []
    for headline, _ in plain:
        hit = API_ERROR.search(headline)
        if hit:
            api[(hit.group(2), hit.group(1))] += 1
        elif not headline.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY", "LEAK SUMMARY")):
            other.append(headline)
    callers = collections.defaultdict(collections.Counter)
    ours = 0
    for headline, frames in traced:
        hit = API_ERROR.search(headline)
        if hit:
            where, is_ours = caller(frames)
            callers[(hit.group(2), hit.group(1))][where] += 1
            ours += is_ours
    for (call, error), count in sorted(api.items()):
        print(f"API call returned an error: {call} -> {error}, {count}x")
        for where, n in callers.get((call, error), {}).items():
            print(f"    called from {where} ({n}x)")
    for headline in other[:20]:
        print(f"memcheck error: {headline}")
    bytes_leaked = sum(leaked)
    print(
        f"memcheck: {len(other)} memory errors, {bytes_leaked} bytes leaked, "
        f"{sum(api.values())} API calls returning errors ({ours} made from nbrmm or librmm)"
    )
    unattributed = bool(api) and not callers
    if unattributed:
        print("the failing API calls could not be attributed (no backtrace log records)")
    return 99 if other or bytes_leaked or ours or unattributed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
