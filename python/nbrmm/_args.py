"""Checks of arguments given from Python that nbrmm's Python modules share: sizes,
pointers and streams, each error naming its parameter."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, SupportsIndex

if TYPE_CHECKING:
    from nbrmm._nbrmm import Stream


def type_name(obj: object) -> str:
    return type(obj).__name__


def check_size(size: SupportsIndex, param: str = "size") -> int:
    """``size`` as an int (a non-negative integer below 2**64), or the error for it."""
    if isinstance(size, bool):
        raise TypeError(f"{param}: expected an int, got bool")
    try:
        size = operator.index(size)  # an int exactly, also for int subclasses and NumPy's
    except TypeError:
        raise TypeError(f"{param}: expected an int, got {type_name(size)}") from None
    if size < 0:
        raise ValueError(f"{param}: must be non-negative, got {size}")
    if size >= 1 << 64:
        raise ValueError(f"{param}: {size} bytes is too large")
    return size


def check_ptr(ptr: SupportsIndex) -> int:
    """``ptr`` as an int (a pointer value in ``[0, 2**64)``), or the error for it."""
    if isinstance(ptr, bool):
        raise TypeError("ptr: expected the pointer as an int, got bool")
    try:
        ptr = operator.index(ptr)  # an int exactly, also for int subclasses and NumPy's
    except TypeError:
        raise TypeError(f"ptr: expected the pointer as an int, got {type_name(ptr)}") from None
    if not 0 <= ptr < 1 << 64:
        raise ValueError(f"ptr: not a pointer value: {ptr}")
    return ptr


def stream_for(obj: Any, param: str) -> Stream:
    """``nbrmm.Stream(obj)``, its errors worded for ``param`` (``Stream``'s own parameter is
    ``obj``). An error the object's own code raised goes on as it is."""
    from nbrmm import _nbrmm

    try:
        return _nbrmm.Stream(obj)
    except (TypeError, ValueError, NotImplementedError) as error:
        text = str(error)
        if not text.startswith("obj: "):
            raise
        try:
            renamed = type(error)(f"{param}: {text.removeprefix('obj: ')}")
        except Exception:  # noqa: BLE001 - a class that takes other arguments: as it is
            raise error from None
        raise renamed from None
