"""The worker plugin: one nbrmm configuration per worker process."""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import cloudpickle
from distributed import WorkerPlugin

import nbrmm.mr as _mr
from nbrmm._nbrmm import get_current_device as _get_current_device
from nbrmm._nbrmm import get_device_info as _get_device_info
from nbrmm.dask import _diagnostics
from nbrmm.dask._options import (
    Size,
    SizeOption,
    log_file_name,
    parse_directory,
    parse_flag,
    parse_libraries,
    parse_size,
)

if TYPE_CHECKING:
    from distributed import Worker
    from torch.cuda.memory import CUDAPluggableAllocator as _CUDAPluggableAllocator

    from nbrmm.allocators.numba import RMMNumbaManager

# The configuration installed in this process (librmm's map, CuPy's allocator and Numba's
# memory manager are per process, whatever the number of workers in it).
_lock = threading.RLock()
_active: _Configuration | None = None


class _Hooks(TypedDict, total=False):
    """The allocators of a configuration, by library."""

    cupy: Callable[[int], Any]  #: a CuPy allocator (``nbytes`` -> ``MemoryPointer``)
    torch: _CUDAPluggableAllocator
    numba: type[RMMNumbaManager]  #: a Numba memory manager class


@dataclass(eq=False)
class _Configuration:
    """What one setup installed, and what it replaced."""

    owner: NbrmmSetup  #: the plugin instance that installed it
    device: int
    resource: _mr.DeviceMemoryResource  #: the top of the graph, set in librmm's map
    logging: _mr.LoggingResourceAdaptor | None  #: the logging adaptor, if any
    hooks: _Hooks
    #: the resource of ``device`` before this configuration
    previous: _mr.DeviceMemoryResource | None = None
    #: CuPy's allocator before this configuration (None: CuPy's default)
    previous_cupy: Callable[[int], Any] | None = None


def _same(a: _mr.DeviceMemoryResource, b: _mr.DeviceMemoryResource) -> bool:
    """The same resource: one object, or two objects over the same librmm resource."""
    return a is b or a == b


