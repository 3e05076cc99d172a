"""Utilities (rmm's ``rmm.pylibrmm.utils``)."""

from nbrmm._nbrmm import _as_stream


def as_stream(stream):
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
