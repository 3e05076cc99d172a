"""Experimental memory resources (rmm's ``rmm.pylibrmm.memory_resource.experimental``).

As in rmm, the module also has the base class ``DeviceMemoryResource`` (the same object as
``nbrmm.mr.DeviceMemoryResource``), which rmm's experimental resources derive from.
"""

from nbrmm.mr import DeviceMemoryResource
from nbrmm.mr.experimental import CudaAsyncManagedMemoryResource

# ``DeviceMemoryResource`` is reachable here as in rmm, not exported (rmm's module has no
# ``__all__``; its public names are the experimental resources).
__all__ = ["CudaAsyncManagedMemoryResource"]
