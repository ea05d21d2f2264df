"""Per-step verdicts: which resource saturated, the signal that decided, and what to do.

Labels: ``none`` (headroom: more load still buys throughput), ``compute`` (FLOP/s bound),
``memory_bandwidth`` (weights and KV reads bound), ``kv_capacity`` (the KV cache is full),
``scheduler_limit`` (running pinned at a cap such as max_num_seqs while the cache has room),
``frontend`` (the API server in front of the engine), ``imbalance`` (a fleet whose replicas
disagree: tokenload.analysis.replicas), ``client`` (the load generator could not
keep up), ``errors`` (failures crossed their threshold), ``unknown`` (not judged: a worker was
lost; or saturated with no resource the evidence can name -- ``saturated`` says which).
Input: the steps of ``summary.json``; only what a real server shows (client figures and
``/metrics``), and GPU peaks only when the user gave them.

The rules follow the engine (see the README's analysis section). Each step's engine step is
modelled (tokenload.analysis.stepmodel, built in tokenload.analysis.headroom) as compute and
memory time in a roofline with partial overlap plus a fixed time: from the server's FLOP/byte
counters against a machine balance when it exports them, else from the step-time line
``s(n) = a + b*n`` through this step and one below it (``s``: one engine step, the smaller of
the mean ITL and window / engine steps; ``n``: vllm:iteration_tokens), else from the tokens per
step alone. Throughput at a closed or open loop is tokens per step over step time, so

* doubling the load, when the batch can grow by ``r`` (2; less when the KV cache cannot hold it
  or running already peaks below the users; 1 when requests already wait), raises throughput by
  ``r*t/t(r) - 1``: below ``saturation_gain`` the step is saturated (the ground truth's own
  definition);
* of a saturated step, each resource relaxed by 2x is predicted as the oracle measures it: FLOP/s
  halves the compute term, bandwidth the memory terms (the weights and the KV reads), KV blocks
  or max_num_seqs let the batch grow as far as the load and the other limit allow (and a cache
  holding all the demand ends the recomputation, one it still cannot hold halves its share:
  headroom.recompute_share); the largest
  predicted gain names the bottleneck, one within ``secondary_share`` of it the secondary.

Steps are judged in order of load (concurrency, or target rate), whatever order they ran in (a
knee search bisects downwards). The rules are the table ``RULES``, in the order they are tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tokenload.analysis.advice import ADVICE, BOTTLENECKS
from tokenload.analysis.headroom import (
    at_cap,
    batch_room,
    cap_room,
    capped_below_kv,
    demand_room,
    growth_models,
    kv_bound,
    kv_full,
    kv_held_growth,
    kv_room_requests,
    plateau,
    recompute_share,
    running_flat,
    step_model,
)
from tokenload.analysis.knee import by_load, find_knee
from tokenload.analysis.run_rules import rule_client, rule_errors, rule_nothing_measured, rule_worker_lost
from tokenload.analysis.signals import (
    FIRST_STEP_SIGNAL,
    NOISE_SIGNAL,
    PREDICTED_GAIN_SIGNAL,
    StepSignals,
    signals,
)
from tokenload.analysis.signals import evidence as _ev
from tokenload.analysis.signals import value_at as _g
from tokenload.analysis.thresholds import CLOSE_CALL_AGREED, Thresholds
from tokenload.metrics.definitions import ttft_outside_engine_ms

__all__ = [
    "ADVICE",
    "BOTTLENECKS",
    "RULES",
    "StepSignals",
    "diagnose_steps",
    "find_knee",
    "signals",
]


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


# --- the rule table ---------------------------------------------------------------------------

#: A rule: (signals, step, thresholds) -> (label, evidence) when it decides, else None.
Rule = Callable[[StepSignals, dict[str, Any], Thresholds], "tuple[str, list[dict]] | None"]


def _rule_queue_grew(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, list[dict]] | None:
    """A lagging client that still saw the server's queue grow: the client can only have offered
    less than was asked, so a queue that grows through the step (scraped from /metrics, no client
    timing) shows the server saturated whatever the client's lag; the resource is judged from the
    server's figures as for any step."""
    flags = step.get("flags") or []
    if "client_bound" not in flags or "oversaturated" not in flags:
        return None
    found = _rule_saturated(sig, step, th)
    if found is None or found[0] == "none":
        return None
    trend = step.get("waiting_trend") or {}
    head = _ev(
        "requests_waiting trend",
        trend.get("per_s"),
        "requests/s: the server's queue grew through the step although the client was behind "
        "(client_bound): saturated; client-side latencies of this step are not the server's",
    )
    return found[0], [head, *found[1]]


