"""The rules' shared reasoning about a step: whether the KV cache or a scheduler cap holds the batch,
how far the batch could grow, and the step-time model that predicts what each 2x relaxation
buys (tokenload.analysis.stepmodel). Pure."""

from __future__ import annotations

from dataclasses import replace

from tokenload.analysis.signals import StepSignals
from tokenload.analysis.stepmodel import (
    MACHINE_BALANCE,
    OVERLAP,
    WEIGHTS_READ_MAX_TOKENS,
    StepModel,
)
from tokenload.analysis.thresholds import Thresholds

__all__ = [
    "at_cap",
    "batch_room",
    "cap_room",
    "capped_below_kv",
    "demand_room",
    "growth_models",
    "kv_bound",
    "kv_full",
    "kv_held_growth",
    "kv_room_requests",
    "plateau",
    "queued",
    "recompute_share",
    "running_flat",
    "step_model",
]


def kv_full(sig: StepSignals, th: Thresholds) -> bool:
    """Full for admission: at the threshold, or with less room left than one running request holds."""
    if sig.kv_max is None:
        return False
    per_request = sig.kv_mean / sig.running_mean if sig.kv_mean is not None and sig.running_mean else None
    return sig.kv_max >= th.kv_full_ratio or (per_request is not None and 1.0 - sig.kv_max < per_request)


def kv_bound(sig: StepSignals, th: Thresholds) -> bool:
    if capped_below_kv(sig, th):
        return False
    return sig.preemptions > 0 or (kv_full(sig, th) and sig.waiting_mean > th.waiting_mean)


def capped_below_kv(sig: StepSignals, th: Thresholds) -> bool:
    """A plateau with running pinned at one count, while the KV cache's mean usage leaves room
    for ``cap_kv_room_requests`` more requests of the running ones' mean size: a cap holds the
    batch, not the cache (whose peaks may still leave no room for one more)."""
    room = kv_room_requests(sig)  # None unless running_mean is set
    if room is None or not plateau(sig, th) or sig.running_max is None:
        return False
    mean = sig.running_mean or 0.0
    return mean >= th.cap_pinned_share * sig.running_max and room >= th.cap_kv_room_requests


def kv_room_requests(sig: StepSignals) -> float | None:
    """How many more requests of the running ones' mean size the KV cache's mean usage leaves
    room for; None without KV usage or running requests."""
    if not sig.running_mean or not sig.kv_mean:
        return None
    return (1.0 - sig.kv_mean) / (sig.kv_mean / sig.running_mean)


def kv_held_growth(sig: StepSignals, th: Thresholds, grow: float) -> float:
    """How far the batch grows toward ``grow`` before the KV cache's mean usage reaches the full
    mark (at least 1; ``grow`` itself without KV usage): what a higher cap can buy when the cache
    stays the same size."""
    if not sig.kv_mean:
        return grow
    return max(1.0, min(grow, th.kv_full_ratio / sig.kv_mean))


def at_cap(sig: StepSignals) -> bool:
    """Running requests reached the engine's cap (``max_num_seqs``, when the user gave it)."""
    return sig.max_num_seqs is not None and (sig.running_max or 0.0) >= sig.max_num_seqs - 0.5


def cap_room(sig: StepSignals) -> float | None:
    """How far the running batch can grow before it meets the engine's cap (``max_num_seqs``,
    when the user gave it) or None: the cap over the running mean, at least 1."""
    if sig.max_num_seqs is None or not sig.running_mean:
        return None
    return max(1.0, sig.max_num_seqs / sig.running_mean)


def running_flat(sig: StepSignals, th: Thresholds) -> bool:
    """Running requests stopped growing across steps while the load grew (``plateau_growth``,
    ``plateau_load_growth``), and held steady within the step."""
    if sig.running_max is None or sig.prev_running_max is None or not sig.load_growth:
        return False
    grew = sig.running_max / sig.prev_running_max - 1 if sig.prev_running_max else float("inf")
    steady = sig.running_mean is None or sig.running_max - sig.running_mean <= 0.25 * sig.running_max
    return (
        sig.load_growth >= th.plateau_load_growth
        and steady
        and (grew <= th.plateau_growth or grew < 0.25 * (sig.load_growth - 1))
    )


def plateau(sig: StepSignals, th: Thresholds) -> bool:
    """Running requests stopped growing across steps while the load grew and requests wait."""
    return sig.waiting_mean > th.waiting_mean and running_flat(sig, th)


def queued(sig: StepSignals, th: Thresholds) -> bool:
    """Requests wait for more than a passing moment: more load only lengthens the queue."""
    return sig.waiting_mean > max(th.waiting_mean, 0.1 * (sig.running_mean or 0.0))


