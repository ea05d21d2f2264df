"""A load sweep in simulated time: what ``tokenload sweep`` would record against the emulator,
in seconds and without a network.

The emulator's engine runs under the virtual driver; closed-loop users (a staircase), Poisson
arrivals (rate steps) or a trace's rows at their times (``--shape trace``) load it; its
``/metrics`` page is rendered and parsed at every scrape tick exactly as the scraper parses a
real server's; the client's records are timed with the one
definition of every metric (:func:`tokenload.metrics.definitions.compute_timing`). The steps come
out in ``summary.json``'s format and are judged by the same function as a real run's. Requests
outlive steps, as in a real run: each is counted in the step in which it started.

Pure of I/O. The analysis that judges these steps sees only what a real server shows; the
engine's internals stay here (the ground-truth oracle, :mod:`tokenload.sim.oracle`, reads them).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from tokenload.loadgen.phases import StepWindow
from tokenload.loadgen.steps import SHRINK_MAX_S, spawn_rate
from tokenload.metrics.aggregate import LLMStats
from tokenload.metrics.step_tally import new_tally, tally_record
from tokenload.servermetrics.parse import parse_page
from tokenload.servermetrics.summary import summarize_window
from tokenload.sim.engine import EngineConfig, SimEngine
from tokenload.sim.metrics import SimMetrics
from tokenload.sim.profile import Profile, load_profile
from tokenload.sim.turnaround import CLIENT_TURNAROUND_S, check_quantiles, turnaround
from tokenload.sim.virtual import VirtualDriver, VirtualRequest
from tokenload.sim.virtual_prompts import VirtualPrompts, VirtualWorkload
from tokenload.sim.virtual_records import client_record, step_and_phase
from tokenload.workload.trace import REPLAY_TAIL_S, Trace, TraceWindow

__all__ = ["VirtualPoint", "VirtualSchedule", "VirtualSweep", "VirtualWorkload", "virtual_sweep"]

#: An open-loop step's schedule (a trace window's rows, a rate step's Poisson arrivals) starts
#: this long after the step (the master announces its schedule's t0 as now + 0.05 s,
#: loadgen/plugin.py).
_SCHEDULE_DELAY_S = 0.05


@dataclass(frozen=True, slots=True)
class VirtualSchedule:
    """The load: a closed-loop staircase (``concurrency``), open-loop Poisson rate steps
    (``rates``), or a trace replayed as ``--shape trace`` replays it (``trace``, in
    ``trace_steps`` windows of equal duration, each a step of the window's span plus
    ``REPLAY_TAIL_S``; ``step_duration_s`` is then unused). Open loops keep at most
    ``max_in_flight`` requests in flight, as tokenload's user pool does."""

    concurrency: tuple[int, ...] = ()
    rates: tuple[float, ...] = ()
    trace: Trace | None = None
    trace_steps: int = 1
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
    #: A trace's steps: its ``trace_steps`` windows (the whole trace for one); set from them.
    trace_windows: tuple[TraceWindow, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if sum((bool(self.concurrency), bool(self.rates), self.trace is not None)) != 1:
            raise ValueError("virtual sweep: give one of concurrency levels, rates or a trace")
        if self.trace is not None:
            object.__setattr__(self, "trace_windows", tuple(_trace_windows(self.trace, self.trace_steps)))
        if any(c < 1 for c in self.concurrency) or any(r <= 0 for r in self.rates):
            raise ValueError("virtual sweep: concurrency levels must be >= 1 and rates > 0")
        if self.step_duration_s <= 0 or self.scrape_interval_s <= 0 or self.tick_s <= 0:
            raise ValueError("virtual sweep: step duration, scrape interval and tick must be positive")
        if self.settle_timeout_s < 0 or self.drain_s < 0:
            raise ValueError("virtual sweep: settle timeout and drain must be >= 0")
        q = check_quantiles(self.client_turnaround_s, "virtual sweep: client turnaround")
        object.__setattr__(self, "client_turnaround_s", q)

    @property
    def num_steps(self) -> int:
        return len(self.trace_windows) if self.trace is not None else len(self.concurrency or self.rates)

    def duration_of(self, k: int) -> float:
        """Step ``k``'s duration: a trace window's span and tail, else ``step_duration_s``."""
        if self.trace is None:
            return self.step_duration_s
        w = self.trace_windows[k]
        return w.end_s - w.start_s + REPLAY_TAIL_S

    def warmup_of(self, k: int) -> float:
        """Seconds of step ``k`` left out of its statistics."""
        return self.warmup * self.duration_of(k) if self.warmup < 1 else self.warmup


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


def _trace_windows(trace: Trace, steps: int) -> list[TraceWindow]:
    """As the trace shape cuts a trace (loadgen/trace_replay.TraceShape.windows)."""
    if steps > 1:
        return trace.windows(steps)
    if not trace.rows:
        raise ValueError("virtual sweep: the trace has no rows")
    return [TraceWindow(0, 0, len(trace.rows), 0.0, trace.duration_s)]


class _SweepRun:
    """The sweep's clock-driven part: steps begin, end and settle as tokenload's step shapes
    (``loadgen/step_machine.py``) do, users send, and the server is scraped."""

    def __init__(
        self,
        driver: VirtualDriver,
        metrics: SimMetrics,
        prompts: VirtualPrompts,
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
        #: Open loop: arrivals waiting for a free user (when meant, the trace row or None).
        self.backlog: list[tuple[float, int | None]] = []
        #: Per step, its measured requests not yet ended; each request's step if it is one.
        self.outstanding: dict[int, int] = {}
        self.measured_in: dict[str, int] = {}
        self._scraped: set[float] = set()
        self._last_end: float | None = None  # the last step's end, once it has begun

    # -- steps ---------------------------------------------------------------------------
    def begin(self, t: float, k: int) -> None:
        sch = self.schedule
        if sch.trace is not None:
            rate = sch.trace_windows[k].mean_rate_rps or 0.0  # as the trace shape offers it
        else:
            rate = None if sch.concurrency else sch.rates[k]
        w = StepWindow(
            k,
            sch.concurrency[k] if sch.concurrency else None,  # an open loop's load is its rate
            rate,
            t,
            t + sch.warmup_of(k),
            t + sch.duration_of(k),
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
        elif sch.trace is not None:
            # The window's rows at their own gaps, the first one the schedule's start: 50 ms after
            # the step's (the master announces t0 = now + 0.05, loadgen/plugin.py).
            tw, rows = sch.trace_windows[k], sch.trace.rows
            first = rows[tw.first_row].t_s
            for i in range(tw.first_row, tw.end_row):
                self.driver.at(
                    t + _SCHEDULE_DELAY_S + rows[i].t_s - first, lambda now, i=i: self.arrive(now, i)
                )
        else:  # the step's Poisson arrivals, from the schedule's start as the workers draw them
            at = t + _SCHEDULE_DELAY_S
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
    def submit(
        self, at_s: float, user: int | None, intended: float | None = None, row: int | None = None
    ) -> None:
        trace = self.schedule.trace
        if row is not None and trace is not None:
            spec = self.prompts.for_row(
                trace.rows[row], row, trace.block_size, self.driver.engine.max_model_len
            )
        else:
            spec = self.prompts.make(self.driver.engine.max_model_len)
        rid = self.driver.submit(at_s, spec, user)
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

    def arrive(self, t: float, row: int | None = None) -> None:
        if self.in_flight < self.schedule.max_in_flight:
            self.in_flight += 1
            self.submit(t, None, t, row)
        else:
            self.backlog.append((t, row))

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
                intended, row = self.backlog.pop(0)
                self.submit(now_s, None, intended, row)

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
        VirtualPrompts(workload),
        schedule,
        random.Random(workload.seed + 1),
        random.Random(f"client turnaround {workload.seed}"),  # a stream of its own
    )
    driver.at(0.0, run.start)
    driver.at(0.0, lambda _t: run.periodic_scrape(0))
    finished = driver.run(run.on_finish)
    windows = run.windows
    records = [
        client_record(
            r, run.sent_at[r.request_id], run.lag.get(r.request_id), r.request_id in run.queued, windows
        )
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
