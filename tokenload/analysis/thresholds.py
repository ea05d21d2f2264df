"""The named thresholds the diagnosis decides with. Every verdict quotes the ones it used;
override any of them with ``Thresholds(**{...})`` (``tokenload report --threshold NAME=VALUE``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from tokenload.analysis.stepmodel import STEP_OVERHEAD_MS

__all__ = ["CLOSE_CALL", "CLOSE_CALL_AGREED", "Thresholds"]

#: What a close call (``Thresholds.saturation_margin``) means, in the words every output that
#: shows one uses: the reports' step and knee sentences, ``tokenload compare``'s note and the
#: live page's step table (tokenload.report.tables.verdict_notes; the console's table says "close call").
CLOSE_CALL = "the predicted gain from 2x load was near the saturation line, where the call is often wrong"

#: How often the step model's saturated-or-not call agreed with the ground truth within the
#: default margin (agreed, of) and outside it (agreed, of), with and without the cap given:
#: bench/verdict_accuracy.py's development seeds 1 and 5 (9 of 21, 591 of 609), held-out seeds
#: 2, 3, 4, 7 and 8 (25 of 40, 1,548 of 1,614) and seeds 9 and 10, drawn after the margin was
#: set (19 of 31, 606 of 631), pooled; measured 2026-12-06, bench/RESULTS.md ("Close calls").
CLOSE_CALL_AGREED = ((53, 92), (2745, 2854))


@dataclass(frozen=True, slots=True)
class Thresholds:
    #: Failed share of a step's requests above which the step's verdict is ``errors``.
    error_rate: float = 0.05
    #: Saturated: doubling the load is predicted (or, without a step-time model, was seen from the
    #: step below) to raise output throughput by less than this share. The ground truth's own
    #: definition (tokenload.sim.oracle.SATURATION_GAIN): a quarter of ideal scaling.
    saturation_gain: float = 0.25
    #: A predicted gain from 2x load this close to ``saturation_gain`` (either side) is a close
    #: call: the verdict keeps its label and says so (``close_call``). Measured, not chosen for
    #: accuracy: on the development seeds 1 and 5 of bench/verdict_accuracy.py (400 scenarios,
    #: with and without --given-max-num-seqs; 630 predicted gains), the prediction's
    #: saturated-or-not call agreed with the ground truth in 9 of 21 scenarios within 0.05 of the
    #: line, no better than a coin, and in 591 of 609 outside it (17 of 19 between 0.05 and 0.1).
    #: Validated on the held-out seeds 2, 3, 4, 7 and 8 (2,000 verdicts, 1,654 predicted gains):
    #: 25 of 40 within the margin (62 %), 1,548 of 1,614 outside (96 %); and on seeds 9 and 10,
    #: drawn after it was set: 19 of 31 (61 %) and 606 of 631 (96 %); bench/RESULTS.md.
    saturation_margin: float = 0.05
    #: Without a step-time model (too few signals): saturated when throughput grew by less than
    #: this share of the load's growth since the step below (1.0 = perfect scaling).
    scaling_efficiency: float = 0.5
    #: Standard errors by which an open loop's throughput must fall short of that share before
    #: the shortfall counts: with n Poisson arrivals a step's throughput varies by about
    #: 1/sqrt(n), so the growth between two steps by sqrt(1/n1 + 1/n2) in log terms. Noise alone
    #: falls 2 of them short about 2.3 % of the time (one-sided; a definition, not fitted).
    #: Poisson is tokenload's default --arrival; constant arrivals vary less, bursty ones more.
    growth_noise_z: float = 2.0
    #: KV cache usage (time-weighted max) at or above which the cache counts as full.
    kv_full_ratio: float = 0.9
    #: Mean waiting requests above which requests count as queued.
    waiting_mean: float = 0.5
    #: A cap on running requests: steady within the step, and across steps the most running grew
    #: by less than this share (or by less than a quarter of the load's growth) while the load
    #: grew by at least ``plateau_load_growth``: a plateau across steps, not a steady value in one.
    plateau_growth: float = 0.05
    plateau_load_growth: float = 1.5
    #: A plateau is a cap, not the KV cache, when running is pinned (its mean at least this share
    #: of its max: held at one count nearly all the time, where a full cache lets it dip as
    #: requests grow and finish) while the cache's mean usage has room for this many more
    #: requests of the running ones' mean size: one, and half of one for the growth of those
    #: running (a decode's KV grows until it ends; the mean running request is about half way).
    cap_pinned_share: float = 0.95
    cap_kv_room_requests: float = 1.5
    #: Fewer requests than this completing inside a step: its throughput is not judged.
    min_completed: float = 3.0
    #: The API server is the bound when more than this share of the server's TTFT is spent
    #: outside its queue, prefill and one engine step (the wait for the step running when a
    #: request came, which vLLM V1 does not count as queue time), while running stays under this
    #: share of the users.
    frontend_share: float = 0.5
    frontend_running_share: float = 0.8
    #: Context length (tokens) at which a decode token's KV-cache read takes as long as its
    #: matmuls: kv_bytes_per_token / (2 x params) x (peak FLOP/s / bandwidth). Llama-3.1-8B on an
    #: H100: 131 kB / 16 GFLOP x 295 = 1/420 per context token; Llama-3.1-70B FP8 on an H200:
    #: 328 kB / 141 GFLOP x 412 = 1/1040; Qwen2.5-7B on an A40: 57 kB / 15 GFLOP x 216 = 1/1200.
    #: The geometric middle of the three, rounded.
    kv_read_equiv_tokens: float = 800.0
    #: A resource whose predicted gain is at least this share of the best one's is named as the
    #: verdict's ``secondary``: the ground truth's own definition (tokenload.sim.oracle's
    #: SECONDARY_SHARE).
    secondary_share: float = 0.8
    #: The least time (ms) the step model gives an engine step outside its kernels
    #: (tokenload.analysis.stepmodel.STEP_OVERHEAD_MS: about 1 ms for vLLM V1 with CUDA graphs,
    #: an assumption; /metrics does not show it). Set it when the engine's is known to differ.
    step_overhead_ms: float = STEP_OVERHEAD_MS

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            lo, hi = _RANGES.get(f.name, (0.0, math.inf))
            if not (math.isfinite(value) and lo <= value <= hi):
                what = "a share from 0 to 1" if (lo, hi) == (0.0, 1.0) else f"a number >= {lo:g}"
                raise ValueError(f"--threshold: {f.name}: expected {what}, got {value:g}")

    @classmethod
    def with_overrides(cls, overrides: dict[str, float]) -> Thresholds:
        known = {f.name for f in fields(cls)}
        bad = sorted(set(overrides) - known)
        if bad:
            raise ValueError(
                f"--threshold: unknown name {bad[0]!r}; expected one of {', '.join(sorted(known))}"
            )
        return cls(**overrides)


#: What each threshold can mean (a share, a factor of growth, a count); others are numbers >= 0.
_RANGES: dict[str, tuple[float, float]] = {
    **{
        name: (0.0, 1.0)
        for name in (
            "error_rate",
            "saturation_gain",
            "saturation_margin",
            "scaling_efficiency",
            "kv_full_ratio",
            "cap_pinned_share",
            "frontend_share",
            "frontend_running_share",
            "secondary_share",
        )
    },
    "plateau_load_growth": (1.0, math.inf),
    "kv_read_equiv_tokens": (1.0, math.inf),
}