def step_model(sig: StepSignals, th: Thresholds) -> StepModel | None:
    """The step's compute and memory terms (tokenload.analysis.stepmodel), from the best signals
    the step has: the server's FLOP/byte counters per engine step; else the shares of
    ``--gpu-peaks`` those counters reached (a prior: no measured growth); else the step-time line
    through a step below; else the tokens per step alone (a prior). None without tokens per step.
    It splits the step between compute and memory: what more FLOP/s or bandwidth would buy."""
    return _counters_model(sig, th) or _shares_model(sig) or _line_model(sig, th) or _tokens_model(sig, th)


def growth_models(sig: StepSignals, th: Thresholds) -> list[StepModel]:
    """Every model of how the step's time grows with its batch that the series measured: the
    FLOP/byte counters' (measured work) and the step-time line's (measured time; it holds the
    per-token costs no counter sees, such as output processing on the engine's CPU)."""
    out = [m for m in (step_model(sig, th), _line_model(sig, th)) if m is not None and m.measured_growth]
    return out if len(out) < 2 or out[0] is not out[1] else out[:1]


def _counters_model(sig: StepSignals, th: Thresholds) -> StepModel | None:
    if not (sig.flops_per_step and sig.bytes_per_step):
        return None
    balance = sig.balance or MACHINE_BALANCE
    fixed = sig.fixed_bytes
    source = "--gpu-peaks" if sig.balance else "the datasheets' geometric mean"
    how = (
        f"FLOP/byte counters: {sig.flops_per_step / sig.bytes_per_step:.0f} FLOP/byte per engine step "
        f"against a machine balance of {balance:.0f} ({source}); "
        + (
            f"{fixed / sig.bytes_per_step:.0%} of the bytes read whatever the batch"
            if fixed is not None
            else "no step below to tell the weights' bytes from the batch's"
        )
    )
    model = StepModel.from_counters(sig.flops_per_step, sig.bytes_per_step, fixed, balance, how)
    ref = None
    if sig.ref_flops_per_step and sig.ref_bytes_per_step:
        ref = StepModel.from_counters(sig.ref_flops_per_step, sig.ref_bytes_per_step, fixed, balance, how)
    if sig.step_ms:
        model = model.with_overhead(sig.step_ms, ref, sig.ref_step_ms, floor_ms=th.step_overhead_ms)
        share = model.overhead / model.time()
        model = replace(model, how=f"{how}; a fixed {share:.0%} of the step")
    return model


def _shares_model(sig: StepSignals) -> StepModel | None:
    if sig.flops_share is None or sig.bytes_share is None:
        return None
    how = (
        f"achieved FLOP/s {sig.flops_share:.0%} and bandwidth {sig.bytes_share:.0%} of --gpu-peaks "
        "(the server's counters over the step)"
    )
    return StepModel(sig.flops_share, sig.bytes_share, 0.0, OVERLAP, how, measured_growth=False)


def _line_model(sig: StepSignals, th: Thresholds) -> StepModel | None:
    line = sig.line()
    if line is None or not sig.tokens_per_step:
        return None
    if _line_rejected(line, th.step_overhead_ms) is not None:
        return None
    a, b = line
    dec = sig.decode_share if sig.decode_share is not None else 0.5
    ctx = sig.context_tokens or 0.0
    # Per token: every token costs one unit of matmul; a decode token also reads its context's
    # KV cache, ctx / kv_read_equiv_tokens units.
    mem_units = dec * ctx / th.kv_read_equiv_tokens
    how = (
        f"step time {a:.2f} + {b:.4f} ms/token x {sig.tokens_per_step:.0f} tokens ({sig.step_source}, "
        "vllm:iteration_tokens_total)"
    )
    kv_share = mem_units / (1.0 + mem_units)
    return StepModel.from_line(a, b, sig.tokens_per_step, kv_share, how, th.step_overhead_ms)


def _line_rejected(line: tuple[float, float] | None, floor_ms: float) -> str | None:
    """Why the step-time line through the step below (``StepSignals.line``) cannot split this
    step, or None: it saw no growth (a flat or falling time), or its intercept, less the step's
    fixed time (``floor_ms``), is worth more tokens of its slope than any weights' read
    (:data:`WEIGHTS_READ_MAX_TOKENS`: its steps lie on either side of the roofline's corner)."""
    if line is None:
        return None
    a, b = line
    if b <= 0.0:
        return f"the step-time line through the step below, {a:.2f} ms + 0 ms/token, saw no growth"
    worth = (a - floor_ms) / b
    if worth <= WEIGHTS_READ_MAX_TOKENS:
        return None
    return (
        f"the step-time line through the step below, {a:.2f} + {b:.4f} ms/token, has an intercept "
        f"worth {worth:.0f} tokens (> {WEIGHTS_READ_MAX_TOKENS:.0f}, more than any weights' read: "
        "steps on either side of the roofline's corner)"
    )


