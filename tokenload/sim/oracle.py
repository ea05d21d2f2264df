"""Ground truth for verdicts: what saturated a load level, by counterfactual runs of the emulator.

Definitions (one place; the README's analysis section quotes them):

* **Throughput** at a load level: output tokens the engine generated per second over a steady
  window (after a warm-up), counted from the engine's own token times.
* **Saturated**: doubling the offered load (the users of a closed loop, the rate of an open one)
  raises throughput by less than :data:`SATURATION_GAIN` (25 %). A server with headroom turns
  twice the load into nearly twice the tokens (+100 %: larger batches cost little more per step
  while decode reads the weights once); past the knee the extra load mostly waits or slows every
  step. A quarter of ideal scaling is the line: below it more load buys latency, not throughput.
* **Bottleneck** of a saturated level: relax each resource alone by 2x at the same load -- FLOP/s
  (``compute``), memory bandwidth (``memory_bandwidth``), KV-cache blocks (``kv_capacity``),
  ``max_num_seqs`` and ``max_num_batched_tokens`` (both ``scheduler_limit``: the scheduler's
  caps). The relaxation that raises throughput the most binds, if it raises it by at least
  :data:`RELAX_GAIN` (10 %); one within :data:`SECONDARY_SHARE` of the best gain is the secondary.
  None helping means none of these limited the level (``unexplained``: the step's fixed
  overhead, say). An open loop's level is relaxed at the doubled rate and compared with the
  doubled throughput: at its own rate a saturated open loop already serves close to all it is
  offered (85-103 % on the bench's grid), so no relaxation could gain 10 % there however much
  capacity it adds; at twice the rate the server runs at its capacity, which is what a
  relaxation changes. A closed loop's throughput is not capped by its load (a faster server
  completes more turns of the same users), so it is relaxed at its own level. The API server
  (``frontend``) is relaxed by twice its processes (``api_server_count``) where the profile gives
  it a CPU cost per request (``api_request_cpu_s``, ``api_prompt_token_cpu_s``: a queue,
  tokenload.sim.apiserver; zero in the built-in profiles, so ``frontend`` is a ground truth only
  for a profile that sets them). The profile's other serving terms are not relaxed:
  ``frontend_request_s`` (20.5 ms fitted in the H200's) is a latency, not a queue, so it limits no
  load's throughput, and ``output_token_overhead_s`` is zero in the built-in profiles.

The oracle reads the emulator's internals (its profile, its token times); the diagnosis it checks
may not. Pure: simulated time only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tokenload.sim.engine import EngineConfig, SimEngine
from tokenload.sim.profile import Profile, load_profile
from tokenload.sim.virtual_sweep import VirtualSchedule, VirtualWorkload, virtual_sweep

__all__ = [
    "RELAXATIONS",
    "RELAX_GAIN",
    "SATURATION_GAIN",
    "SECONDARY_SHARE",
    "OracleVerdict",
    "judge_level",
    "relaxation_label",
    "steady_throughput",
]

SATURATION_GAIN = 0.25
RELAX_GAIN = 0.10
SECONDARY_SHARE = 0.8

#: Relaxation name -> the verdict label it stands for.
RELAXATIONS = {
    "flops": "compute",
    "bandwidth": "memory_bandwidth",
    "kv_blocks": "kv_capacity",
    "max_num_seqs": "scheduler_limit",
    "max_num_batched_tokens": "scheduler_limit",
    "api_server_count": "frontend",
}


@dataclass(frozen=True, slots=True)
class OracleVerdict:
    label: str  # none | compute | memory_bandwidth | kv_capacity | scheduler_limit | frontend | unexplained
    saturated: bool
    throughput: float
    doubled_throughput: float
    #: Relaxation name -> throughput gain (share) at the same load (an open loop: at twice its
    #: rate, over the doubled throughput); empty when not saturated.
    gains: dict[str, float]
    relaxation: str | None = None
    secondary: str | None = None


def _relaxed(profile: Profile, config: EngineConfig, which: str) -> tuple[Profile, EngineConfig]:
    gpu = profile.gpu
    if which == "flops":
        upd = {"peak_bf16_flops_per_s": gpu.peak_bf16_flops_per_s * 2}
        if gpu.peak_fp8_flops_per_s is not None:
            upd["peak_fp8_flops_per_s"] = gpu.peak_fp8_flops_per_s * 2
        return profile.model_copy(update={"gpu": gpu.model_copy(update=upd)}), config
    if which == "bandwidth":
        upd = {"memory_bandwidth_bytes_per_s": gpu.memory_bandwidth_bytes_per_s * 2}
        return profile.model_copy(update={"gpu": gpu.model_copy(update=upd)}), config
    engine = SimEngine(profile, config)
    if which == "kv_blocks":
        return profile, config.model_copy(update={"num_gpu_blocks": engine.num_gpu_blocks * 2})
    if which == "max_num_seqs":
        return profile, config.model_copy(update={"max_num_seqs": config.max_num_seqs * 2})
    if which == "api_server_count":
        return profile, config.model_copy(update={"api_server_count": config.api_server_count * 2})
    if which == "max_num_batched_tokens":
        return profile, config.model_copy(
            update={"max_num_batched_tokens": engine.max_num_batched_tokens * 2}
        )
    raise ValueError(f"unknown relaxation {which!r}")


def steady_throughput(
    profile: Profile,
    config: EngineConfig,
    workload: VirtualWorkload,
    *,
    concurrency: int | None = None,
    rate_rps: float | None = None,
    duration_s: float = 60.0,
    warmup_s: float = 20.0,
) -> float:
    """Output tokens/s the engine generated over ``[warmup_s, duration_s]`` at one load level."""
    schedule = VirtualSchedule(
        concurrency=(concurrency,) if concurrency else (),
        rates=(rate_rps,) if rate_rps else (),
        step_duration_s=duration_s,
        warmup=warmup_s,
        scrape_interval_s=duration_s,
        drain_s=0.0,
        max_in_flight=4096,
        settle=False,  # one level, held: nothing to settle
        client_turnaround_s=(0.0,),  # the oracle's definition: users send again at once
    )
    sweep = virtual_sweep(profile, config, workload, schedule)
    tokens = sum(1 for r in sweep.requests for t in r.token_times_s if warmup_s <= t < duration_s)
    return tokens / (duration_s - warmup_s)


def judge_level(
    profile: Profile | str,
    config: EngineConfig | None,
    workload: VirtualWorkload,
    *,
    concurrency: int | None = None,
    rate_rps: float | None = None,
    duration_s: float = 60.0,
    warmup_s: float = 20.0,
) -> OracleVerdict:
    """The ground truth at one load level (a closed loop of ``concurrency`` users or an open loop
    at ``rate_rps``)."""
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    cfg = config or EngineConfig()
    kw = {"duration_s": duration_s, "warmup_s": warmup_s}
    base = steady_throughput(prof, cfg, workload, concurrency=concurrency, rate_rps=rate_rps, **kw)
    doubled = steady_throughput(
        prof,
        cfg,
        workload,
        concurrency=concurrency * 2 if concurrency else None,
        rate_rps=rate_rps * 2 if rate_rps else None,
        **kw,
    )
    if base > 0 and doubled >= base * (1 + SATURATION_GAIN):
        return OracleVerdict("none", False, base, doubled, {})
    # Relaxed at the level itself (closed loop) or at twice its rate (open loop): see above.
    ref = base if concurrency else doubled
    relax_rate = rate_rps * 2 if rate_rps and not concurrency else None
    gains: dict[str, float] = {}
    api_costs = prof.api_request_cpu_s > 0 or prof.api_prompt_token_cpu_s > 0
    for which in RELAXATIONS:
        if which == "api_server_count" and not api_costs:
            continue  # an API server that costs nothing gains nothing from twice the processes
        p, c = _relaxed(prof, cfg, which)
        t = steady_throughput(p, c, workload, concurrency=concurrency, rate_rps=relax_rate, **kw)
        gains[which] = t / ref - 1 if ref > 0 else 0.0
    label, best, secondary = relaxation_label(gains)
    return OracleVerdict(label, True, base, doubled, gains, best, secondary)


def relaxation_label(gains: dict[str, float]) -> tuple[str, str | None, str | None]:
    """A saturated level's label from its relaxations' gains (keys of :data:`RELAXATIONS`): the
    label of the largest gain, ``unexplained`` when none reaches :data:`RELAX_GAIN`; with the
    relaxation that gave it and the secondary label (or None)."""
    ranked = sorted(gains, key=gains.__getitem__, reverse=True)
    best = ranked[0]
    if gains[best] < RELAX_GAIN:
        return "unexplained", None, None
    secondary = next(
        (
            w
            for w in ranked[1:]
            if RELAXATIONS[w] != RELAXATIONS[best]
            and gains[w] >= RELAX_GAIN
            and gains[w] >= SECONDARY_SHARE * gains[best]
        ),
        None,
    )
    return RELAXATIONS[best], best, None if secondary is None else RELAXATIONS[secondary]


def with_seed(workload: VirtualWorkload, seed: int) -> VirtualWorkload:
    return replace(workload, seed=seed)
