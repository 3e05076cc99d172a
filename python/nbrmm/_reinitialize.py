"""rmm-compatible ``reinitialize`` and its hooks, over librmm's per-device map."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from nbrmm import _nbrmm

_F = TypeVar("_F", bound=Callable[..., object])

_lock = threading.Lock()
# (func, args, kwargs), called in reverse order of registration
_hooks: list[tuple[Callable[..., object], tuple[Any, ...], dict[str, Any]]] = []
_initialized_devices: set[int] = set()  # devices the last reinitialize() set up


def register_reinitialize_hook(func: _F, *args: Any, **kwargs: Any) -> _F:
    """Register ``func(*args, **kwargs)`` to run at the start of every :func:`reinitialize`.

    Hooks run in reverse order of registration (the most recent first), before any
    resource is replaced, e.g. to release memory allocated from the old resources.

    Parameters
    ----------
    func : callable
        The hook.
    *args, **kwargs
        Passed to ``func``.

    Returns
    -------
    callable
        ``func``, so this can be used as a decorator.
    """
    if not callable(func):
        raise TypeError(f"func: expected a callable, got {type(func).__name__}")
    with _lock:
        _hooks.append((func, args, kwargs))
    return func


def unregister_reinitialize_hook(func: Callable[..., object]) -> None:
    """Remove every registration of ``func`` (no error when there is none).

    Registrations are matched by equality, as in rmm, so a bound method registered as
    ``obj.method`` is removed by passing ``obj.method`` again.
    """
    with _lock:
        _hooks[:] = [h for h in _hooks if h[0] != func]


def _make_resource(
    pool_allocator: bool,
    managed_memory: bool,
    initial_pool_size: int | str | None,
    maximum_pool_size: int | str | None,
    logging: bool,
    log_file_name: str | os.PathLike[str] | None,
    device: int,
) -> _nbrmm.DeviceMemoryResource:
    from nbrmm import mr

    base: mr.DeviceMemoryResource = (
        mr.ManagedMemoryResource() if managed_memory else mr.CudaMemoryResource()
    )
    if pool_allocator:
        base = mr.PoolMemoryResource(
            base, initial_pool_size=initial_pool_size, maximum_pool_size=maximum_pool_size
        )
    if logging:
        base = mr.LoggingResourceAdaptor(base, log_file_name=log_file_name)
    return base


def reinitialize(
    pool_allocator: bool = False,
    managed_memory: bool = False,
    initial_pool_size: int | str | None = None,
    maximum_pool_size: int | str | None = None,
    devices: int | Iterable[int] | None = 0,
    logging: bool = False,
    log_file_name: str | os.PathLike[str] | None = None,
) -> None:
    """Replace the resource of one or more devices in librmm's per-device map.

    Runs the registered hooks first, then builds for each device (with that device
    current) a ``CudaMemoryResource`` or ``ManagedMemoryResource``, optionally wrapped in a
    ``PoolMemoryResource`` and a ``LoggingResourceAdaptor``, and sets it as the device's
    resource. Devices that the previous call set up and this one does not are reset to
    librmm's initial resource. The previous current device is restored.

    Parameters
    ----------
    pool_allocator : bool
        Use a pool on top of the base resource.
    managed_memory : bool
        Use managed (unified) memory instead of ``cudaMalloc``.
    initial_pool_size, maximum_pool_size : int or str, optional
        Pool sizes; ignored unless ``pool_allocator`` is True (as in rmm).
    devices : int or list of int, optional
        The devices to set up (None: device 0).
    logging : bool
        Log every allocation and free to a CSV file per device.
    log_file_name : str, optional
        The log file (``.dev<N>`` is inserted per device); ``$RMM_LOG_FILE`` by default.

    Raises
    ------
    nbrmm.CudaUnavailableError
        Without a usable CUDA driver or GPU.
    ValueError
        If a size string does not parse.
    nbrmm.InvalidArgumentError
        If a device does not exist or the pool sizes are invalid (a ``ValueError``, and
        a ``RuntimeError`` as rmm raises).
    TypeError
        If ``devices`` is not an int or a list of ints.

    The devices and size strings are checked before any hook runs; the pool's own checks
    (multiples of 256, initial size within the maximum) run when the resources are built,
    after the hooks and before any device's resource changes. On any error no device's
    resource is changed.
    """
    if devices is None:
        devices = [0]
    elif isinstance(devices, int):
        devices = [devices]
    try:
        devices = list(devices)
    except TypeError:
        devices = None
    if devices is None or any(not isinstance(d, int) or isinstance(d, bool) for d in devices):
        raise TypeError("devices: expected an int or a list of ints")
    if pool_allocator:  # as in rmm, the sizes are not looked at without a pool
        for name, size in (("initial_pool_size", initial_pool_size),
                           ("maximum_pool_size", maximum_pool_size)):
            if size is not None:
                _nbrmm._parse_size(size, name)
    else:
        initial_pool_size = maximum_pool_size = None
    count = _nbrmm.get_device_count()
    if count == 0:
        _nbrmm._require_gpu("reinitialize()")
    for d in devices:
        if not 0 <= d < count:
            raise _nbrmm.InvalidArgumentError(
                f"devices: device {d} does not exist (this machine has {count} CUDA devices)"
            )
    with _lock:
        hooks = list(reversed(_hooks))
    for func, args, kwargs in hooks:
        func(*args, **kwargs)

    previous = _nbrmm.get_current_device()
    built = {}
    try:
        for d in devices:  # build everything first: a failure changes nothing
            _nbrmm.set_current_device(d)
            built[d] = _make_resource(pool_allocator, managed_memory, initial_pool_size,
                                      maximum_pool_size, logging, log_file_name, d)
        for d, res in built.items():
            _nbrmm.set_per_device_resource(d, res)
    finally:
        if previous >= 0:
            _nbrmm.set_current_device(previous)
    with _lock:
        for d in _initialized_devices - set(devices):
            if d < count:
                _nbrmm.reset_per_device_resource(d)
        _initialized_devices.clear()
        _initialized_devices.update(devices)


def is_initialized() -> bool:
    """Whether librmm's per-device map has an entry for the current device."""
    return _nbrmm.is_initialized()
