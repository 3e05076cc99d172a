"""Allocation logging and librmm's debug logger.

Allocation logging wraps a device's current resource in a
:class:`~nbrmm.mr.LoggingResourceAdaptor`, which writes every allocation and free (C++
ones included, as the adaptor sits in librmm's per-device map) to a CSV file per device;
``python -m nbrmm.plot`` draws such a file. :func:`disable_logging` puts back the very
resource that was wrapped.

The debug logger is librmm's own diagnostic log (``rmm::default_logger()``), written to
stderr or to the file named by the environment variable ``RMM_DEBUG_LOG_FILE``.
"""

import enum

import contextlib
import os
from collections.abc import Iterator
from nbrmm._nbrmm import (
    DeviceMemoryResource as _DeviceMemoryResource,
    flush_logger as flush_logger,
    get_flush_level as get_flush_level,
    get_logging_level as get_logging_level,
    set_flush_level as set_flush_level,
    set_logging_level as set_logging_level,
    should_log as should_log,
)


class level_enum(enum.IntEnum):
    """
    Severity levels of librmm's debug logger, from the most verbose to ``off``.

    An ``IntEnum``: levels compare by severity (``level_enum.debug < level_enum.warn``).
    """

    trace = 0
    """Most verbose: every traced event."""

    debug = 1
    """Debugging messages."""

    info = 2
    """Informational messages."""

    warn = 3
    """Warnings."""

    error = 4
    """Errors."""

    critical = 5
    """Critical errors."""

    off = 6
    """Nothing is logged."""

    n_levels = 7
    """
    Not a level: the number of levels (rmm exposes it too; as a logging level it silences the logger like ``off``).
    """

__all__ = [
    "disable_logging",
    "enable_logging",
    "flush_logger",
    "get_flush_level",
    "get_log_filenames",
    "get_logging_level",
    "level_enum",
    "set_flush_level",
    "set_logging_level",
    "should_log",
]

def _devices() -> list[int]:
    """Every device with an entry in librmm's per-device map, and the current device."""

@contextlib.contextmanager
def _on_device(device: int) -> Iterator[None]:
    """Make ``device`` current for a block (resources are created on the current device)."""

def enable_logging(
    log_file_name: str | os.PathLike[str] | None = None,
    mr: _DeviceMemoryResource | None = None,
) -> None:
    """Log every allocation and free to a CSV file per device.

    For each device that has a resource in librmm's per-device map (and the current
    device), wraps that resource in a :class:`~nbrmm.mr.LoggingResourceAdaptor` and makes
    the adaptor the device's resource. Devices that already log are left as they are.
    Each device writes its own file: ``.dev<id>`` is inserted before the extension of
    ``log_file_name`` (see :func:`get_log_filenames`).

    Parameters
    ----------
    log_file_name : str or os.PathLike, optional
        The log file; the environment variable ``RMM_LOG_FILE`` when omitted.
    mr : DeviceMemoryResource, optional
        Log this resource instead: it is wrapped and made the current device's resource
        (other devices are left alone). It must belong to the current device.

    Raises
    ------
    ValueError
        If no file name is given and ``RMM_LOG_FILE`` is not set.
    OSError
        If a log file cannot be opened. No device is changed then.
    """

def disable_logging() -> None:
    """Stop allocation logging on every device.

    Each device whose resource is a :class:`~nbrmm.mr.LoggingResourceAdaptor` gets back
    the adaptor's upstream resource: the very object that :func:`enable_logging`
    wrapped. The log is flushed first.
    """

def get_log_filenames() -> dict[int, str | None]:
    """The allocation log file of each device.

    Returns
    -------
    dict of int to str or None
        For every device that has a resource in librmm's per-device map (and the current
        device): the absolute path of its log file, or None when the device does not log
        (or logs to a file nbrmm does not know, set up by C++ code).
    """
