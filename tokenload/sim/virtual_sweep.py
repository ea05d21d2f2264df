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

import math
import random
from dataclasses import dataclass
from typing import Any

from tokenload.loadgen.phases import StepWindow
from tokenload.loadgen.steps import SHRINK_MAX_S, spawn_rate
from tokenload.metrics.aggregate import LLMStats
from tokenload.metrics.definitions import compute_timing
from tokenload.metrics.records import itl_summary
from tokenload.metrics.step_tally import new_tally, tally_record, tokens_by_step
from tokenload.servermetrics.parse import parse_page
from tokenload.servermetrics.summary import summarize_window
from tokenload.sim.engine import EngineConfig, SimEngine
from tokenload.sim.metrics import SimMetrics
from tokenload.sim.profile import Profile, load_profile
from tokenload.sim.turnaround import CLIENT_TURNAROUND_S, check_quantiles, turnaround
from tokenload.sim.virtual import RequestSpec, VirtualDriver, VirtualRequest
from tokenload.workload.lengths import fitting_lengths, parse_length_spec

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
    #: After the load stops, how long requests still streaming may take to finish.
    drain_s: float = 300.0
    #: Steps run as tokenload's step shapes run them (``loadgen/step_machine.py``): a step's users are
    #: spawned at the shapes' rate (``loadgen/steps.spawn_rate``) and its clock starts at the
    #: first tick that has them all (going down: once the extra users' requests have ended, at
    #: most ``SHRINK_MAX_S``); after it ends its load goes on until every request of its measured part
    #: has ended (looked at each ``tick_s``, at most ``settle_timeout_s``), the last step's too,
    #: and then the load stops. (The real shape looks within each tick and starts a step's clock
    #: as soon as Locust says its users all run, loadgen/step_machine.py: its steps start up to a
    #: tick sooner and settle up to a tick sooner; that time is load before a step's warm-up or
    #: between steps, in no measured part. Kept, so cached virtual sweeps stay valid.) An
    #: open-loop step's arrivals stop at its end, those still waiting
    #: for a free user too. False: steps follow back to back, every user starts at once, and load
    #: stops at the last step's end (a fixed schedule).
    settle: bool = True
    settle_timeout_s: float = 60.0
    #: Closed loop: from a request's last token at the server to its user's next request reaching
    #: the server (the response's way back, the client, the next request's way there), drawn per
    #: request from these quantiles (evenly spaced, min to max; one value: always that).
    #: What it changes: it is not 0 (the next request misses the engine step that starts as the
    #: last one ends, and waits for it, as a real client's does), and it is not one value (users
    #: with equal requests otherwise lock into one phase: a request always meets the other's
    #: prefill, which real users' spread breaks up).
    client_turnaround_s: tuple[float, ...] = CLIENT_TURNAROUND_S
    #: Locust calls a load shape's tick once a second.
    tick_s: float = 1.0

    def __post_init__(self) -> None:
        if bool(self.concurrency) == bool(self.rates):
            raise ValueError("virtual sweep: give either concurrency levels or rates, not both or neither")
        if any(c < 1 for c in self.concurrency) or any(r <= 0 for r in self.rates):
            raise ValueError("virtual sweep: concurrency levels must be >= 1 and rates > 0")
        if self.step_duration_s <= 0 or self.scrape_interval_s <= 0 or self.tick_s <= 0:
            raise ValueError("virtual sweep: step duration, scrape interval and tick must be positive")
        if self.settle_timeout_s < 0 or self.drain_s < 0:
            raise ValueError("virtual sweep: settle timeout and drain must be >= 0")
        q = check_quantiles(self.client_turnaround_s, "virtual sweep: client turnaround")
        object.__setattr__(self, "client_turnaround_s", q)

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
        # As the client draws them (workload.plan.RequestPlanner): again until they fit.
        n, out, _ = fitting_lengths(
            lambda: (self.prompt_len.sample(rng), self.output_len.sample(rng)),
            max_model_len,
            names="--prompt-tokens/--output-tokens",  # tokenload plan's (and sweep's) options
        )
        # A prompt no longer than the prefix keeps part of it; the client draws such a length
        # again (workload.plan, min_input). Kept so as not to move the verdict grid's sweeps
        # (SWEEP_VERSION 4); the two differ only for prompt lengths that reach below the prefix.
        prefix = (
            self.prefixes[rng.randrange(len(self.prefixes))][: max(0, n - 1)] if self.prefix_tokens else []
        )
        body = [rng.randint(_TOKEN_LOW, _TOKEN_HIGH) for _ in range(n - len(prefix))]
        return RequestSpec(prefix + body, out, ignore_eos=True)