def _tokens_model(sig: StepSignals, th: Thresholds) -> StepModel | None:
    if not sig.tokens_per_step:
        return None
    dec = sig.decode_share if sig.decode_share is not None else 0.5
    seqs = sig.running_mean or dec * sig.tokens_per_step
    why_not_line = (
        _line_rejected(sig.line(), th.step_overhead_ms) or "no step below to time the step's growth"
    )
    how = (
        f"{sig.tokens_per_step:.0f} tokens per step (vllm:iteration_tokens_total) against the "
        f"weights' read, worth {MACHINE_BALANCE:.0f} tokens of matmuls ({why_not_line})"
    )
    model = StepModel.from_tokens(
        sig.tokens_per_step, seqs, sig.context_tokens or 0.0, th.kv_read_equiv_tokens, how
    )
    return model.with_overhead(sig.step_ms, floor_ms=th.step_overhead_ms) if sig.step_ms else model


#: Of the recomputation a step's preemptions cost, the share a twice-larger KV cache saves where
#: the demand would still overfill it (an open loop's growing queue, more users than twice the
#: running batch): that cache still runs out and preempts, one newest request each time the
#: running ones' growth overruns the free blocks, about as often a step as now, while each step
#: runs twice the batch, so about half the share of the work is recomputed. An assumption from
#: how the scheduler preempts (one victim per overrun), not fitted; where twice the running batch
#: holds the demand, the cache stops running out and all of it is saved.
RECOMPUTE_SAVED_OVERFILLED = 0.5


def recompute_share(sig: StepSignals) -> float:
    """Of the tokens the engine computed in the step, the share that a twice-larger KV cache
    would save: each preemption throws away what its request had computed, about the mean
    context a request holds (its prompt and half its output), which the engine computes again
    (vLLM V1 counts none of it in its token counters; its step time and FLOP counter hold it).
    All of it where that cache holds all the demand: a closed loop whose users fit in twice the
    running batch, or an engine whose cap (``max_num_seqs``, when the user gave it) does, since
    no more than the cap ever run. More demand (an open loop's growing queue, more users) fills
    any cache and preemptions go on, but among twice the batch:
    :data:`RECOMPUTE_SAVED_OVERFILLED` of it. At most 0.9 before that: the estimate counts a
    preempted request's whole context, which one preempted part-way through its prefill had not
    computed yet, so the share is an upper bound, kept below all the work (a factor of 10 on the
    compute term at most). 0 without preemptions or the counts to weigh them."""
    if not sig.preemptions or not sig.context_tokens:
        return 0.0
    if not sig.tokens_per_step or not sig.engine_steps:
        return 0.0
    demand = sig.users
    if sig.max_num_seqs is not None:
        demand = sig.max_num_seqs if demand is None else min(demand, sig.max_num_seqs)
    fits = demand is not None and sig.running_mean and demand <= 2.0 * sig.running_mean
    redone = sig.preemptions * sig.context_tokens
    share = min(0.9, redone / (redone + sig.tokens_per_step * sig.engine_steps))
    return share if fits else RECOMPUTE_SAVED_OVERFILLED * share


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def demand_room(sig: StepSignals) -> float:
    """How far the running batch could grow at this load if its limit were lifted (at most 2x):
    a closed loop to its users; an open loop to double, whatever its queue now: the ground truth
    asks what binds at twice its rate (tokenload.sim.oracle), where the queue grows without
    bound."""
    if not sig.running_mean:
        return 2.0
    if sig.users is not None:
        return max(1.0, min(2.0, sig.users / sig.running_mean))
    return 2.0


def batch_room(sig: StepSignals, th: Thresholds) -> tuple[float, str, str, float]:
    """How much the running batch can grow when the load doubles, why, and the signal that says
    so (its name and value)."""
    if queued(sig, th):
        why = f"requests already wait (mean {sig.waiting_mean:.2f})"
        return 1.0, why, "requests_waiting mean", round(sig.waiting_mean, 2)
    room, why, metric, value = (
        2.0,
        "the batch can double",
        "requests_waiting mean",
        round(sig.waiting_mean, 2),
    )
    if (
        sig.users is not None
        and sig.running_max is not None
        and sig.running_mean
        and sig.waiting_mean > th.waiting_mean
        and sig.running_max < sig.users
    ):
        ceiling = max(1.0, sig.running_max / sig.running_mean)
        if ceiling < room:
            room, metric, value = ceiling, "requests_running max", sig.running_max
            why = (
                f"requests wait (mean {sig.waiting_mean:.2f}) while running peaks at "
                f"{sig.running_max:.0f} of {sig.users:g} users"
            )
    cap = cap_room(sig)
    if cap is not None and cap < room:
        room, metric, value = cap, "requests_running mean", _round(sig.running_mean)
        why = f"max_num_seqs {sig.max_num_seqs:.0f} (given) holds {cap:.2f}x the running batch"
    if sig.kv_mean:
        # The usage's mean, not its peak: a cache full only at its peaks still holds a larger
        # batch on average, until the mean reaches the full mark.
        kv_room = kv_held_growth(sig, th, 2.0)
        if kv_room < room:
            room, metric, value = kv_room, "kv_cache_usage_ratio mean", round(sig.kv_mean, 3)
            why = f"the KV cache holds {kv_room:.2f}x the running batch (mean usage {sig.kv_mean:.3f})"
    return room, why, metric, value
