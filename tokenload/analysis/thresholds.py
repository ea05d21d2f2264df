"""The named thresholds the diagnosis decides with. Every verdict quotes the ones it used;
override any of them with ``Thresholds(**{...})`` (``tokenload report --threshold NAME=VALUE``)."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Thresholds"]


@dataclass(frozen=True, slots=True)
class Thresholds:
    #: Failed share of a step's requests above which the step's verdict is ``errors``.
    error_rate: float = 0.05
    #: A step is saturated when throughput grew by less than this share of the load's growth
    #: since the previous step (1.0 = perfect scaling) ...
    scaling_efficiency: float = 0.5
    #: ... or a latency (TTFT or TPOT p50) grew past this multiple of its unloaded value while the
    #: throughput kept up with less than ``scaling_with_latency`` of the load's growth.
    latency_growth: float = 3.0
    scaling_with_latency: float = 0.8
    #: KV cache usage (time-weighted max) at or above which the cache counts as full.
    kv_full_ratio: float = 0.9
    #: Mean waiting requests above which requests count as queued.
    waiting_mean: float = 0.5
    #: Running requests pinned: max - mean below this share of max while requests wait.
    pinned_spread: float = 0.25
    #: Fewer requests than this completing inside a step: its throughput is not judged.
    min_completed: float = 3.0
    #: The API server is the bound when more than this share of the server's TTFT is spent
    #: outside its queue and prefill, while running stays under this share of the users.
    frontend_share: float = 0.5
    frontend_running_share: float = 0.8
    #: With the GPU's peaks known: when the larger of the achieved FLOP/s and bandwidth shares of
    #: peak reaches this, the larger one is the bound (below it, the latency growth decides).
    utilization_bound: float = 0.3

    @classmethod
    def with_overrides(cls, overrides: dict[str, float]) -> Thresholds:
        known = {f.name for f in fields(cls)}
        bad = sorted(set(overrides) - known)
        if bad:
            raise ValueError(
                f"--threshold: unknown name {bad[0]!r}; expected one of {', '.join(sorted(known))}"
            )
        return cls(**overrides)
