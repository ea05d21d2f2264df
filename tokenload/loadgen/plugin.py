"""The one place where tokenload hooks into Locust's events.

* every finished LLM request fires one Locust ``request`` event (response_time = E2E ms,
  response_length = output tokens); this module's ``request`` listener folds the record carried
  in its ``context`` into :class:`LLMStats` and the record queue;
* workers ship stats and records in ``report_to_master`` and clear them; the master merges them
  in ``worker_report`` and appends the records to ``requests.jsonl`` at once;
* at the end the master (or local runner) writes ``llm_stats.json``, prints the LLM table, and
  adds it to Locust's ``--csv`` and ``--html`` outputs.
"""

from __future__ import annotations

import locust
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

import gc
import json
import logging
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import gevent

from tokenload.loadgen import exporter
from tokenload.loadgen.gate import Gate
from tokenload.loadgen.health import HealthMonitor
from tokenload.loadgen.option_table import option_value
from tokenload.loadgen.options import RunConfig, add_arguments, run_config
from tokenload.loadgen.pacing import Pacer
from tokenload.loadgen.phases import PHASE_MESSAGE, StepTracker
from tokenload.loadgen.steps import Step
from tokenload.loadgen.workers import watch as watch_processes
from tokenload.metrics.aggregate import LLMStats, itl_histogram
from tokenload.metrics.definitions import FORMULAS
from tokenload.metrics.table import format_text, stats_rows, to_csv
from tokenload.results.records_file import RecordsFile
from tokenload.results.rundir import make_run_dir
from tokenload.results.summary import build_summary, steps_csv
from tokenload.servermetrics.prometheus_source import PrometheusSource
from tokenload.servermetrics.scraper import Scraper
from tokenload.servermetrics.summary import summarize_window

__all__ = ["RunContext", "context_of", "install"]

log = logging.getLogger("tokenload")

#: Locals flush records to disk at this interval (workers ride Locust's report interval).
_FLUSH_INTERVAL_S = 1.0
#: Master -> worker: send your report now.
FLUSH_MESSAGE = "tokenload_report_now"


def _live_workers(runner: MasterRunner) -> list[str]:
    clients = runner.clients
    return sorted(c.id for c in clients.ready + clients.spawning + clients.running)


