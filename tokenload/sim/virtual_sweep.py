"""A load sweep in simulated time: what ``tokenload sweep`` would record against the emulator,
in seconds and without a network.

The emulator's engine runs under the virtual driver; closed-loop users (a staircase) or Poisson
arrivals (rate steps) load it; its ``/metrics`` page is rendered and parsed at every scrape tick
exactly as the scraper parses a real server's; the client's records are timed with the one
definition of every metric (:func:`tokenload.metrics.definitions.compute_timing`). The steps come
out in ``summary.json``'s format and are judged by the same function as a real run's. Requests
outlive steps, as in a real run: each is counted in the step in which it started.

Pure of I/O. The analysis that judges these steps sees only what a real server shows; the
engine's internals stay here (the ground-truth oracle, :mod:`tokenload.sim.oracle`, reads them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from tokenload.loadgen.phases import StepWindow
from tokenload.metrics.aggregate import LLMStats
from tokenload.metrics.definitions import compute_timing
from tokenload.metrics.records import itl_summary
from tokenload.metrics.step_tally import new_tally, tally_record, tokens_by_step
from tokenload.servermetrics.parse import parse_page
from tokenload.servermetrics.summary import summarize_window
from tokenload.sim.engine import EngineConfig, SimEngine
from tokenload.sim.metrics import SimMetrics
from tokenload.sim.profile import Profile, load_profile
from tokenload.sim.virtual import RequestSpec, VirtualDriver, VirtualRequest
from tokenload.workload.lengths import parse_length_spec

__all__ = ["VirtualPoint", "VirtualSchedule", "VirtualSweep", "VirtualWorkload", "virtual_sweep"]

#: Prompt token ids are drawn from the byte vocabulary's printable range (the emulator's tokenizer).
_TOKEN_LOW, _TOKEN_HIGH = 32, 126


@dataclass(frozen=True, slots=True)
class VirtualWorkload:
    """What each request asks for: length specs as ``--prompt-tokens``/``--output-tokens`` take
    them, and an optional shared prefix (``prefix_groups`` distinct ones of ``prefix_tokens``)."""

    prompt_tokens: str = "256"
    output_tokens: str = "128"
    prefix_tokens: int = 0
    prefix_groups: int = 1
    seed: int = 0


@dataclass(frozen=True, slots=True)
class VirtualSchedule:
    """The load: a closed-loop staircase (``concurrency``) or open-loop Poisson rate steps
    (``rates``, with at most ``max_in_flight`` requests in flight, as tokenload's user pool)."""

    concurrency: tuple[int, ...] = ()
    rates: tuple[float, ...] = ()
    step_duration_s: float = 30.0
    #: A fraction (< 1) of each step, or seconds, left out of its statistics.
    warmup: float = 0.2
    scrape_interval_s: float = 1.0
    max_in_flight: int = 512
    #: After the last step, how long requests still streaming may take to finish.
    drain_s: float = 300.0

    def __post_init__(self) -> None:
        if bool(self.concurrency) == bool(self.rates):
            raise ValueError("virtual sweep: give either concurrency levels or rates, not both or neither")
        if any(c < 1 for c in self.concurrency) or any(r <= 0 for r in self.rates):
            raise ValueError("virtual sweep: concurrency levels must be >= 1 and rates > 0")
        if self.step_duration_s <= 0 or self.scrape_interval_s <= 0:
            raise ValueError("virtual sweep: step duration and scrape interval must be positive")

    @property
    def warmup_s(self) -> float:
        return self.warmup * self.step_duration_s if self.warmup < 1 else self.warmup

    @property
    def num_steps(self) -> int:
        return len(self.concurrency or self.rates)


@dataclass(slots=True)
class VirtualPoint:
    """One scrape of the emulated server (the scraper's ScrapePoint, without its I/O fields)."""

    t: float
    target: str
    ok: bool
    scalars: dict[str, float]
    histograms: dict[str, Any]


@dataclass(slots=True)
class VirtualSweep:
    """What the sweep recorded: ``steps`` in summary.json's format (unjudged), the per-request
    records, the scrape points, and the engine (for ground truth only)."""

    steps: list[dict[str, Any]]
    records: list[dict[str, Any]]
    points: list[VirtualPoint]
    engine: SimEngine
    requests: list[VirtualRequest]
    windows: list[StepWindow]


class _Prompts:
    def __init__(self, workload: VirtualWorkload) -> None:
        self.rng = random.Random(workload.seed)
        self.prompt_len = parse_length_spec(workload.prompt_tokens, "prompt_tokens")
        self.output_len = parse_length_spec(workload.output_tokens, "output_tokens")
        self.prefixes = [
            [self.rng.randint(_TOKEN_LOW, _TOKEN_HIGH) for _ in range(workload.prefix_tokens)]
            for _ in range(max(1, workload.prefix_groups))
        ]
        self.prefix_tokens = workload.prefix_tokens

    def make(self, max_model_len: int) -> RequestSpec:
        rng = self.rng
        n = self.prompt_len.sample(rng)
        out = self.output_len.sample(rng)
        n = min(n, max_model_len - 2)
        out = max(1, min(out, max_model_len - n - 1))
        prefix = (
            self.prefixes[rng.randrange(len(self.prefixes))][: max(0, n - 1)] if self.prefix_tokens else []
        )
        body = [rng.randint(_TOKEN_LOW, _TOKEN_HIGH) for _ in range(n - len(prefix))]
        return RequestSpec(prefix + body, out, ignore_eos=True)


def virtual_sweep(
    profile: Profile | str,
    config: EngineConfig | None,
    workload: VirtualWorkload,
    schedule: VirtualSchedule,
) -> VirtualSweep:
    """Run ``schedule`` against an emulated engine in simulated time."""
    from tokenload.results.summary import step_summary  # the one step definition

    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    cfg = config or EngineConfig()
    metrics = SimMetrics(
        prof.model.name,
        names=cfg.preset,
        max_num_seqs=cfg.max_num_seqs,
        include_process_metrics=False,
        include_http_metrics=False,
    )
    engine = SimEngine(prof, cfg, metrics=metrics)
    driver = VirtualDriver(engine, record_timeline=False)
    prompts = _Prompts(workload)
    dur, warm = schedule.step_duration_s, schedule.warmup_s
    windows = [
        StepWindow(
            k,
            schedule.concurrency[k] if schedule.concurrency else schedule.max_in_flight,
            None if schedule.concurrency else schedule.rates[k],
            k * dur,
            k * dur + warm,
            (k + 1) * dur,
        )
        for k in range(schedule.num_steps)
    ]
    end_all = windows[-1].end
    points: list[VirtualPoint] = []
    sent_at: dict[str, float] = {}  # request id -> the time its user meant to send it
    lag: dict[str, float] = {}
    queued: set[str] = set()
    state = {"step": 0}

    def scrape(t: float) -> None:
        vals = parse_page(metrics.render().decode())
        points.append(VirtualPoint(t, "sim", True, dict(vals.scalars), dict(vals.histograms)))

    ticks = {
        round(i * schedule.scrape_interval_s, 6) for i in range(int(end_all / schedule.scrape_interval_s) + 1)
    }
    ticks |= {w.measure_start for w in windows} | {w.end for w in windows}
    for t in sorted(ticks):
        driver.at(t, scrape)

    def submit(at_s: float, user: int | None, intended: float | None = None) -> None:
        rid = driver.submit(at_s, prompts.make(engine.max_model_len), user)
        sent_at[rid] = at_s if intended is None else intended
        if intended is not None:
            lag[rid] = at_s - intended
            if at_s > intended:
                queued.add(rid)

    if schedule.concurrency:
        busy: set[int] = set()

        def start_step(t: float, k: int) -> None:
            state["step"] = k
            for u in range(windows[k].concurrency):
                if u not in busy:
                    busy.add(u)
                    submit(t, u)

        for w in windows:
            driver.at(w.start, lambda t, k=w.index: start_step(t, k))

        def on_finish(req: VirtualRequest, now_s: float) -> None:
            u = req.client
            busy.discard(u)  # type: ignore[arg-type]
            if u is not None and now_s < end_all and u < windows[state["step"]].concurrency:
                busy.add(u)
                submit(now_s, u)
    else:
        rng = random.Random(workload.seed + 1)
        in_flight = [0]
        backlog: list[float] = []

        def arrive(t: float) -> None:
            if in_flight[0] < schedule.max_in_flight:
                in_flight[0] += 1
                submit(t, None, t)
            else:
                backlog.append(t)

        for w in windows:
            t = w.start
            while True:
                t += rng.expovariate(w.target_rate_rps or 1.0)
                if t >= w.end:
                    break
                driver.at(t, arrive)

        def on_finish(req: VirtualRequest, now_s: float) -> None:
            in_flight[0] -= 1
            if backlog:
                in_flight[0] += 1
                submit(now_s, None, backlog.pop(0))

    run = driver.run(on_finish, until_s=end_all + schedule.drain_s)
    records = [
        _record(r, sent_at[r.request_id], lag.get(r.request_id), r.request_id in queued, windows)
        for r in run.requests
    ]
    steps = []
    for w in windows:
        stats = LLMStats()
        done = new_tally()
        sent = 0
        for rec, req in zip(records, run.requests, strict=True):
            if rec["step"] == w.index and rec["_t_sent"] >= w.measure_start:
                sent += 1
                if req.finished:
                    stats.record(rec, rec["_itl"])
                else:  # still streaming when the drain bound ran out: abandoned, as a real run's
                    stats.cancelled += 1
            if req.finished:  # what ended, and the tokens that arrived, in the measured part
                tally_record(done, rec, w.measure_start, w.end, w.index)  # type: ignore[arg-type]
        done["sent"] = sent  # by the step the request belongs to, abandoned ones included
        server = summarize_window(points, w.measure_start, w.end)  # type: ignore[arg-type]
        steps.append(step_summary(w, stats, done, server, None, []))
    for rec in records:
        rec.pop("_itl")
        rec.pop("_t_sent")
    return VirtualSweep(steps, records, points, engine, run.requests, windows)


def _record(
    req: VirtualRequest, intended: float, lag_s: float | None, queued: bool, windows: list[StepWindow]
) -> dict[str, Any]:
    t_sent = req.arrival_s
    step = max((w.index for w in windows if w.start <= intended), default=0)
    window = windows[step]
    measured = window.measure_start is not None and window.measure_start <= intended
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
        "phase": "measure" if measured else "warmup",
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
        "_t_sent": intended,
    }
