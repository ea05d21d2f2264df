"""A mergeable log-bucket histogram with a bounded relative error and exact counts.

Buckets grow geometrically by ``gamma = (1 + a) / (1 - a)``; a value ``v`` goes to bucket
``ceil(log_gamma(v))`` and is represented by ``2 * gamma**i / (gamma + 1)``, which is within a
relative error ``a`` of every value in that bucket (the DDSketch construction). Counts, sum, min
and max are exact. Two histograms with the same ``relative_error`` merge by adding bucket counts,
so percentiles over many workers are computed from the merged buckets, never by averaging
percentiles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["DEFAULT_RELATIVE_ERROR", "LogHistogram"]

DEFAULT_RELATIVE_ERROR = 0.01
#: Values at or below this (in the histogram's unit) are counted in a zero bucket.
_MIN_TRACKED = 1e-6


class LogHistogram:
    """Histogram of non-negative values. ``add(v, n)`` counts ``v`` ``n`` times."""

    __slots__ = ("_inv_log_gamma", "buckets", "count", "max", "min", "relative_error", "sum", "zero_count")

    def __init__(self, relative_error: float = DEFAULT_RELATIVE_ERROR) -> None:
        if not 0 < relative_error < 1:
            raise ValueError(f"relative_error must be in (0, 1), got {relative_error}")
        self.relative_error = relative_error
        gamma = (1 + relative_error) / (1 - relative_error)
        self._inv_log_gamma = 1.0 / math.log(gamma)
        self.buckets: dict[int, int] = {}
        self.clear()

    @property
    def gamma(self) -> float:
        return (1 + self.relative_error) / (1 - self.relative_error)

    def add(self, value: float, n: int = 1) -> None:
        if value != value or value < 0:  # NaN or negative: a bug upstream, never silently binned
            raise ValueError(f"histogram values must be >= 0, got {value}")
        self.count += n
        self.sum += value * n
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        if value <= _MIN_TRACKED:
            self.zero_count += n
            return
        idx = math.ceil(math.log(value) * self._inv_log_gamma)
        b = self.buckets
        b[idx] = b.get(idx, 0) + n

    def add_pairs(self, pairs: Iterable[tuple[float, int]]) -> None:
        """``add(v, n)`` for each ``(v, n)``: a request's inter-token latencies, in one call (the
        same arithmetic as :meth:`add`, with the attribute lookups hoisted out of the loop)."""
        b = self.buckets
        inv, log, ceil = self._inv_log_gamma, math.log, math.ceil
        count, total, zero, lo, hi = self.count, self.sum, self.zero_count, self.min, self.max
        for v, n in pairs:
            if v != v or v < 0:
                raise ValueError(f"histogram values must be >= 0, got {v}")
            count += n
            total += v * n
            if v < lo:
                lo = v
            if v > hi:
                hi = v
            if v <= _MIN_TRACKED:
                zero += n
                continue
            i = ceil(log(v) * inv)
            b[i] = b.get(i, 0) + n
        self.count, self.sum, self.zero_count, self.min, self.max = count, total, zero, lo, hi

    def merge(self, other: LogHistogram) -> None:
        if other.relative_error != self.relative_error:
            raise ValueError("cannot merge histograms with different relative errors")
        if not other.count:
            return
        b = self.buckets
        for idx, n in other.buckets.items():
            b[idx] = b.get(idx, 0) + n
        self.zero_count += other.zero_count
        self.count += other.count
        self.sum += other.sum
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def clear(self) -> None:
        self.buckets.clear()
        self.zero_count = 0
        self.count = 0
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """The value at quantile ``q`` (0..1) by nearest rank, within ``relative_error`` of the truth."""
        if not self.count:
            return None
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        rank = max(1, math.ceil(q * self.count))
        if rank <= self.zero_count:
            return self.min if self.min <= _MIN_TRACKED else 0.0
        seen = self.zero_count
        gamma = self.gamma
        for idx in sorted(self.buckets):
            seen += self.buckets[idx]
            if seen >= rank:
                value = 2.0 * gamma**idx / (gamma + 1.0)
                # The extremes are known exactly; never report beyond them.
                return min(max(value, self.min), self.max)
        return self.max

    def summary(self, quantiles: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99)) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {"count": self.count, "mean": self.mean}
        for q in quantiles:
            out[f"p{round(q * 100, 3):g}"] = self.quantile(q)
        out["min"] = self.min if self.count else None
        out["max"] = self.max if self.count else None
        return out

    def to_dict(self) -> dict[str, Any]:
        """A msgpack/JSON-friendly form (lists, not int-keyed maps) for worker -> master reports."""
        keys = list(self.buckets)
        return {
            "e": self.relative_error,
            "i": keys,
            "c": [self.buckets[k] for k in keys],
            "z": self.zero_count,
            "n": self.count,
            "s": self.sum,
            "lo": self.min if self.count else None,
            "hi": self.max if self.count else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogHistogram:
        h = cls(data["e"])
        h.buckets = dict(zip(data["i"], data["c"], strict=True))
        h.zero_count = data["z"]
        h.count = data["n"]
        h.sum = data["s"]
        if h.count:
            h.min = data["lo"]
            h.max = data["hi"]
        return h
