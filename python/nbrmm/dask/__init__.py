"""nbrmm on every worker of a Dask cluster (``pip install "nbrmm[dask]"``).

- :class:`NbrmmSetup`: a worker plugin that sets up nbrmm on every worker, current and
  future, with dask-cuda's ``rmm_*`` options, any resource graph built by a factory, a
  statistics adaptor on top, and CuPy / PyTorch / Numba allocators bound to it.
- The ``nbrmm`` worker metric (bytes used / held), also shown as distributed's ``rmm``
  metric, which the dashboard plots.
- :func:`gather_statistics`: every worker's statistics in one table.
- Dask serialization of :class:`nbrmm.Buffer` (``dask`` and ``cuda`` families) and
  ``dask.sizeof`` for it, registered when this module is imported (the plugin imports it
  on every worker).

Examples
--------
>>> from distributed import Client, LocalCluster
>>> from nbrmm.dask import NbrmmSetup, gather_statistics
>>> client = Client(LocalCluster(n_workers=2))                    # doctest: +SKIP
>>> client.register_plugin(NbrmmSetup(initial_pool_size="4GB",
...                                   external_lib_list=["cupy"]))  # doctest: +SKIP
>>> gather_statistics(client)                                     # doctest: +SKIP
"""

try:
    import dask.sizeof as _dask_sizeof
    import distributed as _distributed  # noqa: F401
except ImportError as exc:
    raise ImportError(
        "nbrmm.dask needs Dask's distributed scheduler: install it with "
        f"pip install 'nbrmm[dask]'. Importing it failed: {exc}",
        name=getattr(exc, "name", None),
    ) from exc

from nbrmm import _sizeof
from nbrmm._public import publish as _publish
from nbrmm.dask import _protocol  # noqa: F401 - registers the serializers
from nbrmm.dask._diagnostics import (
    dump_snapshots,
    dump_worker_snapshot,
    gather_memory_by_tag,
    gather_statistics,
    memory_usage,
    nbrmm_metric,
    worker_memory_by_tag,
    worker_statistics,
)
from nbrmm.dask._plugin import NbrmmSetup

_sizeof.register(_dask_sizeof.sizeof)

__all__ = [
    "NbrmmSetup",
    "dump_snapshots",
    "dump_worker_snapshot",
    "gather_memory_by_tag",
    "gather_statistics",
    "memory_usage",
    "nbrmm_metric",
    "worker_memory_by_tag",
    "worker_statistics",
]

_publish("nbrmm.dask", globals(), __all__)