def _saturation(sig: StepSignals, th: Thresholds) -> tuple[bool | None, list[dict]]:
    """Whether doubling the load would raise throughput by less than ``saturation_gain``."""
    models = growth_models(sig, th)
    room, why, room_metric, room_value = batch_room(sig, th)
    if models:
        # Where the counters and the step-time line both measured the growth, the smaller gain:
        # each misses what the other sees (per-token CPU costs; a line through noisy step means).
        model = min(models, key=lambda m: m.gain(batch=room))
        gain = model.gain(batch=room)
        if sig.users is None and sig.busy is not None and sig.busy < 1.0:
            # An open loop's engine idles part of the time: twice the arrivals fill the idle
            # time before the batch has to grow.
            gain = min(1.0, (1.0 + gain) / sig.busy - 1.0)
            why += f"; the engine stepped {sig.busy:.0%} of the time"
        head = _ev(
            PREDICTED_GAIN_SIGNAL,
            round(gain, 3),
            f"{'<' if gain < th.saturation_gain else '>='} {th.saturation_gain}: {why}; {model.how}",
        )
        if abs(gain - th.saturation_gain) < th.saturation_margin:
            head["close_call"] = True
            (near, n_near), (far, n_far) = CLOSE_CALL_AGREED
            head["rule"] += (
                f"; a close call: within {th.saturation_margin} of the line; within the default 0.05 "
                f"the step model's saturated-or-not call agreed with the ground truth in {near} of "
                f"{n_near} benchmark scenarios, against {far / n_far:.0%} further out "
                "(Thresholds.saturation_margin)"
            )
        return gain < th.saturation_gain, [head]
    if room == 1.0:
        return True, [_ev(room_metric, room_value, f"the batch cannot grow: {why}")]
    eff = sig.efficiency
    if eff is not None and eff < th.scaling_efficiency:
        noise = _within_arrival_noise(sig, th)
        if noise is not None:
            return None, [noise]
    if eff is not None:
        return eff < th.scaling_efficiency, [
            _ev(
                sig.throughput_source,
                round(sig.throughput, 1),
                f"grew {sig.throughput / (sig.prev_throughput or 1):.2f}x for {sig.load_growth:.2f}x "
                f"the load: scaling efficiency {eff:.2f} {'<' if eff < th.scaling_efficiency else '>='} "
                f"{th.scaling_efficiency}",
            )
        ]
    return None, []


def _within_arrival_noise(sig: StepSignals, th: Thresholds) -> dict | None:
    """The evidence that an open loop's throughput fell short of ``scaling_efficiency`` by less
    than ``growth_noise_z`` standard errors of its steps' Poisson arrivals (a handful of long
    requests a step: which ones arrived decides the throughput); None when the shortfall counts."""
    n1, n0, g = sig.arrivals, sig.prev_arrivals, sig.load_growth
    if not (n1 and n0 and g and sig.prev_throughput):
        return None
    se = math.sqrt(1.0 / n1 + 1.0 / n0)
    # Nothing served can be nothing arrived (e^-n1 of the time): half an arrival's worth then.
    grew = max(sig.throughput / sig.prev_throughput, 0.5 / n1)
    shortfall = math.log(1.0 + th.scaling_efficiency * (g - 1.0)) - math.log(grew)
    if shortfall >= th.growth_noise_z * se:
        return None
    return _ev(
        NOISE_SIGNAL,
        [round(n1, 1), round(n0, 1)],
        f"{sig.throughput_source} grew {grew:.2f}x for {g:.2f}x the load, short of scaling "
        f"efficiency {th.scaling_efficiency} by {shortfall:.2f} in log growth, within "
        f"{th.growth_noise_z:g} standard errors of these arrivals' Poisson noise "
        f"({th.growth_noise_z:g} x {se:.2f}): no sign of saturation either way",
    )


