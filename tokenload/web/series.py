"""The live view's building blocks: a ring of columns that thins its old half, the histogram of
the values added between two snapshots of a cumulative one, and rounding for the JSON. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from tokenload.metrics.histogram import LogHistogram

__all__ = ["Ring", "rounded", "window_histogram"]


def window_histogram(
    new: tuple[dict[int, int], int, int], old: tuple[dict[int, int], int, int], relative_error: float
) -> LogHistogram:
    """The histogram of the values added between two snapshots of one cumulative histogram."""
    h = LogHistogram(relative_error)
    old_b = old[0]
    h.buckets = {i: c - old_b.get(i, 0) for i, c in new[0].items() if c > old_b.get(i, 0)}
    h.zero_count = max(0, new[1] - old[1])
    h.count = sum(h.buckets.values()) + h.zero_count
    # The window's exact extremes are unknown: do not let quantile() clamp to them.
    h.min, h.max = 0.0, math.inf
    return h


def rounded(v: float | None, nd: int = 2) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return round(v, nd)


class Ring:
    """Columns of equal length; past ``capacity`` rows the older half is thinned by two, so a long
    run keeps its whole history at a coarser resolution and the memory stays bounded."""

    def __init__(self, fields: Iterable[str], capacity: int) -> None:
        self.fields = ("t", *fields)
        self.capacity = max(8, capacity)
        self.cols: dict[str, list[Any]] = {f: [] for f in self.fields}

    def __len__(self) -> int:
        return len(self.cols["t"])

    def append(self, row: dict[str, Any]) -> None:
        for f in self.fields:
            self.cols[f].append(row.get(f))
        if len(self) > self.capacity:
            half = len(self) // 2
            for f in self.fields:
                col = self.cols[f]
                self.cols[f] = col[:half:2] + col[half:]

    def since(self, t: float | None) -> dict[str, list[Any]]:
        ts = self.cols["t"]
        start = 0
        if t is not None:
            # rows are appended in time order: binary search for the first t > since
            lo, hi = 0, len(ts)
            while lo < hi:
                mid = (lo + hi) // 2
                if ts[mid] <= t:
                    lo = mid + 1
                else:
                    hi = mid
            start = lo
        return {f: c[start:] for f, c in self.cols.items()}
