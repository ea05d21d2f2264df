"""A measured step and the emulator's figures for its load: one user's request alone, or a
closed loop of the step's users in simulated time. What calibration compares a run with
(:mod:`tokenload.sim.calibrate`). Pure: no I/O."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tokenload.sim.engine import EngineConfig, SimEngine
from tokenload.sim.profile import Profile
from tokenload.sim.virtual import RequestSpec, VirtualDriver, VirtualRequest, run_closed_loop

__all__ = ["ROUNDS", "WARM_ROUNDS", "Observation", "Prediction", "predict"]


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured step: its load and lengths, and the figures it measured (None: not measured)."""

    label: str
    concurrency: int
    prompt_tokens: int
    output_tokens: int
    ttft_ms_p50: float | None
    tpot_ms_p50: float | None
    output_tokens_per_s: float | None


@dataclass(frozen=True, slots=True)
class Prediction:
    ttft_ms_p50: float
    tpot_ms_p50: float
    output_tokens_per_s: float


#: Requests each user sends in a replay, and how many of them the throughput leaves out as a
#: warm-up: 8 and 2 read tokenload plan's steps to 0-8 % (3 and 1 read them 0-30 % high: the
#: users' first requests, sent at once, line up in waves a step does not have; measured on the
#: H100 profile, 2-64 users, 2026-12-04).
ROUNDS = 8
WARM_ROUNDS = 2


@functools.lru_cache(maxsize=64)
def _prompt(n: int) -> tuple[int, ...]:
    rng = random.Random(n)
    return tuple(rng.randint(32, 126) for _ in range(n))


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def predict(profile: Profile, config: EngineConfig, obs: Observation) -> Prediction:
    """The emulator's figures for ``obs``'s load: one request alone for a single user (exact:
    nothing else runs), else a closed loop of its users in simulated time (their first request
    left out, as a warm-up would)."""
    if obs.concurrency <= 1:
        engine = SimEngine(profile, config)
        driver = VirtualDriver(engine, record_timeline=False)
        driver.submit(0.0, RequestSpec(list(_prompt(obs.prompt_tokens)), obs.output_tokens))
        req = driver.run().requests[0]
        tpot = req.tpot_s * 1000.0
        return Prediction(req.ttft_s * 1000.0, tpot, obs.output_tokens / req.e2e_s)
    engine = SimEngine(profile, config)
    prompt = _prompt(obs.prompt_tokens)
    run = run_closed_loop(
        engine,
        obs.concurrency,
        ROUNDS,
        lambda _client, _i: RequestSpec(list(prompt), obs.output_tokens),
        record_timeline=False,
    )
    by_client: dict[int, list[VirtualRequest]] = {}
    for r in run.requests:
        if r.client is not None and r.finished:
            by_client.setdefault(r.client, []).append(r)
    for reqs in by_client.values():
        reqs.sort(key=lambda r: r.arrival_s)
    later = [r for reqs in by_client.values() for r in reqs[1:]]
    return Prediction(
        _median([r.ttft_s * 1000.0 for r in later]),
        _median([r.tpot_s * 1000.0 for r in later]),
        _steady_tokens_per_s(list(by_client.values())),
    )


def _steady_tokens_per_s(by_client: Sequence[Sequence[VirtualRequest]]) -> float:
    """Output tokens/s of a closed loop (each user's requests in order) while every user is in
    it and past its first WARM_ROUNDS requests: tokens counted as they arrived (as a step counts
    them), from the moment the last user finished its warm-up to the moment the first user
    finished its last request. Counting the later requests' tokens over their whole span instead
    takes in the first requests' time without their tokens: where a queue serves requests one
    after another (an API server's), that read 67 of the 100 req/s served at 64 users."""
    t0 = max(reqs[min(WARM_ROUNDS, len(reqs)) - 1].token_times_s[-1] for reqs in by_client)
    t1 = min(reqs[-1].token_times_s[-1] for reqs in by_client)
    if t1 <= t0:
        return 0.0
    tokens = sum(1 for reqs in by_client for r in reqs for t in r.token_times_s if t0 < t <= t1)
    return tokens / (t1 - t0)