class RunContext:
    """tokenload's per-environment state. Reached through :func:`context_of`, never a global."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.stats = LLMStats()
        self.pending: list[dict[str, Any]] = []
        self.model: str | None = None
        self.start_time: float | None = None
        self.end_time: float | None = None
        self.run_dir: Path | None = None
        self.records: RecordsFile | None = None
        self.seq = 0
        self._finished = False
        self.scraper: Scraper | None = None
        #: With --prometheus-url: the server's figures come from Prometheus, nothing is scraped.
        self.prometheus: PrometheusSource | None = None
        self.steps = StepTracker()
        self.planned_steps: list[Step] = []
        #: Open loop: hands users their arrivals (every process); the current rate step's
        #: schedule as announced (master or local runner), None in closed-loop steps.
        self.pacer = Pacer()
        self.pacer.trace_times = self._trace_times
        #: The trace's own statistics (a trace step; workload/trace.py), for summary.json.
        self.trace_summary: dict[str, Any] | None = None
        #: --drain: closed between steps, so no user starts a request (every process).
        self.gate = Gate()
        self.rate_schedule: dict[str, Any] | None = None
        self.announced_workers: list[str] = []
        #: Workload options of the coming or current step (its prompt length), on every process.
        self.step_overrides: dict[str, str] = {}
        #: Workers asked for an immediate report (see request_reports) that have not sent it.
        self.awaiting_reports: set[str] = set()
        #: What a shape found beyond its steps (the knee search's probes), for summary.json.
        self.shape_result: dict[str, Any] | None = None
        self.health: HealthMonitor | None = None
        #: Requests sent and not yet complete in this process (tokenload's /metrics).
        self.in_flight = 0
        #: Of those, the ones started in a step's measured part, by step (this process).
        self.measured_in_flight: dict[int, int] = {}
        #: On the master: each worker's measured_in_flight and in_flight as of its latest report.
        self.worker_measured_in_flight: dict[str, dict[int, int]] = {}
        self.worker_in_flight: dict[str, int] = {}
        self.workers_seen: set[str] = set()
        #: Workers lost mid-run, filled on the master by loadgen/workers.py.
        self.workers_lost: list[dict[str, Any]] = []
        #: Per-process objects other modules build once (the workload planner).
        self.extras: dict[Any, Any] = {}

    def _trace_times(self) -> list[float]:
        from tokenload.loadgen.trace_replay import trace_of

        return trace_of(self).times()

    @property
    def config(self) -> RunConfig:
        """Read at use: a worker's custom options arrive from the master with each spawn message."""
        return run_config(self.environment.parsed_options)

    @property
    def is_worker(self) -> bool:
        return isinstance(self.environment.runner, WorkerRunner)

    @property
    def worker_name(self) -> str:
        runner = self.environment.runner
        if isinstance(runner, WorkerRunner):
            return f"w{runner.worker_index}" if runner.worker_index >= 0 else runner.client_id
        return "local"

    def next_request_id(self) -> str:
        self.seq += 1
        return f"{self.worker_name}-{self.seq}"

    def record_cancelled(self, name: str, state: Any) -> None:
        """A request the load generator itself abandoned (users stopped mid-stream)."""
        self.pending.append(
            {
                "request_id": self.next_request_id(),
                "worker": self.worker_name,
                "name": name,
                "wall_start": time.time(),
                "status": "cancelled",
                "failure_class": None,
                "output_tokens": state.output_tokens,
                "content_chunks": len(state.content_times),
            }
        )
        self.stats.cancelled += 1

    # -- steps (decided by a shape on the master or local runner) ---------------------------
    def _announce(self) -> None:
        runner = self.environment.runner
        msg = {
            "step": self.steps.step,
            "phase": self.steps.phase,
            "rate": None,
            "overrides": self.step_overrides,
            "hold": self.gate.closed,
            "hold_spread_s": self.gate.spread_s,
        }
        rate = self.rate_schedule
        if rate is not None:
            # How long the schedule has run on this (the master's) clock when it is sent: a worker
            # anchors it to its own clock on receipt, so a worker whose wall clock is skewed from
            # the master's does not start the step with its arrivals overdue (or idle).
            rate = {**rate, "age_s": time.time() - rate["t0"]}
        if not isinstance(runner, MasterRunner):
            self.pacer.apply(None if rate is None else {**rate, "slot": 0, "of": 1}, self.steps.step)
        elif rate is None:
            runner.send_message(PHASE_MESSAGE, msg)
        else:
            # Each worker walks its own share of the one global arrival schedule.
            ids = _live_workers(runner)
            self.announced_workers = ids
            for slot, client_id in enumerate(ids):
                runner.send_message(
                    PHASE_MESSAGE,
                    {**msg, "rate": {**rate, "slot": slot, "of": len(ids)}},
                    client_id=client_id,
                )

    def reannounce_if_workers_changed(self) -> None:
        """In a rate step: a worker lost or joined re-splits the schedule over the live ones."""
        runner = self.environment.runner
        if (
            self.rate_schedule is not None
            and isinstance(runner, MasterRunner)
            and _live_workers(runner) != self.announced_workers
        ):
            log.warning("tokenload: the workers changed mid-step: the arrival schedule is re-split")
            self._announce()

    def unfinished(self, step: int) -> int:
        """Requests started in ``step``'s measured part not yet ended: this process's, plus each
        live worker's as of its latest report (a lost worker's are never coming)."""
        n = self.measured_in_flight.get(step, 0)
        runner = self.environment.runner
        if isinstance(runner, MasterRunner):
            live = set(_live_workers(runner))
            n += sum(c.get(step, 0) for w, c in self.worker_measured_in_flight.items() if w in live)
        return n

    def in_flight_total(self) -> int:
        """Requests sent and not yet ended anywhere: this process's, plus each live worker's as
        of its latest report."""
        n = self.in_flight
        runner = self.environment.runner
        if isinstance(runner, MasterRunner):
            live = set(_live_workers(runner))
            n += sum(c for w, c in self.worker_in_flight.items() if w in live)
        return n

    def request_reports(self) -> None:
        """Ask every worker for its report now (not at its next 3 s tick): a step's figures are
        complete moments after it ends. :attr:`awaiting_reports` empties as they arrive."""
        runner = self.environment.runner
        if isinstance(runner, MasterRunner):
            ids = _live_workers(runner)
            self.awaiting_reports = set(ids)
            for client_id in ids:
                runner.send_message(FLUSH_MESSAGE, None, client_id=client_id)

    def prepare_step(self, step: Step) -> None:
        """Before a step's users ramp: announce the workload options it sets, if they change."""
        if step.overrides() != self.step_overrides:
            self.step_overrides = step.overrides()
            self._announce()

    def begin_step(self, step: Step, now: float) -> None:
        if self.gate.closed:  # --drain: the step's clock starts, its users send (gate.py)
            self.gate.set_closed(False, spread_s=step.warmup_s / 2 if step.rate_rps is None else 0.0)
        # A rate step's users are only the pool that sends its arrivals: its load is the rate.
        conc = step.concurrency if step.rate_rps is None else None
        self.steps.begin(step.index, conc, step.rate_rps, now, step.overrides())
        if step.rate_rps is not None:
            opts = self.environment.parsed_options
            from tokenload.loadgen.arrivals import parse_arrival

            spec = parse_arrival(option_value(opts, "arrival")) if step.arrival is None else None
            self.rate_schedule = {
                "rps": step.rate_rps,
                "arrival": spec.kind if spec is not None else step.arrival,
                "burstiness": spec.burstiness if spec is not None else 1.0,
                "seed": int(option_value(opts, "arrival_seed")) * 1_000_003 + step.index,
                # A little ahead, so every worker has the schedule before its first arrival.
                "t0": now + 0.05,
            }
            log.info(
                "tokenload: step %d: %g requests/s (%s), %d users, warming up %.0f s",
                step.index,
                step.rate_rps,
                spec if spec is not None else step.arrival,
                step.concurrency,
                step.warmup_s,
            )
        else:
            self.rate_schedule = None
            log.info(
                "tokenload: step %d: %d users reached, warming up %.0f s",
                step.index,
                step.concurrency,
                step.warmup_s,
            )
        self._announce()

    def measure_step(self, step: Step, now: float) -> None:
        if self.steps.measure(step.index, now):
            self._announce()

    # -- a run without a load shape (plain ``locust -u N -t T``, or the web UI) -------------
    def implicit_step(self, users: int, now: float) -> None:
        """Each user count a shapeless run settles at is a step: its ramp is the warm-up, the
        time until the count changes (or the test stops) is measured. So a plain Locust run gets
        summary.json, verdicts and reports as a shaped one does."""
        windows = self.steps.windows
        if self.steps.step is not None:
            self.steps.end(self.steps.step, now)
        # The ramp (from the test's start, or the last count's end) is the step's warm-up.
        start = windows[-1].end if windows and windows[-1].end else (self.start_time or now)
        index = len(windows)
        self.steps.begin(index, users, None, start)
        self.steps.measure(index, now)
        log.info("tokenload: step %d: %d users (no load shape: each user count is a step)", index, users)
        self._announce()

    def end_implicit_step(self, now: float) -> None:
        if self.steps.step is not None:
            self.steps.end(self.steps.step, now)
            self._announce()

    def end_step(self, step: Step, now: float, drain: bool = False) -> None:
        """The step has ended; with ``drain`` (--drain) no user starts a request until the next
        step's clock starts."""
        self.steps.end(step.index, now)
        self.rate_schedule = None
        if drain:
            self.gate.set_closed(True)
        self._announce()
        if self.scraper is not None:
            self.scraper.scrape_once()  # the server's state at the step's end, inside its window
        s = self.steps.stats.get(step.index)
        h = s.total.hist if s else None
        ttft = h["ttft_ms"].quantile(0.5) if h else None
        tpot = h["tpot_ms"].quantile(0.5) if h else None
        load = f"{step.rate_rps:g} req/s" if step.rate_rps is not None else f"{step.concurrency} users"
        print(
            f"step {step.index}: {load}, {s.total.requests if s else 0} requests measured"
            f" so far, TTFT p50 {_fmt_ms(ttft)}, TPOT p50 {_fmt_ms(tpot)}",
            flush=True,
        )

    def elapsed_s(self) -> float | None:
        if self.start_time is None:
            return None
        return (self.end_time or time.time()) - self.start_time

    def open_run_dir(self) -> None:
        if self.run_dir is None:
            self.run_dir = make_run_dir(self.config.run_dir or None)
            self.records = RecordsFile(self.run_dir)
            (self.run_dir / "run.json").write_text(
                json.dumps({"config": self.config.public_dict(), "host": self.environment.host}, indent=2)
            )

    def start_scraper(self) -> None:
        cfg = self.config
        if self.scraper or self.prometheus or not cfg.server_metrics or self.is_worker:
            return
        if cfg.prometheus_url:
            if cfg.metrics_urls:
                log.warning("tokenload: --prometheus-url is set: --metrics-url is not scraped")
            self.prometheus = PrometheusSource(
                cfg.prometheus_url, cfg.prometheus_selector, resolution_s=cfg.metrics_interval_s
            )
            self.prometheus.start()
            return
        urls = list(cfg.metrics_urls)
        if not urls and self.environment.host:
            urls = [self.environment.host.rstrip("/") + "/metrics"]
        if not urls:
            return
        self.open_run_dir()
        assert self.run_dir is not None
        self.scraper = Scraper(
            urls, interval_s=cfg.metrics_interval_s, out_file=self.run_dir / "server_metrics.jsonl"
        )
        self.scraper.start()

    def stop_scraper(self) -> None:
        if self.scraper is not None and self.scraper.running:
            self.scraper.scrape_once()  # the state at the end of the load, inside the window
            self.scraper.stop()

    def server_window(self, t0: float, t1: float) -> dict[str, Any] | None:
        """The server's figures over ``[t0, t1]``: from the scraped points, or from Prometheus."""
        if self.prometheus is not None:
            return self.prometheus.window(t0, t1)
        if self.scraper is None or not self.scraper.points:
            return None
        return summarize_window(self.scraper.points, t0, t1)

    def server_summary(self) -> dict[str, Any] | None:
        if self.prometheus is not None and self.start_time is not None:
            return self.prometheus.summary(self.start_time, self.end_time or time.time())
        if self.scraper is None or self.start_time is None:
            return None
        end = self.end_time or time.time()
        summary = summarize_window(
            self.scraper.points, self.start_time - self.config.metrics_interval_s, end + 1.0
        )
        summary["scrape_failures"] = self.scraper.failures
        return summary

    def flush(self) -> None:
        if self.records is not None and self.pending:
            batch, self.pending = self.pending, []
            self.records.write(batch)

    def rows(self) -> list[dict[str, Any]]:
        return stats_rows(self.stats, self.elapsed_s())

    def _write_reports(self) -> None:
        """report.md, report.html and the parquet files, as tokenload sweep writes them: every
        run (plain Locust, a fleet's headless master) gets them. A report that cannot be written
        loses nothing measured: the run directory keeps summary.json and the records."""
        from tokenload.report.rundir import ReportError
        from tokenload.report.writer import write_reports

        assert self.run_dir is not None
        try:
            write_reports(self.run_dir)
        except (ReportError, OSError, ValueError) as exc:
            log.warning("tokenload: the report could not be written: %s", exc)

    def finish(self) -> None:
        """Master/local end of run: flush, then write the summaries. Idempotent."""
        if self._finished or self.is_worker:
            return
        self._finished = True
        self.end_time = self.end_time or time.time()
        self.open_run_dir()
        self.flush()
        self.stop_scraper()
        assert self.run_dir is not None
        rows = self.rows()
        if self.steps.windows:
            run_summary = build_summary(self, rows)
            (self.run_dir / "summary.json").write_text(json.dumps(run_summary, indent=2))
            (self.run_dir / "steps.csv").write_text(steps_csv(run_summary))
        summary = {
            "server": self.server_summary(),
            "rows": rows,
            "stats": self.stats.to_dict(),
            "formulas": FORMULAS,
            "records_written": self.records.written if self.records else 0,
            "workers_lost": self.workers_lost,
            "start_time": self.start_time,
            "end_time": self.end_time,
        }
        (self.run_dir / "llm_stats.json").write_text(json.dumps(summary, indent=2))
        if self.records is not None:
            self.records.close()
        if self.steps.windows:
            self._write_reports()
        opts = self.environment.parsed_options
        if not self.stats.empty:
            print("\nLLM metrics (" + FORMULAS["tpot_ms"] + ")", flush=True)
            print(format_text(rows), flush=True)
            print(f"Run directory: {self.run_dir}", flush=True)
        csv_prefix = getattr(opts, "csv_prefix", None)
        if csv_prefix:
            Path(f"{csv_prefix}_llm_stats.csv").write_text(to_csv(rows))
        html_file = getattr(opts, "html_file", None)
        if html_file and Path(html_file).exists():
            from tokenload.loadgen.webui import inject_html_table

            inject_html_table(Path(html_file), rows)