class NbrmmSetup(WorkerPlugin):
    """A Dask worker plugin that sets up nbrmm on every worker, current and future.

    Register it with ``client.register_plugin(NbrmmSetup(...))``. On each worker it builds
    a resource graph for the worker's current CUDA device, sets it as the device's
    resource in librmm's per-device map (so Python and C++ code on the worker allocate
    from it), points the chosen libraries' allocators at it, and adds the ``nbrmm``
    worker metric. The options mean what dask-cuda's ``rmm_*`` options mean.

    The graph, from the bottom: the base resource (``factory()``, or a
    ``ManagedMemoryResource`` with ``managed_memory``, a ``CudaAsyncMemoryResource`` with
    ``async_alloc``, else a ``CudaMemoryResource``); a ``PoolMemoryResource`` when
    ``initial_pool_size`` is set (without ``async_alloc``), or a ``LimitingResourceAdaptor``
    when ``maximum_pool_size`` is set with ``async_alloc``; a ``LoggingResourceAdaptor``
    with ``log_directory``; a ``TrackingResourceAdaptor`` with ``track_allocations``; and a
    ``StatisticsResourceAdaptor`` on top with ``statistics``.

    Parameters
    ----------
    initial_pool_size : int, float, str or None
        Initial size of the pool (dask-cuda's ``rmm_pool_size``): bytes (int), a fraction
        of the device's total memory (float in (0, 1]) or a string such as ``"4GB"``.
        None or 0: no pool. With ``async_alloc``, the initial size of the CUDA pool.
    maximum_pool_size : int, float, str or None
        The most the pool may grow to (``rmm_maximum_pool_size``); None: all of the
        device's memory. With ``async_alloc``, a limit on the bytes allocated. Needs
        ``initial_pool_size`` or ``async_alloc``.
    managed_memory : bool
        Build the pool (or the plain resource) over managed memory
        (``rmm_managed_memory``). Not with ``async_alloc`` or ``factory``.
    async_alloc : bool
        Use CUDA's stream-ordered allocator (``rmm_async``). Not with ``factory``.
    release_threshold : int, float, str or None
        With ``async_alloc``: the memory the CUDA pool keeps when it could release more
        (``rmm_release_threshold``).
    log_directory : str or os.PathLike, optional
        Log every allocation and free of each worker to
        ``<log_directory>/rmm_log_<worker name>.dev<device>.txt`` (``rmm_log_directory``).
        The directory is created on the worker when missing. Unlike dask-cuda, logging
        also works without a pool.
    track_allocations : bool
        Add a ``TrackingResourceAdaptor`` (``rmm_track_allocations``).
    external_lib_list : str, list of str or None
        Libraries whose allocator to point at the worker's resource: ``"cupy"``,
        ``"torch"``, ``"numba"`` (a list or a comma-separated string;
        ``rmm_allocator_external_lib_list``). Each hook is bound to the resource built
        here (``mr=``), not to whatever is current later.
    factory : callable, optional
        ``factory() -> DeviceMemoryResource``: builds the base resource on the worker,
        with the worker's device current. Any graph nbrmm can express. It travels to the
        workers with the plugin, so it must be picklable (a module-level function, or a
        closure over picklable values).
    statistics : bool
        Put a ``StatisticsResourceAdaptor`` on top (default True); the ``nbrmm`` metric
        and :func:`nbrmm.dask.gather_statistics` read it. False builds exactly dask-cuda's
        graph.

    Raises
    ------
    TypeError, ValueError
        When an option is invalid (on the client, before anything is sent); the message
        names the parameter.

    Notes
    -----
    A worker holds one configuration: registering the plugin again (it is always named
    ``"nbrmm"``) first tears down the previous one, which puts back the resource that was
    current before it and CuPy's previous allocator, and removes the metrics; then the
    new graph, with a new statistics adaptor, is built from scratch (nothing is stacked
    on the previous graph). Memory allocated under the previous configuration stays
    valid and returns to the resource that allocated it, whose statistics adaptor counts
    the frees. A restarted worker is a new process set up once.

    A setup that fails (a factory that raises, torch refusing a new allocator) changes
    nothing on the worker and raises on the client. Through ``client.register_plugin``,
    distributed has torn the previous plugin down before the new one's setup runs, so
    the worker is then as before any nbrmm plugin (the resource that was current before
    it); register a working plugin again.

    PyTorch and Numba choose their allocator once per process: torch refuses a new
    allocator after its first CUDA allocation (setup then raises ``RuntimeError``;
    restart the workers instead), and a Numba CUDA context keeps the memory manager it
    was created with. Neither can be put back at teardown.
    """

    name = "nbrmm"
    idempotent = False

    def __init__(
        self,
        *,
        initial_pool_size: SizeOption = None,
        maximum_pool_size: SizeOption = None,
        managed_memory: bool = False,
        async_alloc: bool = False,
        release_threshold: SizeOption = None,
        log_directory: str | os.PathLike[str] | None = None,
        track_allocations: bool = False,
        external_lib_list: str | list[str] | tuple[str, ...] | None = None,
        factory: Callable[[], _mr.DeviceMemoryResource] | None = None,
        statistics: bool = True,
    ) -> None:
        self.initial_pool_size = parse_size("initial_pool_size", initial_pool_size)
        self.maximum_pool_size = parse_size("maximum_pool_size", maximum_pool_size)
        self.managed_memory = parse_flag("managed_memory", managed_memory)
        self.async_alloc = parse_flag("async_alloc", async_alloc)
        self.release_threshold = parse_size("release_threshold", release_threshold)
        self.log_directory = parse_directory(log_directory)
        self.track_allocations = parse_flag("track_allocations", track_allocations)
        self.external_lib_list = parse_libraries(external_lib_list)
        self.statistics = parse_flag("statistics", statistics)
        if factory is not None and not callable(factory):
            raise TypeError(
                f"factory: expected a callable returning a resource, got {type(factory).__name__}"
            )
        self.factory = factory

        if self.async_alloc and self.managed_memory:
            raise ValueError("managed_memory: incompatible with async_alloc=True")
        if self.release_threshold is not None and not self.async_alloc:
            raise ValueError("release_threshold: needs async_alloc=True")
        if (
            self.maximum_pool_size is not None
            and self.initial_pool_size is None
            and not self.async_alloc
        ):
            raise ValueError(
                "maximum_pool_size: needs initial_pool_size (a pool) or async_alloc=True"
            )
        initial, maximum = self.initial_pool_size, self.maximum_pool_size
        if (
            initial is not None
            and maximum is not None
            and initial.bytes is not None
            and maximum.bytes is not None
            and maximum.bytes < initial.bytes
        ):
            raise ValueError(
                f"maximum_pool_size: {maximum.bytes} bytes is less than initial_pool_size "
                f"({initial.bytes} bytes)"
            )
        if factory is not None:
            if self.managed_memory or self.async_alloc:
                raise ValueError(
                    "factory: builds the base resource, so it cannot be combined with "
                    "managed_memory or async_alloc"
                )
            try:
                cloudpickle.dumps(factory)
            except Exception as exc:  # noqa: BLE001 - any pickling failure
                raise TypeError(
                    f"factory: must be picklable to reach the workers ({type(exc).__name__}: "
                    f"{exc})"
                ) from exc

    def __repr__(self) -> str:
        shown = []
        for key in inspect.signature(type(self).__init__).parameters:
            if key == "self":
                continue
            value = getattr(self, key)
            if key == "statistics" or value not in (None, False, ()):
                shown.append(f"{key}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"

    # ------------------------------------------------------------------ on the worker

    def _size(
        self,
        name: Literal["initial_pool_size", "maximum_pool_size", "release_threshold"],
        device: int,
    ) -> int | None:
        """An option's size in bytes on ``device`` (None when not set)."""
        size: Size | None = getattr(self, name)
        if size is None:
            return None

        def total_memory() -> int:
            try:
                return _get_device_info(device)["total_memory"]
            except Exception as exc:  # noqa: BLE001 - no device, driver error, ...
                raise ValueError(
                    f"{name}: a fraction of device memory needs a CUDA device, and this "
                    f"worker has none usable ({exc})"
                ) from exc

        return size.resolve(total_memory)

    def _build(self, device: int, worker: Worker | None) -> _Configuration:
        """The resource graph and the hooks, built without changing anything global."""
        initial = self._size("initial_pool_size", device)
        maximum = self._size("maximum_pool_size", device)
        release = self._size("release_threshold", device)
        if initial is not None and maximum is not None and maximum < initial:
            raise ValueError(
                f"maximum_pool_size: {maximum} bytes is less than initial_pool_size "
                f"({initial} bytes) on device {device}"
            )

        res: _mr.DeviceMemoryResource
        if self.factory is not None:
            res = self.factory()
            if not isinstance(res, _mr.DeviceMemoryResource):
                raise TypeError(
                    "factory: must return an nbrmm.mr.DeviceMemoryResource, returned "
                    f"{type(res).__name__}"
                )
            if res.device != device:
                raise ValueError(
                    f"factory: returned a resource of device {res.device}, but the "
                    f"worker's device is {device}"
                )
        elif self.async_alloc:
            res = _mr.CudaAsyncMemoryResource(
                initial_pool_size=initial, release_threshold=release
            )
        elif self.managed_memory:
            res = _mr.ManagedMemoryResource()
        else:
            res = _mr.CudaMemoryResource()

        if self.async_alloc:
            if maximum is not None:
                res = _mr.LimitingResourceAdaptor(res, allocation_limit=maximum)
        elif initial is not None:
            res = _mr.PoolMemoryResource(
                res, initial_pool_size=initial, maximum_pool_size=maximum
            )
        logging = None
        if self.log_directory is not None:
            os.makedirs(self.log_directory, exist_ok=True)
            name = getattr(worker, "name", None)
            res = logging = _mr.LoggingResourceAdaptor(
                res, log_file_name=log_file_name(self.log_directory, name)
            )
        if self.track_allocations:
            res = _mr.TrackingResourceAdaptor(res)
        if self.statistics:
            res = _mr.StatisticsResourceAdaptor(res)

        hooks: _Hooks = {}
        for library in self.external_lib_list:
            # The hook modules import without their library and raise at use.
            try:
                if library == "cupy":
                    from nbrmm.allocators.cupy import cupy_allocator

                    hooks["cupy"] = cupy_allocator(mr=res)
                elif library == "torch":
                    from nbrmm.allocators.torch import torch_allocator

                    hooks["torch"] = torch_allocator(mr=res)
                else:
                    from nbrmm.allocators.numba import numba_manager

                    hooks["numba"] = numba_manager(res)
            except ImportError as exc:
                raise ImportError(
                    f"external_lib_list: {library!r} cannot be used on this worker: {exc}",
                    name=getattr(exc, "name", None),
                ) from exc
        return _Configuration(
            owner=self,
            device=device,
            resource=res,
            logging=logging,
            hooks=hooks,
        )

    def setup(self, worker: Worker | None = None) -> None:
        """Build this worker's resource graph and install it (see the class notes).

        When building fails (a bad factory, a missing library, a pool larger than the
        device), nothing of the new configuration is installed and the exception reaches
        ``client.register_plugin``.
        """
        device = _get_current_device()
        config = self._build(device, worker)
        with _lock:
            _install(config)
        if worker is not None:
            _diagnostics.add_metrics(worker)

    def teardown(self, worker: Worker | None = None) -> None:
        """Remove this plugin's configuration, if it is the one installed, and the metrics.

        Puts back the resource that was current before, and CuPy's previous allocator
        when CuPy still uses this configuration's.
        """
        if worker is not None:
            _diagnostics.remove_metrics(worker)
        with _lock:
            if _active is not None and _active.owner is self:
                _uninstall(_active)


def _install(config: _Configuration) -> None:
    """Make ``config`` the process's configuration (call with ``_lock`` held)."""
    global _active
    torch_hook = config.hooks.get("torch")
    if torch_hook is not None:
        # First, as it is the one step that can fail: the previous configuration is then
        # left whole.
        import torch

        try:
            torch.cuda.memory.change_current_allocator(torch_hook)
        except RuntimeError as exc:
            raise RuntimeError(
                "external_lib_list: torch cannot take a new allocator in this process "
                f"({exc}); restart the workers (Client.restart) to apply the configuration"
            ) from exc
    if _active is not None:
        _uninstall(_active)
    config.previous = _mr.get_per_device_resource(config.device)
    _mr.set_per_device_resource(config.device, config.resource)
    cupy_hook = config.hooks.get("cupy")
    if cupy_hook is not None:
        import cupy.cuda.memory

        config.previous_cupy = cupy.cuda.memory.get_allocator()
        cupy.cuda.memory.set_allocator(cupy_hook)
    numba_manager = config.hooks.get("numba")
    if numba_manager is not None:
        from numba import cuda

        cuda.set_memory_manager(numba_manager)
    _active = config


def _uninstall(config: _Configuration) -> None:
    """Undo ``config`` where it is still in place (call with ``_lock`` held)."""
    global _active
    if config.previous is not None and _same(
        _mr.get_per_device_resource(config.device), config.resource
    ):
        _mr.set_per_device_resource(config.device, config.previous)
    cupy_hook = config.hooks.get("cupy")
    if cupy_hook is not None:
        import cupy.cuda.memory

        if cupy.cuda.memory.get_allocator() is cupy_hook:
            cupy.cuda.memory.set_allocator(config.previous_cupy)
    if config.logging is not None:
        config.logging.flush()
    config.previous = config.previous_cupy = None
    if _active is config:
        _active = None


