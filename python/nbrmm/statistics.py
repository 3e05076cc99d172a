"""Allocation statistics (rmm.statistics-compatible namespace)."""

from dataclasses import dataclass


@dataclass
class Statistics:
    """Allocation counters of a ``StatisticsResourceAdaptor``.

    Attributes
    ----------
    current_bytes : int
        Bytes allocated and not yet freed.
    current_count : int
        Allocations not yet freed.
    peak_bytes : int
        Highest ``current_bytes`` seen.
    peak_count : int
        Highest ``current_count`` seen.
    total_bytes : int
        Bytes allocated in all.
    total_count : int
        Allocations made in all.
    """

    current_bytes: int
    current_count: int
    peak_bytes: int
    peak_count: int
    total_bytes: int
    total_count: int


__all__ = ["Statistics"]