_contexts: weakref.WeakKeyDictionary[Environment, RunContext] = weakref.WeakKeyDictionary()


def context_of(environment: Environment) -> RunContext:
    ctx = _contexts.get(environment)
    if ctx is None:
        ctx = _contexts[environment] = RunContext(environment)
    return ctx


def _on_init(environment: Environment, **_kw: Any) -> None:
    ctx = context_of(environment)
    runner = environment.runner
    if not isinstance(runner, WorkerRunner):
        # Config is validated up front: a bad workload file ends the run before any load.
        from tokenload.loadgen.workload import load_spec
        from tokenload.workload.errors import WorkloadError

        try:
            load_spec(ctx.config)
        except WorkloadError as exc:
            sys.exit(f"tokenload: {exc}")
    # Every process samples its own health; the master only for its /metrics, not per step.
    ctx.health = HealthMonitor(
        lambda: (ctx.steps.step, ctx.steps.phase), per_step=not isinstance(runner, MasterRunner)
    )
    ctx.health.start()
    if ctx.health.cpu_limit.cores < 1.0:
        log.info("tokenload: CPU %% is measured against %s", ctx.health.cpu_limit.source)
    if isinstance(runner, WorkerRunner):

        def on_phase(msg: Any, **_: Any) -> None:
            ctx.steps.apply(msg.data["step"], msg.data["phase"])
            ctx.step_overrides = msg.data.get("overrides") or {}
            ctx.pacer.apply(msg.data.get("rate"), msg.data["step"])
            ctx.gate.set_closed(bool(msg.data.get("hold")), float(msg.data.get("hold_spread_s") or 0.0))

        runner.register_message(PHASE_MESSAGE, on_phase)
        # Locust's worker report, sent now rather than at its next tick (see request_reports).
        runner.register_message(FLUSH_MESSAGE, lambda msg, **_: gevent.spawn(runner._send_stats))
    else:
        ctx.open_run_dir()
        if not isinstance(runner, MasterRunner):
            gevent.spawn(_flush_loop, ctx)
    watch_processes(environment, ctx)  # a worker lost (on the master), the master lost (on a worker)
    exporter.install(environment, ctx)  # tokenload's own /metrics (master or local runner)
    if environment.web_ui is not None:
        from tokenload.loadgen.webui import extend_web_ui

        extend_web_ui(environment, ctx)


