"""tokenload's state in a Locust process: :class:`RunContext`, one per environment, reached
through :func:`context_of`. The listeners that feed it are in loadgen/hooks.py, the messages
between master and workers in loadgen/transport.py, the files it writes in results/writer.py;
what it measured reaches the summaries as typed values (results/run_inputs.py).
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

import logging
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenload.loadgen import transport
from tokenload.loadgen.fleet import Fleet
from tokenload.loadgen.gate import Gate
from tokenload.loadgen.health import HealthMonitor
from tokenload.loadgen.option_table import option_value
from tokenload.loadgen.options import RunConfig, run_config
from tokenload.loadgen.pacing import Pacer
from tokenload.loadgen.phases import StepTracker
from tokenload.loadgen.step_plan import StepPlan
from tokenload.loadgen.steps import Step
from tokenload.loadgen.workload import fit_counts
from tokenload.metrics.aggregate import LLMStats
from tokenload.metrics.definitions import FORMULAS
from tokenload.metrics.table import format_text, stats_rows
from tokenload.results.records_file import RecordsFile
from tokenload.results.run_inputs import RunFacts, StepSources
from tokenload.results.summary import build_summary
from tokenload.results.writer import RunWriter
from tokenload.servermetrics.discovery import parse_spec
from tokenload.servermetrics.prometheus_source import PrometheusSource
from tokenload.servermetrics.scraper import Scraper
from tokenload.servermetrics.summary import summarize_window
from tokenload.workload.plan import merge_fit

if TYPE_CHECKING:
    from tokenload.loadgen.exporter import Exporter
    from tokenload.workload.plan import RequestPlanner
    from tokenload.workload.trace import Trace
    from tokenload.workload.trace_prompts import TracePrompts

__all__ = ["ProcessCache", "RunContext", "context_of", "environments"]

log = logging.getLogger("tokenload")


class ProcessCache:
    """What other modules build once per process and keep on the run's context, each in its own
    typed slot (built on first use by the module named)."""

    def __init__(self) -> None:
        #: loadgen/workload.py: the request planner by (chat, a step's own prompt length spec).
        self.planners: dict[tuple[bool, str | None], RequestPlanner] = {}
        #: loadgen/exporter.py: tokenload's own /metrics (master or local runner only).
        self.exporter: Exporter | None = None
        #: loadgen/trace_replay.py: whether the run replays a trace, the trace, its request
        #: builders (by chat).
        self.replays_trace: bool | None = None
        self.trace: Trace | None = None
        self.trace_prompts: dict[bool, TracePrompts] = {}
        #: loadgen/user.py: the warnings already given (model discovery), by their text.
        self.warned: set[str] = set()


class RunContext:
    """tokenload's per-environment state. Reached through :func:`context_of`, never a global."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.stats = LLMStats()
        self.pending: list[dict[str, Any]] = []
        self.model: str | None = None
        self.start_time: float | None = None
        self.end_time: float | None = None
        #: The run directory's files (master or local runner; results/writer.py).
        self.writer: RunWriter | None = None
        self.seq = 0
        self.finished = False
        #: When write_snapshot last wrote the results (the web UI, after a test stopped).
        self.results_written_at: float | None = None
        self.scraper: Scraper | None = None
        #: With --prometheus-url: the server's figures come from Prometheus, nothing is scraped.
        self.prometheus: PrometheusSource | None = None
        self.steps = StepTracker()
        #: Open loop: hands users their arrivals (every process).
        self.pacer = Pacer()
        self.pacer.trace_times = self._trace_times
        #: --drain: closed between steps, so no user starts a request (every process).
        self.gate = Gate()
        #: What the shape decided: its steps, the current step's workload options and arrival
        #: schedule, what it found beyond its steps (loadgen/step_plan.py).
        self.plan = StepPlan()
        self.health: HealthMonitor | None = None
        #: Requests in flight here and on each worker, the workers seen, lost and awaited.
        self.fleet = Fleet()
        #: Per-process objects other modules build once (the workload planner, the trace).
        self.cache = ProcessCache()

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
        transport.announce(self)

    def reannounce_if_workers_changed(self) -> None:
        """In a rate step: a worker lost or joined re-splits the schedule over the live ones."""
        runner = self.environment.runner
        if (
            self.plan.rate_schedule is not None
            and isinstance(runner, MasterRunner)
            and transport.live_workers(runner) != self.fleet.announced_workers
        ):
            log.warning("tokenload: the workers changed mid-step: the arrival schedule is re-split")
            self._announce()

    def unfinished(self, step: int) -> int:
        """Requests started in ``step``'s measured part not yet ended: this process's, plus each
        live worker's as of its latest report (a lost worker's are never coming)."""
        return self.fleet.unfinished(step, self._live_workers())

    def in_flight_total(self) -> int:
        """Requests sent and not yet ended anywhere: this process's, plus each live worker's as
        of its latest report."""
        return self.fleet.in_flight_total(self._live_workers())

    def _live_workers(self) -> set[str]:
        runner = self.environment.runner
        return set(transport.live_workers(runner)) if isinstance(runner, MasterRunner) else set()

    def request_reports(self) -> None:
        """Ask every worker for its report now (not at its next 3 s tick): a step's figures are
        complete moments after it ends. ``fleet.awaiting_reports`` empties as they arrive."""
        transport.request_reports(self)

    def prepare_step(self, step: Step) -> None:
        """Before a step's users ramp: announce the workload options it sets, if they change."""
        if step.overrides() != self.plan.overrides:
            self.plan.overrides = step.overrides()
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
            self.plan.rate_schedule = {
                "rps": step.rate_rps,
                "arrival": spec.kind if spec is not None else step.arrival,
                "burstiness": spec.burstiness if spec is not None else 1.0,
                "seed": int(option_value(opts, "arrival_seed")) * 1_000_003 + step.index,
                # A little ahead, so every worker has the schedule before its first arrival.
                "t0": now + 0.05,
            }
            if step.trace_rows is not None:  # a window of the trace (--trace-steps)
                self.plan.rate_schedule["rows"] = list(step.trace_rows)
            log.info(
                "tokenload: step %d: %g requests/s (%s), %d users, warming up %.0f s",
                step.index,
                step.rate_rps,
                spec if spec is not None else step.arrival,
                step.concurrency,
                step.warmup_s,
            )
        else:
            self.plan.rate_schedule = None
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
            if self.scraper is not None:
                self.scraper.scrape_once()  # the server's counters as the measured part opens

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
        self.plan.rate_schedule = None
        if drain:
            self.gate.set_closed(True)
        self._announce()
        if self.scraper is not None:
            self.scraper.scrape_once()  # the server's state at the step's end, inside its window

    def step_judged(self, summary: dict[str, Any]) -> None:
        """A line as each step's figures are complete (its measured requests ended): what it
        measured and its verdict."""
        from tokenload.report.tables import load_label  # one wording of a step's load (a context
        # sweep's step names its prompt length)

        load = load_label(summary)
        reqs = summary.get("requests") or {}
        failed = f" ({reqs['failed']} failed)" if reqs.get("failed") else ""
        tput = summary.get("output_tokens_per_s")
        verdict = (summary.get("verdict") or {}).get("bottleneck", "-")
        print(
            f"step {summary.get('index')}: {load}, {reqs.get('ok', 0)} requests{failed}, "
            f"{'-' if tput is None else f'{tput:.1f}'} output tokens/s, "
            f"TTFT p50 {_fmt_ms((summary.get('ttft_ms') or {}).get('p50'))}, "
            f"TPOT p50 {_fmt_ms((summary.get('tpot_ms') or {}).get('p50'))}: {verdict}",
            flush=True,
        )

    def elapsed_s(self) -> float | None:
        if self.start_time is None:
            return None
        return (self.end_time or time.time()) - self.start_time

    @property
    def run_dir(self) -> Path | None:
        return self.writer.run_dir if self.writer is not None else None

    @property
    def records(self) -> RecordsFile | None:
        return self.writer.records if self.writer is not None else None

    def open_run_dir(self) -> None:
        if self.writer is None:
            self.writer = RunWriter.open(
                self.config.run_dir, self.config.public_dict(), self.environment.host
            )

    def start_scraper(self) -> None:
        cfg = self.config
        if self.scraper or self.prometheus or not cfg.server_metrics or self.is_worker:
            return
        if cfg.prometheus_url:
            if cfg.metrics_urls or cfg.metrics_discover:
                log.warning(
                    "tokenload: --prometheus-url is set: --metrics-url and --metrics-discover are not scraped"
                )
            self.prometheus = PrometheusSource(
                cfg.prometheus_url,
                cfg.prometheus_selector,
                replica_label=cfg.prometheus_replica_label,
                resolution_s=cfg.metrics_interval_s,
            )
            self.prometheus.start()
            return
        urls = list(cfg.metrics_urls)
        discover = parse_spec(cfg.metrics_discover) if cfg.metrics_discover else None
        if not urls and not discover and self.environment.host:
            urls = [self.environment.host.rstrip("/") + "/metrics"]
        if not urls and not discover:
            return
        self.open_run_dir()
        assert self.writer is not None
        self.scraper = Scraper(
            urls,
            interval_s=cfg.metrics_interval_s,
            out_file=self.writer.scrape_file,
            discover=discover,
            discover_every_s=cfg.metrics_discover_every_s,
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

    def step_sources(self) -> StepSources:
        """What the step summaries are made from (results/summary.py takes these, not the context)."""
        return StepSources(
            tracker=self.steps,
            server_window=self.server_window,
            points=self.scraper.points if self.scraper is not None else None,
            replica_windows=self.prometheus.replicas if self.prometheus is not None else None,
            gpu_peaks=self.config.gpu_peaks,
            max_num_seqs=self.config.server_max_num_seqs or None,
            workers_lost=self.fleet.workers_lost,
            target_events=self.scraper.events if self.scraper is not None else (),
        )

    def run_facts(self) -> RunFacts:
        return RunFacts(
            run_id=self.run_dir.name if self.run_dir else None,
            host=self.environment.host,
            model=self.model,
            started_at=self.start_time,
            ended_at=self.end_time,
            config={**self.config.public_dict(), "endpoints": self.endpoints()},
            workers=sorted(self.fleet.workers_seen),
            search=self.plan.search,
            trace=self.plan.trace,
            scrape_failures=self.scraper.failures if self.scraper is not None else None,
            workload_fit=merge_fit([fit_counts(self), *self.fleet.worker_fit.values()]),
            scrape_targets=self.scraper.targets_summary() if self.scraper is not None else None,
        )

    def endpoints(self) -> list[str]:
        """The API paths the run's user classes call (the locustfile chose them, not an option):
        recorded so that a chat run and a completions run differ in summary.json."""
        return sorted(
            {p for uc in self.environment.user_classes if isinstance(p := getattr(uc, "path", None), str)}
        )

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
        if self.writer is not None and self.pending:
            batch, self.pending = self.pending, []
            self.writer.write_records(batch)

    def rows(self) -> list[dict[str, Any]]:
        return stats_rows(self.stats, self.elapsed_s())

    def finish(self) -> None:
        """Master/local end of run: flush, then write the summaries (results/writer.py).
        Idempotent."""
        if self.finished or self.is_worker:
            return
        self.finished = True
        self.end_time = self.end_time or time.time()
        self.open_run_dir()
        self.flush()
        self.stop_scraper()
        assert self.writer is not None
        rows = self.rows()
        run_summary, llm_stats = self._results(rows)
        self._write_prometheus_series(llm_stats)
        opts = self.environment.parsed_options
        self.writer.finish(run_summary, llm_stats, rows, csv_prefix=getattr(opts, "csv_prefix", None))
        if not self.stats.empty:
            print("\nLLM metrics (" + FORMULAS["tpot_ms"] + ")", flush=True)
            print(format_text(rows), flush=True)
            print(f"Run directory: {self.run_dir}", flush=True)
        html_file = getattr(opts, "html_file", None)
        if html_file and Path(html_file).exists():
            from tokenload.loadgen.webui import inject_html_table

            inject_html_table(Path(html_file), rows)

    def write_snapshot(self) -> None:
        """The run directory's results as of now, the run going on: the web UI's master or
        local runner when a test has stopped (a user downloads them from the LLM tab; the
        process may start another test, and quitting writes them again)."""
        if self.finished or self.is_worker:
            return
        self.open_run_dir()
        self.flush()
        assert self.writer is not None
        run_summary, llm_stats = self._results(self.rows())
        self._write_prometheus_series(llm_stats)
        self.writer.results(run_summary, llm_stats)
        self.results_written_at = time.time()

    def _write_prometheus_series(self, llm_stats: dict[str, Any]) -> None:
        """A ``--prometheus-url`` run's ``server_metrics.jsonl``: the run's series read back from
        Prometheus (nothing is scraped on that path), so that the report draws its charts. After
        the steps' figures (whose queries waited until Prometheus held the run's end), before
        the reports; the series' failed queries go to ``llm_stats["server"]``."""
        if self.prometheus is None or self.start_time is None or self.writer is None:
            return
        points = self.prometheus.series(self.start_time, self.end_time or time.time())
        if points:
            self.writer.write_server_series(points)
        if self.prometheus.series_failures and isinstance(llm_stats.get("server"), dict):
            llm_stats["server"]["series_query_failures"] = dict(self.prometheus.series_failures)

    def _results(self, rows: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """summary.json's and llm_stats.json's contents as of now."""
        assert self.writer is not None
        run_summary = (
            build_summary(self.step_sources(), self.run_facts(), rows) if self.steps.windows else None
        )
        llm_stats = {
            "server": self.server_summary(),
            "rows": rows,
            "stats": self.stats.to_dict(),
            "formulas": FORMULAS,
            "records_written": self.writer.records.written,
            "workers_lost": self.fleet.workers_lost,
            "start_time": self.start_time,
            "end_time": self.end_time,
        }
        return run_summary, llm_stats


_contexts: weakref.WeakKeyDictionary[Environment, RunContext] = weakref.WeakKeyDictionary()


def environments() -> list[Environment]:
    """The environments that have a context in this process (one runner per process)."""
    return list(_contexts)


def context_of(environment: Environment) -> RunContext:
    ctx = _contexts.get(environment)
    if ctx is None:
        ctx = _contexts[environment] = RunContext(environment)
    return ctx


def _fmt_ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} ms"
