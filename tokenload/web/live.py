"""The live view's data, kept on the master (or the local runner): time series of the client's
and the server's side in a small ring buffer, the current step, and the step table with verdicts.

Client series (one point per sample, every ``interval_s``): the cumulative histograms of
:class:`~tokenload.metrics.aggregate.LLMStats` are snapshotted each sample; a point's TTFT/TPOT
percentiles come from the bucket-count difference between now and the snapshot ``window_s`` ago
(a difference of two snapshots of a log histogram is itself a valid histogram, with the same
<= 1 % relative error), and its rates from the count differences over the same span. So every
point is "the requests counted in the last ``window_s`` seconds": a request is counted when it
finished, on a master when its worker reported it (every 3 s), which is why a master's window
is longer. Output tokens/s is the exception: it counts tokens as they arrived, in-flight streams
included (``ctx.fleet.arrived_tokens_total()``, chunks counted by each process and sent with its
reports), so a stream longer than the window shows in the rate while it runs, not all at once
when it ends. Nothing is averaged across workers or intervals.

Server series (one point per scrape tick of ``ctx.scraper``, read incrementally; with
``--prometheus-url``, one point every ``PROMETHEUS_EVERY_S`` from Prometheus' instant queries,
``tokenload.servermetrics.promql.live_queries``): gauges as
``tick_series`` combines replicas (ratios averaged, counts summed), and with several replicas the
fullest one's KV cache usage (a replica whose cache is full hides in the mean); counters per target, turned
into a rate (generation tokens/s) and an increase since the first scrape (preemptions), with a
counter restart counted from zero. A failed tick is a gap.

Steps (from ``ctx.steps``): the client's figures of each step's measured part, and for a step
that ended (and whose last reports have arrived, ``SETTLE_S``) the step of ``summary.json`` with
its verdict (``tokenload.analysis.diagnosis``), its throughputs from the run's per-step tally of
ended requests (``ctx.steps.done``), as ``summary.json`` takes them.

Cost: the sampler copies two histograms' buckets per second; the server's points are read once;
requests.jsonl is never read.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gevent

from tokenload.loadgen.greenlet_task import GreenletTask
from tokenload.report.tables import verdict_notes
from tokenload.web.run_files import run_files
from tokenload.web.series import Ring, rounded, window_histogram

if TYPE_CHECKING:
    from tokenload.web.live_source import LiveSource

__all__ = ["CLIENT_FIELDS", "SERVER_FIELDS", "LiveSeries"]

log = logging.getLogger("tokenload.web")

#: Columns of the client series (besides ``t``), in the JSON's order.
CLIENT_FIELDS = (
    "users",
    "ttft_p50",
    "ttft_p99",
    "tpot_p50",
    "tpot_p99",
    "output_tokens_per_s",
    "requests_per_s",
    "failures_per_s",
    "window_requests",
)
#: Columns of the server series (besides ``t``).
SERVER_FIELDS = (
    "ok",
    "kv_cache_usage_ratio",
    "kv_cache_usage_ratio_fullest",
    "requests_running",
    "requests_waiting",
    "preemptions_increase",
    "preemptions_per_s",
    "generation_tokens_per_s",
)
_HIST_METRICS = ("ttft_ms", "tpot_ms")
_COUNTERS = ("preemptions", "generation_tokens")
#: How often the live page asks Prometheus (--prometheus-url) for the server's figures: a few
#: instant queries; Prometheus itself holds a new sample only every scrape interval (15-60 s).
PROMETHEUS_EVERY_S = 5.0
#: A finished step's verdict is computed once its last requests have surely been reported
#: (a worker reports every 3 s; a local runner flushes its records every second).
SETTLE_S = 4.0


@dataclass(slots=True)
class _Snap:
    t: float
    stats_id: int
    ok: int
    failed: int
    arrived_tokens: int
    hists: dict[str, tuple[dict[int, int], int, int]]  # buckets, zero count, count


def _snap(stats: Any, arrived_tokens: int, t: float) -> _Snap:
    total = stats.total
    return _Snap(
        t=t,
        stats_id=id(stats),
        ok=total.ok,
        failed=sum(total.failures.values()),
        arrived_tokens=arrived_tokens,
        hists={
            m: (dict(total.hist[m].buckets), total.hist[m].zero_count, total.hist[m].count)
            for m in _HIST_METRICS
        },
    )


def _is_reset(new: _Snap, old: _Snap) -> bool:
    return (
        new.stats_id != old.stats_id
        or new.ok < old.ok
        or new.failed < old.failed
        or any(new.hists[m][2] < old.hists[m][2] for m in _HIST_METRICS)
    )


class LiveSeries(GreenletTask):
    """Samples a run (:class:`LiveSource`: the run's context) every ``interval_s`` seconds."""

    def __init__(
        self,
        ctx: LiveSource,
        *,
        interval_s: float = 1.0,
        window_s: float | None = None,
        capacity: int = 7200,
    ) -> None:
        self.ctx = ctx
        self.interval_s = interval_s
        self.window_s = window_s if window_s is not None else (10.0 if self._distributed() else 5.0)
        self.series_id = secrets.token_hex(6)
        self.client = Ring(CLIENT_FIELDS, capacity)
        self.server = Ring(SERVER_FIELDS, capacity)
        self._snaps: list[_Snap] = []
        self._last_scrape_t = -math.inf  # the newest scrape point read
        self._last_prometheus_t = -math.inf  # when Prometheus was last asked
        self._counter_last: dict[tuple[str, str], float] = {}
        self._counter_anchor: dict[tuple[str, str], tuple[float, float]] = {}
        self._counter_increase: dict[tuple[str, str], float] = {}
        self._counter_rate: dict[tuple[str, str], float] = {}
        self._was_active = False
        self._greenlet: gevent.Greenlet | None = None
        self._warned = False
        self._verdict_key: tuple[Any, ...] | None = None
        self._verdict_steps: dict[int, dict[str, Any]] = {}
        self._verdict_error: str | None = None
        self._prometheus_job: gevent.Greenlet | None = None

    # -- the sampling greenlet ----------------------------------------------------------------
    def _run(self) -> None:
        while not self.ctx.finished:
            gevent.sleep(self.interval_s)
            try:
                self.tick(time.time())
            except Exception:  # the charts must never take the run down
                if not self._warned:
                    self._warned = True
                    log.exception("tokenload: the live charts' sampler failed (warned once)")

    def _runner(self) -> Any:
        return getattr(self.ctx.environment, "runner", None)

    def _distributed(self) -> bool:
        from locust.runners import MasterRunner

        return isinstance(self._runner(), MasterRunner)

    def _active(self) -> bool:
        state = getattr(self._runner(), "state", None)
        return state in ("spawning", "running", "stopping", "cleanup")

    def tick(self, now: float) -> None:
        """One sample: the client's side while a test runs (and once after), the server's always."""
        active = self._active()
        if active or self._was_active:
            self.sample_client(now)
        self._was_active = active
        self.sample_server(now)

    # -- the client's side ---------------------------------------------------------------------
    def sample_client(self, now: float) -> None:
        stats = self.ctx.stats
        snap = _snap(stats, self.ctx.fleet.arrived_tokens_total(), now)
        snaps = self._snaps
        if snaps and _is_reset(snap, snaps[-1]):
            snaps.clear()  # stats were reset (a new test, or reset_stats): start a new baseline
        snaps.append(snap)
        # Keep the newest snapshot at or before now - window_s, and everything after it.
        while len(snaps) > 2 and snaps[1].t <= now - self.window_s:
            snaps.pop(0)
        if len(snaps) < 2:
            return
        old = snaps[0]
        span = max(now - old.t, 1e-9)
        rel = stats.total.hist[_HIST_METRICS[0]].relative_error
        row: dict[str, Any] = {"t": round(now, 3)}
        runner = self._runner()
        row["users"] = getattr(runner, "user_count", None)
        for m, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot")):
            h = window_histogram(snap.hists[m], old.hists[m], rel)
            row[f"{key}_p50"] = rounded(h.quantile(0.5))
            row[f"{key}_p99"] = rounded(h.quantile(0.99))
        row["output_tokens_per_s"] = rounded(max(0, snap.arrived_tokens - old.arrived_tokens) / span)
        row["requests_per_s"] = rounded((snap.ok - old.ok) / span, 3)
        row["failures_per_s"] = rounded((snap.failed - old.failed) / span, 3)
        row["window_requests"] = snap.ok - old.ok
        self.client.append(row)

    # -- the server's side ---------------------------------------------------------------------
    def sample_server(self, now: float | None = None) -> None:
        scraper = self.ctx.scraper
        if scraper is None:
            self._sample_prometheus(time.time() if now is None else now)
            return
        points = scraper.points
        new = []
        for p in reversed(points):  # points arrive in time order; read only the new ones
            if p.t <= self._last_scrape_t:
                break
            new.append(p)
        if not new:
            return
        new.reverse()
        self._last_scrape_t = max(p.t for p in new)
        ticks: dict[float, dict[str, Any]] = {}
        for p in new:  # one tick: the targets scraped together (the later of two scrapes of one target)
            ticks.setdefault(round(p.t, 1), {})[p.target] = p
        for t, by_target in ticks.items():
            self.server.append(self._server_row(t, list(by_target.values()), scraper.interval_s))

    def _sample_prometheus(self, now: float) -> None:
        """Ask Prometheus in a greenlet of its own (one at a time), so that a slow one delays
        only the server's points, never the client's."""
        prometheus = self.ctx.prometheus
        if prometheus is None or now - self._last_prometheus_t < PROMETHEUS_EVERY_S:
            return
        if self._prometheus_job is not None and not self._prometheus_job.dead:
            return
        self._last_prometheus_t = now

        def ask() -> None:
            row = prometheus.live(now, self.ctx.start_time or now)
            row["t"] = round(now, 3)
            for key, value in row.items():
                if isinstance(value, float):
                    row[key] = rounded(value, 4)
            self.server.append(row)

        self._prometheus_job = gevent.spawn(ask)

    def _server_row(self, t: float, points: list[Any], interval_s: float) -> dict[str, Any]:
        oks = [p for p in points if p.ok]
        row: dict[str, Any] = {"t": t, "ok": bool(oks)}
        if not oks:
            return row
        kv = [p.scalars["kv_cache_usage_ratio"] for p in oks if "kv_cache_usage_ratio" in p.scalars]
        row["kv_cache_usage_ratio"] = rounded(sum(kv) / len(kv), 4) if kv else None
        # Several replicas: the fullest one's, which the mean hides (None for one server).
        row["kv_cache_usage_ratio_fullest"] = rounded(max(kv), 4) if len(kv) >= 2 else None
        for q in ("requests_running", "requests_waiting"):
            vals = [p.scalars[q] for p in oks if q in p.scalars]
            row[q] = rounded(sum(vals), 2) if vals else None
        rates: dict[str, list[float]] = {q: [] for q in _COUNTERS}
        for p in oks:
            for q in _COUNTERS:
                if q not in p.scalars:
                    continue
                key, v = (p.target, q), p.scalars[q]
                last = self._counter_last.get(key)
                if last is not None:
                    inc = v - last if v >= last else v  # a restart counts again from zero
                    self._counter_increase[key] = self._counter_increase.get(key, 0.0) + inc
                else:
                    self._counter_increase.setdefault(key, 0.0)
                self._counter_last[key] = v
                anchor = self._counter_anchor.get(key)
                if anchor is None:
                    self._counter_anchor[key] = (p.t, v)
                elif p.t - anchor[0] >= 0.5 * interval_s:  # not across two scrapes a moment apart
                    rate = (v - anchor[1] if v >= anchor[1] else v) / (p.t - anchor[0])
                    self._counter_rate[key] = rate
                    rates[q].append(rate)
                    self._counter_anchor[key] = (p.t, v)
                elif key in self._counter_rate:  # an extra scrape (a step's end): the last rate holds
                    rates[q].append(self._counter_rate[key])
        targets = {p.target for p in oks}
        incs = [v for (tg, q), v in self._counter_increase.items() if q == "preemptions" and tg in targets]
        row["preemptions_increase"] = rounded(sum(incs), 1) if incs else None
        row["preemptions_per_s"] = rounded(sum(rates["preemptions"]), 3) if rates["preemptions"] else None
        gen = rates["generation_tokens"]
        row["generation_tokens_per_s"] = rounded(sum(gen)) if gen else None
        return row

    # -- steps -----------------------------------------------------------------------------------
    def status(self, now: float) -> dict[str, Any]:
        ctx = self.ctx
        runner = self._runner()
        tracker = ctx.steps
        total = ctx.stats.total
        planned = list(ctx.plan.planned)
        current = tracker.windows[-1] if tracker.windows else None
        step: dict[str, Any] | None = None
        if current is not None or planned:
            index = users = since = rate = None
            if tracker.step is not None and current is not None and current.index == tracker.step:
                phase = tracker.phase  # "warmup" | "measure"
                since = current.measure_start if phase == "measure" else current.start
                index, users, rate = current.index, current.concurrency, current.target_rate_rps
            else:  # between steps: ramping to the next one, or all done (draining)
                done = len([w for w in tracker.windows if w.end is not None])
                if planned and done >= len(planned):
                    phase = "done"
                elif self._active():
                    phase = "ramp"
                    if done < len(planned):
                        index, users = planned[done].index, planned[done].concurrency
                        rate = planned[done].rate_rps
                    since = current.end if current is not None else None
                else:
                    phase = None
            plan = next((s for s in planned if s.index == index), None)
            step = {
                "index": index,
                "of": len(planned) or None,
                "users": users,
                "rate_rps": rate,
                "phase": phase,
                "phase_elapsed_s": rounded(now - since, 1) if since else None,
                "duration_s": plan.duration_s if plan is not None else None,
                "warmup_s": plan.warmup_s if plan is not None else None,
            }
        scraper = ctx.scraper
        prometheus = ctx.prometheus
        if scraper is not None:
            server_metrics: dict[str, Any] | None = {
                "targets": [t.url for t in scraper.targets],
                "failures": scraper.failures,
            }
        elif prometheus is not None:
            # The page counts failures per target and reason: Prometheus is the one target.
            failures = dict(prometheus.failures)
            for reason, n in prometheus.live_failures.items():
                failures[f"live {reason}"] = n
            server_metrics = {
                "targets": [f"Prometheus {prometheus.url}"],
                "failures": {prometheus.url: failures},
            }
        else:
            server_metrics = None
        return {
            "state": getattr(runner, "state", None),
            "users": getattr(runner, "user_count", None),
            "workers": getattr(runner, "worker_count", None) if self._distributed() else None,
            "host": getattr(ctx.environment, "host", None),
            "model": ctx.model,
            "start_time": ctx.start_time,
            "elapsed_s": rounded(ctx.elapsed_s(), 1) if ctx.start_time else None,
            "requests_ok": total.ok,
            "requests_failed": sum(total.failures.values()),
            "failures_by_class": dict(total.failures),
            "output_tokens": total.output_tokens,
            "server_metrics": server_metrics,
            "step": step,
            # The run directory's results for download (/tokenload/files/NAME), as of the last stop.
            "files": run_files(ctx.run_dir),
            "results_written_at": ctx.results_written_at,
        }

    def steps(self, now: float) -> list[dict[str, Any]]:
        """Every step so far: its window, the client's figures of its measured part, and the
        verdict of ``tokenload.analysis.diagnosis`` once the step has finished and settled."""
        return self.steps_and_settled(now)[0]

    def steps_and_settled(self, now: float) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
        """:meth:`steps`, and the steps that ended and settled, by index, as in ``summary.json``
        (with verdicts): both from one look at the verdicts' cache."""
        tracker = self.ctx.steps
        verdicts = self._verdicts(now)
        out = []
        for w in tracker.windows:
            s = tracker.stats.get(w.index)
            ns = s.total if s is not None else None
            state = "done" if w.end is not None else ("measure" if w.measure_start is not None else "warmup")
            row: dict[str, Any] = {
                "index": w.index,
                "concurrency": w.concurrency,
                "target_rate_rps": w.target_rate_rps,
                "start": w.start,
                "measure_start": w.measure_start,
                "end": w.end,
                "state": state,
                "ok": ns.ok if ns else 0,
                "failed": sum(ns.failures.values()) if ns else 0,
            }
            for m, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot")):
                h = ns.hist[m] if ns else None
                row[f"{key}_p50"] = rounded(h.quantile(0.5)) if h else None
                row[f"{key}_p99"] = rounded(h.quantile(0.99)) if h else None
            done = verdicts.get(w.index)
            if done is not None:
                server = done.get("server") or {}
                row["output_tokens_per_s"] = rounded(done.get("output_tokens_per_s"))
                row["kv_cache_usage_mean"] = rounded(
                    ((server.get("kv_cache_usage_ratio") or {}).get("mean")), 4
                )
                row["preemptions"] = (server.get("preemptions") or {}).get("increase")
                row["flags"] = done.get("flags") or []
                row["verdict"] = done.get("verdict")
                row["verdict_notes"] = verdict_notes(row["flags"], row["verdict"])
            else:
                row["verdict"] = None
            row["verdict_pending"] = state == "done" and done is None
            out.append(row)
        return out, verdicts

    @property
    def verdict_error(self) -> str | None:
        """Why the last attempt to judge the settled steps failed; None when it did not."""
        return self._verdict_error

    def _verdicts(self, now: float) -> dict[int, dict[str, Any]]:
        """The settled steps as in ``summary.json`` (with their verdicts), recomputed only when
        something they depend on changed (their throughputs: ``ctx.steps.done``, tallied as the records
        arrive)."""
        tracker = self.ctx.steps
        settled = [w for w in tracker.windows if w.end is not None and now - w.end >= SETTLE_S]
        if not settled:
            return self._verdict_steps
        key = tuple(
            (
                w.index,
                tuple(sorted(tracker.done.get(w.index, {}).items())),
                s.total.requests if (s := tracker.stats.get(w.index)) is not None else 0,
            )
            for w in settled
        )
        if key == self._verdict_key:
            return self._verdict_steps
        self._verdict_key = key
        try:
            from tokenload.analysis.judge import judge_steps
            from tokenload.results.summary import step_summaries

            sources = self.ctx.step_sources()
            done = {w.index for w in settled}
            steps = [s for s in step_summaries(sources) if s["index"] in done]
            judge_steps(steps, peaks=sources.gpu_peaks, max_num_seqs=sources.max_num_seqs)
            self._verdict_steps = {s["index"]: s for s in steps}
            self._verdict_error = None
        except Exception as exc:  # the step table still shows without verdicts
            self._verdict_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("tokenload: live verdicts unavailable: %s", self._verdict_error)
        return self._verdict_steps

    # -- the JSON ----------------------------------------------------------------------------------
    def to_json(
        self, client_since: float | None = None, server_since: float | None = None, now: float | None = None
    ) -> dict[str, Any]:
        now = time.time() if now is None else now
        steps = self.steps(now)
        return {
            "version": 1,
            "series_id": self.series_id,
            "now": round(now, 3),
            "interval_s": self.interval_s,
            "window_s": self.window_s,
            "client": self.client.since(client_since),
            "server": self.server.since(server_since) if self.ctx.scraper or self.ctx.prometheus else None,
            "status": self.status(now),
            "steps": steps,
            "verdict_error": self._verdict_error,
        }
