"""Utilities (rmm's ``rmm.pylibrmm.utils``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbrmm._nbrmm import Stream, _as_stream

if TYPE_CHECKING:
    from nbrmm._typing import CudaStreamLike


def as_stream(stream: CudaStreamLike) -> Stream:
    """``stream`` as an :class:`nbrmm.Stream`, refusing None.

    This is how every ``stream=`` argument of nbrmm is read: a :class:`~nbrmm.Stream` is
    returned as it is; any other object implementing the CUDA stream protocol
    (``__cuda_stream__``, version 0) is wrapped in a non-owning Stream that keeps it alive.

    Parameters
    ----------
    stream : Stream or object with ``__cuda_stream__``
        The stream.

    Returns
    -------
    Stream
        The stream.

    Raises
    ------
    TypeError
        If ``stream`` is None ("stream argument cannot be None") or is not stream-like.

    Examples
    --------
    >>> import nbrmm
    >>> from nbrmm.pylibrmm.utils import as_stream
    >>> as_stream(nbrmm.DEFAULT_STREAM) is nbrmm.DEFAULT_STREAM
    True
    """
    return _as_stream(stream)


__all__ = ["as_stream"]