def _cap_not_cache(sig: StepSignals, th: Thresholds) -> list[dict]:
    """Why a cache full at its peaks is not what holds the batch (headroom.capped_below_kv)."""
    room = kv_room_requests(sig)
    if room is None or not capped_below_kv(sig, th):
        return []
    return [
        _ev(
            "kv_cache_usage_ratio mean",
            _r(sig.kv_mean),
            f"room for {room:.1f} more requests of the running ones' mean size (>= "
            f"{th.cap_kv_room_requests}) while running is pinned at {sig.running_max:.0f}: a cap "
            "holds the batch, not the cache",
        )
    ]


def _rule_saturated(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, list[dict]] | None:
    """Not saturated (``none``), or which resource: the largest predicted gain from relaxing one."""
    saturated, ev = _saturation(sig, th)
    if saturated is None:
        if kv_bound(sig, th) or plateau(sig, th):
            saturated, ev = True, []  # decided by the cache or the plateau, said below
        else:
            return "none", ev or [
                _ev(
                    FIRST_STEP_SIGNAL,
                    sig.load,
                    "first step of its series: no sign of saturation",
                )
            ]
    if not saturated:
        return "none", ev
    frontend = _frontend(sig, step, th)
    if frontend is not None:
        return "frontend", ev + frontend
    model = step_model(sig, th)
    gains: dict[str, tuple[float, list[dict]]] = {}
    grow = demand_room(sig)
    cap = cap_room(sig)
    if kv_bound(sig, th):
        # A larger cache lets the batch grow only as far as max_num_seqs, when the user gave it.
        kv_grow = grow if cap is None else min(grow, cap)
        # Evicted requests are recomputed: a cache twice the size keeps them.
        kv_ev = []
        if kv_full(sig, th):
            kv_ev.append(
                _ev(
                    "kv_cache_usage_ratio max",
                    _r(sig.kv_max),
                    f"full for admission (>= {th.kv_full_ratio} or no room for one more request)",
                )
            )
        if sig.preemptions:
            kv_ev.append(_ev("preemptions", sig.preemptions, "> 0: requests evicted and recomputed"))
        if not kv_full(sig, th) and sig.kv_max is not None:
            # Bound by its preemptions while the usage scraped is below full: quoted as what it
            # is (a mean over several engines or replicas can hide a full one), not as full.
            kv_ev.append(
                _ev(
                    "kv_cache_usage_ratio max",
                    _r(sig.kv_max),
                    f"< {th.kv_full_ratio}, yet requests were preempted: a mean over engines or "
                    "replicas can hide a full cache",
                )
            )
        kv_ev.append(
            _ev(
                "requests_waiting mean",
                round(sig.waiting_mean, 2),
                f"> {th.waiting_mean}: queued for capacity; twice the cache lets the batch grow "
                f"{kv_grow:.2f}x"
                + (f" (max_num_seqs {sig.max_num_seqs:.0f}, given)" if kv_grow < grow else ""),
            )
        )
        redone = recompute_share(sig)
        if redone >= 0.01:
            kv_ev.append(
                _ev(
                    "recomputed share of tokens",
                    round(redone, 3),
                    f"{sig.preemptions:.0f} preemptions x {sig.context_tokens:.0f} tokens a request "
                    "holds, computed again: work a cache that keeps them saves",
                )
            )
        saved = 1.0 / (1.0 - redone)
        gains["kv_capacity"] = (model.gain(batch=kv_grow, flops=saved) if model else 1.0, kv_ev)
    if at_cap(sig):
        gains["scheduler_limit"] = _at_cap_gain(sig, th, model, grow)
    elif plateau(sig, th) and "kv_capacity" not in gains:
        # A higher cap lets the batch grow only as far as the KV cache holds it.
        grow = kv_held_growth(sig, th, grow)
        gains["scheduler_limit"] = (
            model.gain(batch=grow) if model else 1.0,
            [
                _ev(
                    "requests_running max",
                    {"this step": sig.running_max, "step below": sig.prev_running_max},
                    "a plateau: steady within the step, and grew "
                    f"{sig.running_max / (sig.prev_running_max or 1):.2f}x "
                    f"while the load grew {sig.load_growth:.2f}x",
                ),
                _ev(
                    "requests_waiting mean",
                    round(sig.waiting_mean, 2),
                    f"> {th.waiting_mean} while the KV cache has room; a cap twice as high lets the "
                    f"batch grow {grow:.2f}x",
                ),
                *_cap_not_cache(sig, th),
            ],
        )
    if model is not None:
        gains["compute"] = (
            model.gain(flops=2.0),
            [_ev("compute share of step time", round(model.compute_share, 3), model.how)],
        )
        gains["memory_bandwidth"] = (
            model.gain(bandwidth=2.0),
            [_ev("memory share of step time", round(model.memory_share, 3), model.how)],
        )
    if not gains:
        missing = _ev(
            "missing",
            "step time model",
            "needs the server's inter-token latency and tokens per step on this step and one below it "
            "(scrape /metrics), or the server's FLOP/byte counters",
        )
        return "unknown", [*ev, missing]
    order = sorted(gains, key=lambda k: -gains[k][0])
    best = order[0]
    ranked = ", ".join(f"{k} {gains[k][0]:+.0%}" for k in order)
    close = [k for k in order[1:] if gains[k][0] > 0 and gains[k][0] >= th.secondary_share * gains[best][0]]
    ranking = _ev(
        "predicted gain from relaxing each 2x",
        ranked,
        "the largest binds"
        + (f"; {close[0]} within {th.secondary_share:.0%} of it is the secondary" if close else ""),
    )
    if close:
        ranking["secondary"] = close[0]
    # A cache full at its peaks that a cap keeps from binding: said whatever binds.
    aside = [] if best == "scheduler_limit" else _cap_not_cache(sig, th)
    return best, ev + gains[best][1] + aside + [ranking]


