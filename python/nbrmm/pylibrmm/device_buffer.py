"""Device buffers and copies between raw pointers (rmm's ``rmm.pylibrmm.device_buffer``).

:class:`DeviceBuffer` and :func:`to_device` are nbrmm's own; the pointer copies work on
raw addresses (ints), as rmm's do, and order the copy on ``stream``: on the default
stream they also wait for it, on any other stream they return at once.
"""

from typing import Any, Protocol, runtime_checkable

from nbrmm._nbrmm import (
    DEFAULT_STREAM,
    DeviceBuffer,
    copy_device_to_ptr,
    copy_host_to_ptr,
    copy_ptr_to_host,
    to_device,
)


@runtime_checkable
class SupportsCUDAArrayInterface(Protocol):
    """An object that describes device memory through ``__cuda_array_interface__``
    (what :meth:`DeviceBuffer.copy_from_device` accepts)."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


#: This module. Its namespace refers to it, so that the interpreter clears the namespace at
#: exit (letting go of the Streams in it) also where something of it outlives the module,
#: such as a function that another library keeps.
_this_module = __import__("sys").modules[__name__]

__all__ = [
    "DEFAULT_STREAM",
    "DeviceBuffer",
    "SupportsCUDAArrayInterface",
    "copy_device_to_ptr",
    "copy_host_to_ptr",
    "copy_ptr_to_host",
    "to_device",
]
