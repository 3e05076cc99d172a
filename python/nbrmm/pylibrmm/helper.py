"""Helpers (rmm's ``rmm.pylibrmm.helper``): parsing sizes such as ``"1.5 GiB"``."""

from nbrmm._nbrmm import _parse_size


def parse_bytes(s: int | str) -> int:
    """A size in bytes from an int or a string such as ``"100 MB"`` or ``"1.5GiB"``.

    The grammar is rmm's: a non-negative decimal number (``"1"``, ``"1.5"``), optional
    spaces or tabs, and an optional case-insensitive unit: ``B``, an SI unit (``kB``,
    ``MB``, ``GB``, ``TB``, ``PB``: powers of 1000) or a binary one (``KiB`` ... ``PiB``:
    powers of 1024). Fractional bytes are dropped. Every size argument of nbrmm is read
    this way.

    Parameters
    ----------
    s : int or str
        The size.

    Returns
    -------
    int
        The size in bytes.

    Raises
    ------
    ValueError
        If ``s`` is a string that does not parse ("Could not parse ...").
    nbrmm.ArgumentRangeError
        If the size is negative or does not fit in 64 bits, also a string with more
        digits than a float can hold (a ``ValueError``, and the ``OverflowError`` rmm
        raises).
    TypeError
        If ``s`` is neither an int nor a str.

    Examples
    --------
    >>> from nbrmm.pylibrmm.helper import parse_bytes
    >>> parse_bytes("1.5 KiB"), parse_bytes("2kb"), parse_bytes(7)
    (1536, 2000, 7)
    """
    return _parse_size(s, "s")


__all__ = ["parse_bytes"]