class _SweepRun:
    """The sweep's clock-driven part: steps begin, end and settle as tokenload's step shapes
    (``loadgen/step_machine.py``) do, users send, and the server is scraped."""

    def __init__(
        self,
        driver: VirtualDriver,
        metrics: SimMetrics,
        prompts: _Prompts,
        schedule: VirtualSchedule,
        rng: random.Random,
        turn_rng: random.Random,
    ) -> None:
        self.driver = driver
        self.metrics = metrics
        self.prompts = prompts
        self.schedule = schedule
        self.rng = rng  # an open loop's arrivals
        self.turn_rng = turn_rng  # closed-loop users' turnarounds
        self.windows: list[StepWindow] = []
        self.points: list[VirtualPoint] = []
        self.sent_at: dict[str, float] = {}  # request id -> the time its user meant to send it
        self.lag: dict[str, float] = {}
        self.queued: set[str] = set()
        self.step = 0  # the step whose load is offered (through its settle)
        self.sending = True  # closed loop: users send again when a request ends
        self.busy: set[int] = set()
        self.in_flight = 0  # open loop
        self.backlog: list[float] = []  # open loop: arrivals waiting for a free user
        #: Per step, its measured requests not yet ended; each request's step if it is one.
        self.outstanding: dict[int, int] = {}
        self.measured_in: dict[str, int] = {}
        self._scraped: set[float] = set()
        self._last_end: float | None = None  # the last step's end, once it has begun

    # -- steps ---------------------------------------------------------------------------
    def begin(self, t: float, k: int) -> None:
        sch = self.schedule
        w = StepWindow(
            k,
            sch.concurrency[k] if sch.concurrency else None,  # a rate step's load is its rate
            None if sch.concurrency else sch.rates[k],
            t,
            t + sch.warmup_s,
            t + sch.step_duration_s,
        )
        self.windows.append(w)
        self.step = k
        self.outstanding[k] = 0
        if k == sch.num_steps - 1:
            self._last_end = w.end
        for at in (w.start, w.measure_start, w.end):
            self.scrape_at(at)  # type: ignore[arg-type]
        self.driver.at(w.end, lambda now: self.end(now, k))  # type: ignore[arg-type]
        if sch.concurrency:
            if not sch.settle:
                self.spawn(t)
        else:  # the step's Poisson arrivals
            at = t
            while True:
                at += self.rng.expovariate(w.target_rate_rps or 1.0)
                if at >= w.end:  # type: ignore[operator]
                    break
                self.driver.at(at, self.arrive)

    def start(self, t: float) -> None:
        """The first step: spawned, then its clock (at once without settling)."""
        if not self.schedule.settle:
            self.begin(t, 0)
            return
        self.step = 0
        self._begin_after_spawn(t, 0)

    def spawn(self, t: float) -> float:
        """Start the step's users that are not running; returns when the last one started.
        Locust dispatches ``floor(rate)`` users a second, each batch at once (``locust/dispatch.py``);
        at the shapes' rate (``loadgen/steps.spawn_rate``) that is every user of a step of up to
        1,000 at once."""
        users = self.schedule.concurrency[self.step]
        batch = int(spawn_rate(users)) if self.schedule.settle else users
        new = [u for u in range(users) if u not in self.busy]
        for j, u in enumerate(new):
            self.busy.add(u)
            self.submit(t + (j // batch) * 1.0, u)
        return t + max(0, (len(new) - 1) // batch) * 1.0

    def _begin_after_spawn(self, t: float, k: int) -> None:
        """Spawn step ``k``'s users (closed loop; an open loop's pool is there) and start its
        clock at the first shape tick after the runner holds them all."""
        last = self.spawn(t) if self.schedule.concurrency else t
        tick = self.schedule.tick_s
        ticks = math.floor((last - t) / tick + 1e-9) + 1  # the first tick after the last batch
        self.driver.at(t + ticks * tick, lambda now: self.begin(now, k))

    def _await_shrink(self, t: float, since: float, k: int) -> None:
        """Going down: the clock starts at the first tick with no extra user still running."""
        level = self.schedule.concurrency[k]
        if any(u >= level for u in self.busy) and t - since < SHRINK_MAX_S - 1e-9:
            self.driver.at(t + self.schedule.tick_s, lambda now: self._await_shrink(now, since, k))
            return
        self.begin(t, k)

    def end(self, t: float, k: int) -> None:
        if self.schedule.settle:
            # The pacer drops the step's schedule: arrivals no user was free for are not sent.
            self.backlog.clear()
            self._settle_check(t, t, k)
        else:  # back to back: the next step at once
            self._settled(t, k)

    def _settle_check(self, t: float, ended: float, k: int) -> None:
        """Settle: the step's load goes on until every request of its measured part has ended,
        looked at each shape tick after the end, at most ``settle_timeout_s`` (the first tick
        past it, as the shape sees it)."""
        pending = self.outstanding[k]
        if t > ended and (not pending or t - ended >= self.schedule.settle_timeout_s - 1e-9):
            self.windows[k].unfinished_at_decision = pending
            self._settled(t, k)
            return
        self.driver.at(t + self.schedule.tick_s, lambda now: self._settle_check(now, ended, k))

    def _settled(self, t: float, k: int) -> None:
        sch = self.schedule
        if k + 1 < sch.num_steps:
            if not sch.settle:
                self.begin(t, k + 1)
                return
            # The next step's users are spawned now (going down, the extra ones stop after
            # their request); its clock starts when the runner holds exactly them, at a shape
            # tick (shapes.StepShape._users_reached).
            self.step = k + 1
            if sch.concurrency and sch.concurrency[k + 1] < sch.concurrency[k]:
                self.driver.at(t + sch.tick_s, lambda now: self._await_shrink(now, t, k + 1))
            else:
                self._begin_after_spawn(t, k + 1)
            return
        self.sending = False  # the users stop; what they started may finish within drain_s
        self.driver.stop_s = t + sch.drain_s

    # -- requests ------------------------------------------------------------------------
    def submit(self, at_s: float, user: int | None, intended: float | None = None) -> None:
        rid = self.driver.submit(at_s, self.prompts.make(self.driver.engine.max_model_len), user)
        when = at_s if intended is None else intended
        self.sent_at[rid] = when
        if intended is not None:
            self.lag[rid] = at_s - intended
            if at_s > intended:
                self.queued.add(rid)
        step, phase = step_and_phase(self.windows, when, at_s)
        if phase == "measure":
            self.outstanding[step] += 1  # type: ignore[index]
            self.measured_in[rid] = step  # type: ignore[assignment]

    def arrive(self, t: float) -> None:
        if self.in_flight < self.schedule.max_in_flight:
            self.in_flight += 1
            self.submit(t, None, t)
        else:
            self.backlog.append(t)

    def on_finish(self, req: VirtualRequest, now_s: float) -> None:
        k = self.measured_in.pop(req.request_id, None)
        if k is not None:
            self.outstanding[k] -= 1
        if self.schedule.concurrency:
            u = req.client
            self.busy.discard(u)  # type: ignore[arg-type]
            if self.sending and u is not None and u < self.schedule.concurrency[self.step]:
                self.busy.add(u)
                self.submit(now_s + turnaround(self.schedule.client_turnaround_s, self.turn_rng), u)
        else:
            self.in_flight -= 1
            if self.backlog:
                self.in_flight += 1
                self.submit(now_s, None, self.backlog.pop(0))

    # -- the server's /metrics -----------------------------------------------------------
    def scrape_at(self, t: float) -> None:
        key = round(t, 6)
        if key not in self._scraped:
            self._scraped.add(key)
            self.driver.at(t, self._scrape)

    def _scrape(self, t: float) -> None:
        vals = parse_page(self.metrics.render().decode())
        self.points.append(VirtualPoint(t, "sim", True, dict(vals.scalars), dict(vals.histograms)))

    def periodic_scrape(self, i: int) -> None:
        """The scraper's own clock: every ``scrape_interval_s`` until the last step's end."""
        self.scrape_at(round(i * self.schedule.scrape_interval_s, 6))
        nxt = round((i + 1) * self.schedule.scrape_interval_s, 6)
        if self._last_end is None or nxt <= self._last_end:
            self.driver.at(nxt, lambda _t: self.periodic_scrape(i + 1))


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
    run = _SweepRun(
        driver,
        metrics,
        _Prompts(workload),
        schedule,
        random.Random(workload.seed + 1),
        random.Random(f"client turnaround {workload.seed}"),  # a stream of its own
    )
    driver.at(0.0, run.start)
    driver.at(0.0, lambda _t: run.periodic_scrape(0))
    finished = driver.run(run.on_finish)
    windows = run.windows
    records = [
        _record(r, run.sent_at[r.request_id], run.lag.get(r.request_id), r.request_id in run.queued, windows)
        for r in finished.requests
    ]
    steps = []
    for w in windows:
        stats = LLMStats()
        done = new_tally()
        sent = 0
        for rec, req in zip(records, finished.requests, strict=True):
            if rec["step"] == w.index and rec["phase"] == "measure":
                sent += 1
                if req.finished:
                    stats.record(rec, rec["_itl"])
                else:  # still streaming when the drain bound ran out: abandoned, as a real run's
                    stats.cancelled += 1
            if req.finished:  # what ended, and the tokens that arrived, in the measured part
                tally_record(done, rec, w.measure_start, w.end, w.index)  # type: ignore[arg-type]
        done["sent"] = sent  # by the step the request belongs to, abandoned ones included
        server = summarize_window(run.points, w.measure_start, w.end)  # type: ignore[arg-type]
        steps.append(step_summary(w, stats, done, server, None, []))
    for rec in records:
        rec.pop("_itl")
    return VirtualSweep(steps, records, run.points, engine, finished.requests, windows)


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


def _record(
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
