"""rmm's ``rmm.rmm`` module: :class:`RMMError`, :func:`reinitialize` and its hooks.

The functions are nbrmm's own (the same objects as ``nbrmm.reinitialize`` etc.). As in
rmm, the module also refers to :mod:`nbrmm.mr` as ``mr`` (``nbrmm.rmm.mr is nbrmm.mr``).
"""

from nbrmm import mr
from nbrmm._reinitialize import (
    is_initialized,
    register_reinitialize_hook,
    reinitialize,
    unregister_reinitialize_hook,
)


class RMMError(Exception):
    """An error with a numeric code, as rmm defines it.

    rmm defines this class but raises it nowhere; nbrmm keeps it, with the same
    constructor, for programs that name it (raise or catch it themselves).

    Parameters
    ----------
    errcode : int
        The error code, kept as ``errcode``.
    msg : str
        The message.
    """

    def __init__(self, errcode: int, msg: str) -> None:
        self.errcode = errcode
        super().__init__(msg)


__all__ = [
    "RMMError",
    "is_initialized",
    "register_reinitialize_hook",
    "reinitialize",
    "unregister_reinitialize_hook",
]
