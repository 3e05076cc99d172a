"""The options of :class:`nbrmm.dask.NbrmmSetup`: checked on the client, resolved on the worker.

Sizes follow dask-cuda's ``parse_device_bytes``: an int is a number of bytes, a float in
(0, 1] (or a string such as ``"0.5"``) a fraction of the device's total memory, a string
such as ``"4GB"`` or ``"4GiB"`` a number of bytes (Dask's ``parse_bytes``), and None, 0,
``0.0`` or ``"0 MiB"`` mean "not set". Every size is rounded down to a multiple of 256
bytes (librmm's alignment) on the worker, where the device's memory is known.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

from dask.utils import parse_bytes

#: A size option as the plugin takes it (see the module's documentation).
SizeOption: TypeAlias = int | float | str | None

#: Sizes are rounded down to a multiple of this, as dask-cuda does for RMM's pools.
ALIGNMENT: Final = 256

#: The libraries whose allocator the plugin can point at the worker's resource.
LIBRARIES: Final = ("cupy", "torch", "numba")

_MAX_BYTES: Final = (1 << 64) - 1


@dataclass(frozen=True)
class Size:
    """A size checked on the client: ``bytes`` bytes, or ``fraction`` of device memory."""

    bytes: int | None = None
    fraction: float | None = None

    def __post_init__(self) -> None:
        if (self.bytes is None) == (self.fraction is None):
            raise ValueError("Size: give one of bytes and fraction")

    def resolve(self, total_memory: int | Callable[[], int]) -> int:
        """The size in bytes, rounded down to :data:`ALIGNMENT`.

        Parameters
        ----------
        total_memory : int or callable
            The device's total memory in bytes, or a callable returning it (called only
            for a fraction).
        """
        if self.fraction is None:
            assert self.bytes is not None  # one of the two is set (__post_init__)
            n = self.bytes
        else:
            total = total_memory() if callable(total_memory) else total_memory
            n = int(total * self.fraction)
        return n // ALIGNMENT * ALIGNMENT

    def __repr__(self) -> str:
        # As the option is written: a float is a fraction, an int a number of bytes.
        return repr(self.bytes if self.fraction is None else self.fraction)


def _fraction(value: int | float | str) -> float | None:
    """``value`` as a fraction of device memory, or None when it is not one.

    As in dask-cuda, a float (or a string of one) in (0, 1] is a fraction, except the int
    1 and the string ``"1"``, which are one byte.
    """
    if isinstance(value, int) or value == "1":
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if 0.0 < f <= 1.0 else None


def parse_size(name: str, value: object) -> Size | None:
    """Check a size option on the client.

    Parameters
    ----------
    name : str
        The parameter, for the messages.
    value : int, float, str or None
        The option (any object: it is checked here).

    Returns
    -------
    Size or None
        None when the option is not set (None, 0, ``0.0``, ``"0 MiB"``).

    Raises
    ------
    TypeError
        If ``value`` is not an int, float, str or None.
    ValueError
        If it is negative, not a number, too large, or a string that is not a size.
    """
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)  # NumPy integers too
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(
            f"{name}: expected a number of bytes (int), a fraction of device memory "
            f"(float in (0, 1]), a string such as '4GB', or None; got {type(value).__name__}"
        )
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{name}: expected a size such as '4GB', got an empty string")
    if isinstance(value, str) and value.strip().startswith("-"):
        # Dask's parse_bytes truncates "-0.5" to 0, which would read as "not set".
        raise ValueError(f"{name}: must not be negative, got {value!r}")
    fraction = _fraction(value)
    if fraction is not None:
        return Size(fraction=fraction)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite size, got {value!r}")
    try:
        n = value if isinstance(value, int) else parse_bytes(value)
    except (ValueError, OverflowError) as exc:
        raise ValueError(
            f"{name}: cannot read {value!r} as a number of bytes such as '4GB' or '4GiB'"
        ) from exc
    if n < 0:
        raise ValueError(f"{name}: must not be negative, got {value!r}")
    if n > _MAX_BYTES:
        raise ValueError(f"{name}: {value!r} is more than 2**64 - 1 bytes")
    return None if n == 0 else Size(bytes=n)


def parse_flag(name: str, value: object) -> bool:
    """A bool option (strictly a bool: 0, 1 or a string are refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {type(value).__name__}")
    return value


def parse_libraries(value: object) -> tuple[str, ...]:
    """``external_lib_list``: None, ``"cupy,torch"`` or a list or tuple of names."""
    name = "external_lib_list"
    if value is None:
        return ()
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise TypeError(
            f"{name}: expected a comma-separated string such as 'cupy,torch' or a list of "
            f"strings, got {type(value).__name__}"
        )
    libraries: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{name}: expected library names (str), got {type(item).__name__}")
        if item not in LIBRARIES:
            raise ValueError(
                f"{name}: {item!r} is not supported; the supported libraries are "
                f"{', '.join(LIBRARIES)}"
            )
        if item not in libraries:
            libraries.append(item)
    return tuple(libraries)


def parse_directory(value: object) -> str | None:
    """``log_directory``: None, or a non-empty str or path."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"log_directory: expected a str or os.PathLike, got {type(value).__name__}"
        )
    path = os.fspath(value)
    if not isinstance(path, str):
        raise TypeError("log_directory: expected a text path, got bytes")
    if not path or "\0" in path:
        raise ValueError(f"log_directory: not a usable directory name: {path!r}")
    return path


def log_file_name(directory: str, worker_name: object) -> str:
    """The allocation log of a worker, named as dask-cuda names its RMM logs
    (``rmm_log_<worker name>.txt``; librmm's logging adaptor inserts ``.dev<N>``)."""
    if isinstance(worker_name, str):
        worker_name = worker_name.split("/")[-1] or "worker"
    return os.path.join(directory, f"rmm_log_{worker_name}.txt")
