"""A virtual sweep's request records, as a run's client writes them: the step and phase a request
belongs to, and its timing by the one definition of every metric. Pure."""

from __future__ import annotations

from typing import Any

from tokenload.loadgen.phases import StepWindow
from tokenload.metrics.definitions import compute_timing
from tokenload.metrics.records import itl_summary
from tokenload.metrics.step_tally import tokens_by_step
from tokenload.sim.virtual import VirtualRequest

__all__ = ["client_record", "step_and_phase"]


def step_and_phase(windows: list[StepWindow], intended: float, sent: float) -> tuple[int | None, str | None]:
    """A request's step and phase, as a run's records tag them: the step it was meant to be sent
    in (none between a step's end and the next one's start: its settle and the next step's
    spawn, as a run's phase messages tag it), and within that step the phase it was sent in (an
    open-loop arrival that waited for a free user: when it was sent; user._take_slot)."""
    window = next((w for w in windows if w.start <= intended < w.end), None)  # type: ignore[operator]
    if window is None:
        return None, None
    if window.measure_start <= sent < window.end:  # type: ignore[operator]
        return window.index, "measure"
    return window.index, "warmup" if sent < window.end else None  # type: ignore[operator]


def client_record(
    req: VirtualRequest, intended: float, lag_s: float | None, queued: bool, windows: list[StepWindow]
) -> dict[str, Any]:
    t_sent = req.arrival_s
    step, phase = step_and_phase(windows, intended, t_sent)
    if not req.finished:
        timing = compute_timing(
            t_sent, req.token_times_s, [1] * len(req.token_times_s), None, req.num_output_tokens
        )
        failure = "cancelled"
    else:
        timing = compute_timing(
            t_sent,
            req.token_times_s,
            [1] * len(req.token_times_s),
            req.token_times_s[-1],
            req.num_output_tokens,
            None if lag_s is None else intended,
        )
        failure = None
    return {
        "request_id": req.request_id,
        "name": "completion",
        "step": step,
        # As a run's records say them: the phase the request started in, and its status.
        "phase": phase,
        "status": "ok" if failure is None else failure,
        "wall_start": intended,
        "failure_class": failure,
        "ttft_ms": timing.ttft_ms,
        "tpot_ms": timing.tpot_ms,
        "e2e_ms": timing.e2e_ms,
        "input_tokens": req.num_prompt_tokens,
        "output_tokens": req.num_output_tokens,
        "token_count_diff": 0,
        "send_lag_ms": timing.send_lag_ms,
        "send_queued": queued,
        "finish_reason": req.finish_reason,
        **itl_summary(timing.itl_ms),
        # As the client counts them: its tokens by arrival in each step's measured part.
        "measured_tokens_by_step": tokens_by_step(
            req.token_times_s,
            [1] * len(req.token_times_s),
            {
                w.index: (w.measure_start, w.end)
                for w in windows
                if w.measure_start is not None and w.end is not None
            },
            req.num_output_tokens,
            len(req.token_times_s),
        ),
        "_itl": timing.itl_ms,
    }