def _flush_loop(ctx: RunContext) -> None:
    while not ctx._finished:
        gevent.sleep(_FLUSH_INTERVAL_S)
        if ctx.health is not None:
            ctx.steps.note_health(ctx.health.take())
        try:
            ctx.flush()
        except OSError as exc:  # a full disk must not stop the load; the records stay queued
            log.warning("tokenload: could not write records: %s", exc)


def _on_request(context: dict[str, Any] | None = None, **_kw: Any) -> None:
    item = context.get("tokenload") if context else None
    if item is None:
        return
    # Local runners and workers both see the request where it was made.
    environment = item[2]
    ctx = context_of(environment)
    record, itl = item[0], itl_histogram(item[1])  # binned once, merged into each histogram
    ctx.stats.record(record, itl)
    ctx.steps.record(record, itl)
    if not ctx.is_worker:
        ctx.steps.note_completion(record)
    ctx.pending.append(record)


def _on_report_to_master(client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    env = _worker_env(client_id)
    if env is None:
        return
    ctx = context_of(env)
    health = ctx.health.take() if ctx.health is not None else {}
    data["tokenload"] = {
        "stats": ctx.stats.to_dict(),
        "records": ctx.pending,
        "steps": ctx.steps.take_stats(),
        "health": health,
        "live": exporter.worker_report(ctx),
    }
    ctx.stats = LLMStats()
    ctx.pending = []


def _on_worker_report(client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    payload = data.get("tokenload")
    env = _master_env()
    if payload is None or env is None:
        return
    ctx = context_of(env)
    ctx.workers_seen.add(client_id)
    ctx.awaiting_reports.discard(client_id)
    live = payload.get("live") or {}
    ctx.worker_measured_in_flight[client_id] = {
        int(step): int(n) for step, n in live.get("measured_in_flight") or []
    }
    ctx.worker_in_flight[client_id] = int(live.get("in_flight") or 0)
    ctx.stats.merge_dict(payload["stats"])
    ctx.steps.merge_stats(payload["steps"])
    ctx.steps.note_health(payload["health"])
    exporter.note_worker(ctx, client_id, payload.get("live"))
    for record in payload["records"]:
        ctx.steps.note_completion(record)
    ctx.pending.extend(payload["records"])
    ctx.flush()


def _on_test_start(environment: Environment, **_kw: Any) -> None:
    ctx = context_of(environment)
    if ctx.start_time is None:
        ctx.start_time = time.time()
        # Everything imported and set up so far is long-lived: keep the cyclic GC's full
        # collections (milliseconds of event-loop stall, i.e. timing error) off it.
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 50, 1_000)
    ctx.end_time = None
    ctx.start_scraper()


def _shapeless(environment: Environment) -> bool:
    """A master or local run without a load shape (its steps are implicit: see implicit_step)."""
    return not isinstance(environment.runner, WorkerRunner) and environment.shape_class is None


def _on_spawning_complete(user_count: int, **_kw: Any) -> None:
    for env in list(_contexts):
        if env.runner is not None and _shapeless(env):
            context_of(env).implicit_step(int(user_count), time.time())


def _on_test_stop(environment: Environment, **_kw: Any) -> None:
    ctx = context_of(environment)
    ctx.end_time = time.time()
    if environment.runner is not None and _shapeless(environment):
        ctx.end_implicit_step(ctx.end_time)
    if ctx.scraper is not None:
        ctx.scraper.scrape_once()  # the state at the end of the load, inside the window


def _on_reset_stats(**_kw: Any) -> None:
    for ctx in list(_contexts.values()):
        ctx.stats = LLMStats()
        ctx.start_time = time.time()


def _on_quitting(environment: Environment, **_kw: Any) -> None:
    context_of(environment).finish()


# report_to_master / worker_report do not pass the environment; there is one runner per process.
def _worker_env(_client_id: str) -> Environment | None:
    for env in list(_contexts):
        if isinstance(env.runner, WorkerRunner):
            return env
    return None


def _master_env() -> Environment | None:
    for env in list(_contexts):
        if isinstance(env.runner, MasterRunner):
            return env
    return None


_installed: set[int] = set()


def install(events: Any = None) -> None:
    """Register tokenload's listeners on Locust's events (idempotent)."""
    events = events or locust.events
    if id(events) in _installed:
        return
    _installed.add(id(events))
    events.init_command_line_parser.add_listener(add_arguments)
    events.init.add_listener(_on_init)
    events.request.add_listener(_on_request)
    events.report_to_master.add_listener(_on_report_to_master)
    events.worker_report.add_listener(_on_worker_report)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
    events.spawning_complete.add_listener(_on_spawning_complete)
    events.reset_stats.add_listener(_on_reset_stats)
    events.quitting.add_listener(_on_quitting)


def _fmt_ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} ms"
