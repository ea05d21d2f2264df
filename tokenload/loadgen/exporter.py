"""tokenload's own Prometheus ``/metrics``, on the master or the local runner: what the client
measures (TTFT/TPOT/ITL/E2E histograms, requests by status and failure class, tokens, requests in
flight), where the run is (step, target concurrency or rate, users) and whether the load
generator keeps up (CPU and gevent loop lag of every process), so Grafana can lay the client over
the server.

Everything is read from the run context when Prometheus scrapes: a collector on a dedicated
``CollectorRegistry`` (never prometheus_client's global one). The histograms are the LLM table's
own merged log histograms (successful requests only, ITL counted once per token) re-bucketed at
fixed bounds: counts and sums are exact, a value within 1 % of a bound may fall on either side
of it. Counters are the run's totals; Locust's "reset stats" restarts them, which ``rate()``
reads as a counter reset.

Served at the web UI's ``/metrics`` (behind ``--web-login`` when that is on) and, for a headless
master, on ``--exporter-port`` (prometheus_client's WSGI app on a gevent server, no login;
``--exporter-host`` defaults to every interface, as a pod needs). Nothing exported holds a secret:
no option, URL or header is, only numbers, the run id and worker names.

Workers add ``live`` to each report (:func:`worker_report`): their streams in flight, CPU % and
worst loop lag; the master keeps the latest per worker (:func:`note_worker`).
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust.runners import MasterRunner, WorkerRunner

import logging
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from flask import Response
from gevent.pywsgi import WSGIServer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from tokenload import __version__
from tokenload.loadgen.health import HealthMonitor
from tokenload.metrics.failures import FAILURE_CLASSES
from tokenload.metrics.histogram import LogHistogram

if TYPE_CHECKING:
    from locust.env import Environment

    from tokenload.loadgen.plugin import RunContext

__all__ = [
    "BUCKETS_S",
    "Exporter",
    "install",
    "log_histogram_buckets",
    "note_worker",
    "worker_report",
]

log = logging.getLogger("tokenload")

#: Histogram bounds in seconds, from a millisecond (ITL, TPOT) to ten minutes (long E2E).
BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
    0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip

_HISTOGRAMS = (
    ("ttft_ms", "tokenload_ttft_seconds", "Time to first token seen by the client, successful requests"),
    ("tpot_ms", "tokenload_tpot_seconds", "Time per output token after the first, successful requests"),
    ("itl_ms", "tokenload_itl_seconds", "Gap between content chunks / tokens in it, counted once per token"),
    ("e2e_ms", "tokenload_e2e_seconds", "End-to-end request latency seen by the client, successful requests"),
)

#: A worker whose report is older than this no longer counts (lost, or the run is over).
_WORKER_STALE_S = 15.0


def log_histogram_buckets(h: LogHistogram, bounds: Sequence[float], scale: float = 1.0) -> list[float]:
    """Cumulative counts of ``h`` at each of ``bounds`` (``h``'s values times ``scale``), then
    +Inf (the exact count). A log bucket counts at its representative value, as its quantiles do."""
    gamma = h.gamma
    out: list[float] = []
    seen = h.zero_count
    items = sorted(h.buckets.items())
    i = 0
    for bound in bounds:
        while i < len(items):
            idx, n = items[i]
            value = min(max(2.0 * gamma**idx / (gamma + 1.0), h.min), h.max) * scale
            if value > bound:
                break
            seen += n
            i += 1
        out.append(float(seen))
    out.append(float(h.count))
    return out


class Exporter:
    """The registry and its collector for one run context (master or local runner)."""

    def __init__(self, ctx: RunContext, health: HealthMonitor) -> None:
        self.ctx = ctx
        self.health = health
        #: client id -> (time of the report, the worker's ``live`` block)
        self.workers: dict[str, tuple[float, dict[str, Any]]] = {}
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self.server: WSGIServer | None = None

    # -- what workers report ------------------------------------------------------------------
    def note_worker(self, client_id: str, live: dict[str, Any] | None) -> None:
        if live:
            self.workers[client_id] = (time.monotonic(), live)

    def _live(self) -> list[dict[str, Any]]:
        env = self.ctx.environment
        own = {"worker": "master" if isinstance(env.runner, MasterRunner) else "local"}
        own |= {"cpu_percent": self.health.cpu_percent, "loop_lag_s": self.health.loop_lag_s}
        if not isinstance(env.runner, MasterRunner):
            own["in_flight"] = self.ctx.fleet.in_flight
            return [own]
        now = time.monotonic()
        fresh = [live for t, live in self.workers.values() if now - t <= _WORKER_STALE_S]
        return [own, *fresh]

    # -- the collector ------------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        ctx = self.ctx
        total = ctx.stats.total
        for key, name, doc in _HISTOGRAMS:
            h = total.hist[key]
            counts = log_histogram_buckets(h, BUCKETS_S, scale=0.001)
            les = [floatToGoString(b) for b in BUCKETS_S] + ["+Inf"]
            yield HistogramMetricFamily(
                name, doc, buckets=list(zip(les, counts, strict=True)), sum_value=h.sum / 1000
            )

        requests = CounterMetricFamily(
            "tokenload_requests",
            "Requests finished, by status and failure class",
            labels=["status", "failure_class"],
        )
        requests.add_metric(["ok", ""], total.ok)
        for cls in [*FAILURE_CLASSES, *sorted(set(total.failures) - set(FAILURE_CLASSES))]:
            requests.add_metric(["failed", cls], total.failures.get(cls, 0))
        requests.add_metric(["cancelled", ""], ctx.stats.cancelled)
        yield requests
        yield CounterMetricFamily(
            "tokenload_output_tokens",
            "Output tokens of requests that ended (server usage, else chunks)",
            value=total.output_tokens,
        )
        yield CounterMetricFamily(
            "tokenload_output_tokens_arrived",
            "Output tokens received so far, streams in progress included (chunks, as they arrived)",
            value=ctx.fleet.arrived_tokens_total(),
        )
        yield CounterMetricFamily(
            "tokenload_input_tokens", "Prompt tokens sent (server usage)", value=total.input_tokens
        )

        live = self._live()
        in_flight = sum(int(p.get("in_flight") or 0) for p in live)
        yield GaugeMetricFamily(
            "tokenload_requests_in_flight", "Requests sent and not yet complete", value=in_flight
        )
        cpu = GaugeMetricFamily(
            "tokenload_process_cpu_percent", "CPU % of each load generator process", labels=["worker"]
        )
        lag = GaugeMetricFamily(
            "tokenload_loop_lag_seconds", "Worst gevent loop lag of each process, last 5 s", labels=["worker"]
        )
        for p in live:
            cpu.add_metric([str(p.get("worker"))], float(p.get("cpu_percent") or 0.0))
            lag.add_metric([str(p.get("worker"))], float(p.get("loop_lag_s") or 0.0))
        yield cpu
        yield lag
        yield GaugeMetricFamily(
            "tokenload_workers", "Worker processes reporting", value=max(len(live) - 1, 0)
        )

        yield from self._where()
        info = GaugeMetricFamily("tokenload_run_info", "The run (value 1)", labels=["run_id", "version"])
        info.add_metric([ctx.run_dir.name if ctx.run_dir else "", __version__], 1)
        yield info

    def _where(self) -> Iterator[Metric]:
        """The current step, its phase and target; users running."""
        ctx = self.ctx
        runner = ctx.environment.runner
        tracker = ctx.steps
        window = tracker.windows[-1] if tracker.windows and tracker.step is not None else None
        if window is not None and window.index != tracker.step:
            window = None
        yield GaugeMetricFamily(
            "tokenload_step_index",
            "Index of the current load step (-1: between steps)",
            value=-1 if window is None else window.index,
        )
        yield GaugeMetricFamily(
            "tokenload_step_measuring", "1 in a step's measured part, 0 in its warm-up or between steps",
            value=1 if window is not None and tracker.phase == "measure" else 0,
        )  # fmt: skip
        users = getattr(runner, "user_count", 0) or 0
        target = window.concurrency if window is not None else None
        if target is None and (window is None or window.target_rate_rps is None):
            target = getattr(runner, "target_user_count", None)
        if target is not None:
            yield GaugeMetricFamily("tokenload_target_concurrency", "Users the load asks for", value=target)
        if window is not None and window.target_rate_rps is not None:
            yield GaugeMetricFamily(
                "tokenload_target_rate_rps",
                "Requests per second the current step asks for",
                value=window.target_rate_rps,
            )
        yield GaugeMetricFamily("tokenload_users", "Users running", value=users)

    # -- serving ------------------------------------------------------------------------------
    def text(self) -> bytes:
        return generate_latest(self.registry)

    def add_web_route(self, web_ui: Any, base: str = "") -> None:
        """``/metrics`` on Locust's web UI app (behind its login when ``--web-login`` is on)."""

        def metrics() -> Response:
            return Response(self.text(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        web_ui.app.add_url_rule(
            f"{base}/metrics", "tokenload_metrics", web_ui.auth_required_if_enabled(metrics)
        )

    def serve(self, host: str, port: int) -> None:
        """prometheus_client's WSGI app on a gevent server; raises OSError if it cannot listen."""
        self.server = WSGIServer((host, port), make_wsgi_app(self.registry), log=None)
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=1)
            self.server = None


# -- wiring (called by tokenload.loadgen.plugin) ----------------------------------------------


def install(environment: Environment, ctx: RunContext) -> None:
    """At Locust's ``init``: sample this process's health; on the master or local runner build
    the exporter, add ``/metrics`` to the web UI and serve ``--exporter-port``."""
    health = ctx.health  # started by the plugin before this is called
    if isinstance(environment.runner, WorkerRunner):
        return
    exporter = ctx.cache.exporter = Exporter(ctx, health)
    if environment.web_ui is not None:
        base = (getattr(environment.parsed_options, "web_base_path", None) or "").rstrip("/")
        exporter.add_web_route(environment.web_ui, base)
    cfg = ctx.config
    web_port = getattr(environment.parsed_options, "web_port", None)
    if environment.web_ui is not None and cfg.exporter_port == web_port:
        # One setting for every master of a deployment (k8s: the web port): the web UI serves it.
        return
    if cfg.exporter_port:
        try:
            exporter.serve(cfg.exporter_host, cfg.exporter_port)
        except OSError as exc:
            sys.exit(
                f"tokenload: --exporter-port: cannot listen on {cfg.exporter_host}:{cfg.exporter_port}: {exc}"
            )
        log.info("tokenload: /metrics on http://%s:%d/metrics", cfg.exporter_host, cfg.exporter_port)


def worker_report(ctx: RunContext) -> dict[str, Any]:
    """What a worker adds to each report: its name, streams in flight, CPU % and loop lag."""
    health = ctx.health
    return {
        "worker": ctx.worker_name,
        # Requests started in a step's measured part and not yet ended, so the master judges a
        # step only once they are in.
        **ctx.fleet.live_report(),
        "cpu_percent": health.cpu_percent if health else None,
        "loop_lag_s": health.loop_lag_s if health else None,
    }


def note_worker(ctx: RunContext, client_id: str, live: dict[str, Any] | None) -> None:
    """On the master: keep a worker's latest ``live`` block."""
    exporter = ctx.cache.exporter
    if exporter is not None:
        exporter.note_worker(client_id, live)
