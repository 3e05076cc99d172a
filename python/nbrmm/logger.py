"""Allocation logging and librmm's debug logger.

Allocation logging wraps a device's current resource in a
:class:`~nbrmm.mr.LoggingResourceAdaptor`, which writes every allocation and free (C++
ones included, as the adaptor sits in librmm's per-device map) to a CSV file per device;
``python -m nbrmm.plot`` draws such a file. :func:`disable_logging` puts back the very
resource that was wrapped.

The debug logger is librmm's own diagnostic log (``rmm::default_logger()``), written to
stderr or to the file named by the environment variable ``RMM_DEBUG_LOG_FILE``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from nbrmm._public import publish as _publish
from nbrmm._nbrmm import (
    DeviceMemoryResource as _DeviceMemoryResource,
    LoggingResourceAdaptor as _LoggingResourceAdaptor,
    _devices_with_resource,
    flush_logger,
    get_current_device as _get_current_device,
    get_flush_level,
    get_logging_level,
    get_per_device_resource as _get_per_device_resource,
    level_enum,
    set_current_device as _set_current_device,
    set_flush_level,
    set_logging_level,
    set_per_device_resource as _set_per_device_resource,
    should_log,
)

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
    return sorted(set(_devices_with_resource()) | {_get_current_device()})


@contextlib.contextmanager
def _on_device(device: int) -> Iterator[None]:
    """Make ``device`` current for a block (resources are created on the current device)."""
    current = _get_current_device()
    if device == current:
        yield
        return
    _set_current_device(device)
    try:
        yield
    finally:
        _set_current_device(current)


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
    if mr is not None:
        if not isinstance(mr, _DeviceMemoryResource):
            raise TypeError(
                f"mr: expected an nbrmm.mr.DeviceMemoryResource or None, got {type(mr).__name__}"
            )
        adaptor = (
            mr
            if isinstance(mr, _LoggingResourceAdaptor)
            else _LoggingResourceAdaptor(mr, log_file_name)
        )
        _set_per_device_resource(_get_current_device(), adaptor)
        return

    # Create every adaptor first, so that a failure leaves every device unchanged.
    adaptors: list[tuple[int, _LoggingResourceAdaptor]] = []
    for device in _devices():
        with _on_device(device):
            res = _get_per_device_resource(device)
            if not isinstance(res, _LoggingResourceAdaptor):
                adaptors.append((device, _LoggingResourceAdaptor(res, log_file_name)))
    for device, adaptor in adaptors:
        _set_per_device_resource(device, adaptor)


def disable_logging() -> None:
    """Stop allocation logging on every device.

    Each device whose resource is a :class:`~nbrmm.mr.LoggingResourceAdaptor` gets back
    the adaptor's upstream resource: the very object that :func:`enable_logging`
    wrapped. The log is flushed first.
    """
    for device in _devices():
        res = _get_per_device_resource(device)
        if isinstance(res, _LoggingResourceAdaptor):
            upstream = res.upstream_mr
            if upstream is None:
                raise ValueError(
                    f"the LoggingResourceAdaptor of device {device} has no known upstream "
                    "resource to restore"
                )
            res.flush()
            _set_per_device_resource(device, upstream)


def get_log_filenames() -> dict[int, str | None]:
    """The allocation log file of each device.

    Returns
    -------
    dict of int to str or None
        For every device that has a resource in librmm's per-device map (and the current
        device): the absolute path of its log file, or None when the device does not log
        (or logs to a file nbrmm does not know, set up by C++ code).
    """
    names: dict[int, str | None] = {}
    for device in _devices():
        res = _get_per_device_resource(device)
        names[device] = res.get_file_name() if isinstance(res, _LoggingResourceAdaptor) else None
    return names

_publish(__name__, globals(), __all__)
