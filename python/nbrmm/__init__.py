"""nbrmm: nanobind bindings for librmm, the RAPIDS Memory Manager.

One memory manager that Python and C++ agree on: the current device resource lives in
librmm's per-device map, every allocating call takes ``mr=``, and resources, buffers and
the Python callables behind them are kept alive by whoever uses them, C++ included.
"""

import atexit as _atexit
import os as _os

import librmm as _librmm  # type: ignore[import-untyped]  # no type information

_librmm.load_library()

from nbrmm import _nbrmm  # noqa: E402
from nbrmm._public import publish as _publish  # noqa: E402
from nbrmm._nbrmm import (  # noqa: E402
    ArgumentRangeError,
    DEFAULT_STREAM,
    LEGACY_DEFAULT_STREAM,
    PER_THREAD_DEFAULT_STREAM,
    BadAlloc,
    Buffer,
    CudaError,
    CudaStreamFlags,
    CudaStreamPool,
    CudaUnavailableError,
    DeviceBuffer,
    FileOpenError,
    InvalidArgumentError,
    LogicError,
    OutOfMemory,
    Stream,
    available_device_memory,
    get_current_device,
    get_device_count,
    get_device_info,
    set_current_device,
    to_device,
)
from nbrmm import mr  # noqa: E402
from nbrmm.logger import (  # noqa: E402
    disable_logging,
    enable_logging,
    flush_logger,
    get_flush_level,
    get_log_filenames,
    get_logging_level,
    level_enum,
    set_flush_level,
    set_logging_level,
    should_log,
)
from nbrmm._pickle import loads, unpickling_resource  # noqa: E402
from nbrmm._reinitialize import (  # noqa: E402
    is_initialized,
    register_reinitialize_hook,
    reinitialize,
    unregister_reinitialize_hook,
)
from nbrmm._version import __git_commit__, __version__  # noqa: E402
from nbrmm.rmm import RMMError  # noqa: E402

# rmm's module layout: ``import rmm`` makes these submodules attributes of the package.
from nbrmm import librmm, pylibrmm, rmm, statistics  # noqa: E402



def get_include() -> str:
    """The folder holding ``nbrmm/nbrmm.hpp``, nbrmm's C++ API for extensions.

    Returns
    -------
    str
        Add it to the include path of a C++ extension (together with librmm's headers).
    """
    import os

    # Installed next to the extension (also in editable installs).
    return os.path.join(os.path.dirname(_nbrmm.__file__), "include")




def _at_exit() -> None:
    # Other threads stop entering Python from inside nbrmm (they park where they would
    # take the GIL back), so none is unwound by the interpreter's shutdown mid-call.
    _nbrmm._begin_exit()
    # Threads still running now (daemon threads) are never resumed: the objects they hold
    # stay with them, which nanobind's leak report would list as leaks.
    import threading

    if any(t.is_alive() and t is not threading.current_thread() for t in threading.enumerate()):
        _nbrmm._abandon_thread_objects()
    # Frees that waited for a resource's Python callback to return are done now.
    _nbrmm._perform_waiting_frees()
    # Python objects held in librmm's per-device map are released before the interpreter
    # shuts down; C++ keeps using the resources themselves. The extension does it once more
    # after the last atexit handler (when CPython clears its namespace), for what a handler
    # that runs after this one (registered before nbrmm was imported) sets or hands to C++.
    _nbrmm._release_python_objects()


_atexit.register(_at_exit)
# A forked child must not free the parent's blocks (nor touch its CUDA context).
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_nbrmm._forget_waiting_frees)

#: This module. Its namespace refers to it, so that the interpreter clears the namespace at
#: exit (letting go of the Streams in it) also where something of it outlives the module,
#: such as a function that another library keeps.
_this_module = __import__("sys").modules[__name__]

__all__ = [
    "ArgumentRangeError",
    "BadAlloc",
    "Buffer",
    "CudaError",
    "CudaStreamFlags",
    "CudaStreamPool",
    "CudaUnavailableError",
    "DEFAULT_STREAM",
    "DeviceBuffer",
    "FileOpenError",
    "InvalidArgumentError",
    "LEGACY_DEFAULT_STREAM",
    "LogicError",
    "OutOfMemory",
    "PER_THREAD_DEFAULT_STREAM",
    "RMMError",
    "Stream",
    "__git_commit__",
    "__version__",
    "available_device_memory",
    "disable_logging",
    "enable_logging",
    "flush_logger",
    "get_current_device",
    "get_device_count",
    "get_device_info",
    "get_flush_level",
    "get_include",
    "get_log_filenames",
    "get_logging_level",
    "is_initialized",
    "level_enum",
    "loads",
    "mr",
    "register_reinitialize_hook",
    "reinitialize",
    "set_current_device",
    "set_flush_level",
    "set_logging_level",
    "should_log",
    "to_device",
    "unpickling_resource",
    "unregister_reinitialize_hook",
]

# The extension's classes exported here say `nbrmm` (those of nbrmm.mr said so already).
_publish(__name__, globals(), __all__)