def _at_cap_gain(sig: StepSignals, th: Thresholds, model: Any, grow: float) -> tuple[float, list[dict]]:
    """Running reached the cap the user gave (``max_num_seqs``): twice the cap lets the batch grow
    as far as the load and the KV cache allow."""
    grow = kv_held_growth(sig, th, grow)
    return (
        model.gain(batch=grow) if model else 1.0,
        [
            _ev(
                "requests_running max",
                _r(sig.running_max),
                f">= max_num_seqs {sig.max_num_seqs:.0f} (given): the cap holds the batch; twice "
                f"the cap lets it grow {grow:.2f}x (the load and the KV cache's mean usage allow)",
            ),
            _ev("requests_waiting mean", round(sig.waiting_mean, 2), "requests queued behind the cap"),
        ],
    )


def _frontend(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> list[dict] | None:
    """The API server in front of the engine: the server's TTFT goes mostly neither to its queue,
    nor to prefill, nor to waiting for a running step; nothing waits; and the engine runs clearly
    fewer requests than the load offers. vLLM V1 takes a request in between steps (its scheduler
    stamps it QUEUED there), so a request that came during a step waited for that step outside its
    queue time: up to one step, whose length the server's mean ITL gives (a decode token a step).
    Closed-loop users come back just after a step ends and wait most of the next one, so with long
    steps and short requests that wait alone is about half the TTFT of a compute-bound engine
    (0.48 on all three emulated profiles at 256 users of 32-token prompts with 20 ms in front of
    the engine, bench/RESULTS.md)."""
    ttft, outside = _g(step, "server", "ttft_ms", "mean"), ttft_outside_engine_ms(step)
    queue = _g(step, "server", "queue_time_ms", "mean")
    prefill_t = _g(step, "server", "prefill_time_ms", "mean")
    engine_step, step_source = _g(step, "server", "itl_ms", "mean"), "the server's mean ITL"
    if engine_step is None:  # a server without an ITL histogram: the client's time per token
        engine_step, step_source = _g(step, "tpot_ms", "p50"), "the client's TPOT p50"
    # Closed loop only: a rate step's "concurrency" is its pool of users, not the load.
    conc = step.get("concurrency") if sig.closed_loop else None
    if not (
        ttft
        and outside is not None
        and engine_step is not None
        and sig.waiting_mean <= th.waiting_mean
        and conc
        and sig.running_mean is not None
        and sig.running_mean < th.frontend_running_share * conc
        and outside - engine_step > th.frontend_share * ttft
    ):
        return None
    return [
        _ev("server ttft_ms mean", round(ttft, 1), "arrival -> first token, server side"),
        _ev(
            "outside queue, prefill and one engine step",
            round((outside - engine_step) / ttft, 3),
            f"> {th.frontend_share} of the server's TTFT (queue {queue:.1f} ms, prefill {prefill_t:.1f} "
            f"ms, one step {engine_step:.1f} ms: {step_source}, about the longest a request that came "
            "during a step waits for it)",
        ),
        _ev(
            "requests_running mean",
            round(sig.running_mean, 1),
            f"< {th.frontend_running_share} x the {conc} users, with nothing waiting",
        ),
    ]


def _rule_held_before_engine(
    sig: StepSignals, step: dict[str, Any], th: Thresholds
) -> tuple[str, list[dict]] | None:
    """The API server holds the load back: more users brought the engine no more requests
    (running flat across steps, :func:`running_flat`) though none wait in its queue, and the
    server's TTFT goes mostly neither to its queue nor to prefill (:func:`_frontend`). Saturated
    as measured, whatever a model of the engine's step says more load would buy: the engine
    never sees that load."""
    frontend = _frontend(sig, step, th)
    if frontend is None or not running_flat(sig, th) or sig.prev_running_max is None:
        return None
    grew = sig.running_max / sig.prev_running_max if sig.prev_running_max else float("inf")
    return "frontend", [
        _ev(
            "requests_running max",
            _r(sig.running_max),
            f"grew {grew:.2f}x for {sig.load_growth:.2f}x the load with nothing waiting: the "
            "engine got no more requests",
        ),
        *frontend,
    ]


#: The rules in the order they are tried; the first that decides gives the verdict.
RULES: tuple[tuple[str, Rule], ...] = (
    ("server queue grew past a lagging client", _rule_queue_grew),
    ("worker_lost flag", rule_worker_lost),
    ("nothing measured", rule_nothing_measured),
    ("failed share", rule_errors),
    ("client_bound flag", rule_client),
    ("requests held before the engine", _rule_held_before_engine),
    ("saturation and the resource that binds", _rule_saturated),
)


#: Rules whose step is not judged: not saturated, and no one's step below.
_NOT_JUDGED = ("worker_lost flag", "nothing measured")


def _first_rule(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, str, list[dict]]:
    """The first rule of the table that decides: (its name, the label, the evidence)."""
    for rule_name, rule in RULES:
        found = rule(sig, step, th)
        if found is not None:
            return rule_name, found[0], found[1]
    raise AssertionError("the last rule always decides")


def _completed(step: dict[str, Any]) -> float:
    return (
        (step.get("requests_per_s") or 0.0) * (step.get("measured_s") or 0.0)
        if "requests_per_s" in step
        else 1e9
    )


def diagnose_steps(
    steps: list[dict[str, Any]],
    thresholds: Thresholds | None = None,
    peaks: dict[str, float] | None = None,
    max_num_seqs: int | None = None,
) -> list[dict[str, Any]]:
    """One verdict per step: ``{"bottleneck", "saturated", "decided_by", "evidence", "advice"}``.
    Steps with different workloads (a context sweep's prompt lengths) are judged as separate
    series; steps not judged as server saturation (client-bound, lost worker) are no one's step
    below."""
    th = thresholds or Thresholds()
    out: list[dict[str, Any]] = [{} for _ in steps]
    series: dict[Any, list[int]] = {}
    for i in by_load(steps):
        series.setdefault(steps[i].get("prompt_tokens"), []).append(i)
    for order in series.values():
        prev = base = None
        for i in order:
            step = steps[i]
            sig = signals(step, prev, peaks, base, max_num_seqs)
            rule_name, name, evidence = _first_rule(sig, step, th)
            verdict: dict[str, Any] = {
                "bottleneck": name,
                "saturated": name not in ("none", "client") and rule_name not in _NOT_JUDGED,
                "decided_by": evidence[0]["metric"] if evidence else rule_name,
                "evidence": evidence,
                "advice": ADVICE[name],
                "secondary": next((e["secondary"] for e in evidence if "secondary" in e), None),
            }
            if any(e.get("close_call") for e in evidence):
                verdict["close_call"] = True
            if _completed(step) < th.min_completed and not _g(
                step, "server", "generation_tokens", "rate_per_s"
            ):
                verdict["low_sample"] = True
                evidence.append(
                    _ev("requests completed in the step", round(_completed(step), 1),
                        f"< {th.min_completed}: lengthen --step-duration; throughput not judged")
                )  # fmt: skip
            out[i] = verdict
            if name not in ("client",) and rule_name not in _NOT_JUDGED:
                prev = step
                base = base or step
    return out
