"""The one place where tokenload hooks into Locust's events (the state they act on is
:class:`tokenload.loadgen.plugin.RunContext`, one per environment).

* ``init``: the config is validated before any load; every process samples its health; a worker
  listens for the master's announcements (loadgen/transport.py); the master or local runner
  opens the run directory, tokenload's /metrics and the web UI's LLM tab;
* ``request``: every finished LLM request fires one Locust ``request`` event (response_time =
  E2E ms, response_length = output tokens); its ``context`` carries the record, folded into
  :class:`LLMStats`, the step's statistics and the record queue;
* ``report_to_master`` / ``worker_report``: workers ship stats and records and clear them; the
  master merges them and appends the records to ``requests.jsonl`` at once;
* ``spawning_complete`` / ``test_stop``: a run without a load shape gets a step per user count;
* ``quitting``: the master (or local runner) writes the run directory's files.
"""

from __future__ import annotations

import locust
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

import gc
import logging
import sys
import time
from typing import Any

import gevent

from tokenload.loadgen import exporter, transport, workload_check
from tokenload.loadgen.health import HealthMonitor
from tokenload.loadgen.locust_private import send_report_now
from tokenload.loadgen.options import add_arguments
from tokenload.loadgen.plugin import RunContext, context_of, environments
from tokenload.loadgen.workers import watch as watch_processes
from tokenload.metrics.aggregate import LLMStats, itl_histogram

__all__ = ["install"]

log = logging.getLogger("tokenload")

#: Locals flush records to disk at this interval (workers ride Locust's report interval).
_FLUSH_INTERVAL_S = 1.0


def _on_init(environment: Environment, **_kw: Any) -> None:
    ctx = context_of(environment)
    runner = environment.runner
    if not isinstance(runner, WorkerRunner):
        # Config is validated up front: a bad workload file ends the run before any load.
        from tokenload.loadgen.trace_replay import TraceShape, trace_of, trace_steps
        from tokenload.loadgen.workload import load_spec
        from tokenload.workload.errors import WorkloadError

        try:
            spec = load_spec(ctx.config)
            if isinstance(environment.shape_class, TraceShape):  # the trace, and its windows
                trace_of(ctx).windows(trace_steps(environment.parsed_options))
        except WorkloadError as exc:
            sys.exit(f"tokenload: {exc}")
        workload_check.on_master(environment, ctx, spec)
    else:
        workload_check.worker_files_exist(ctx)
    # Every process samples its own health; the master only for its /metrics, not per step.
    ctx.health = HealthMonitor(
        lambda: (ctx.steps.step, ctx.steps.phase), per_step=not isinstance(runner, MasterRunner)
    )
    ctx.health.start()
    if ctx.health.cpu_limit.cores < 1.0:
        log.info("tokenload: CPU %% is measured against %s", ctx.health.cpu_limit.source)
    if isinstance(runner, WorkerRunner):
        transport.listen_as_worker(runner, ctx)
    else:
        ctx.open_run_dir()
        if not isinstance(runner, MasterRunner):
            gevent.spawn(_flush_loop, ctx)
        else:
            gevent.spawn(_load_report_writer)
    watch_processes(environment, ctx)  # a worker lost (on the master), the master lost (on a worker)
    exporter.install(environment, ctx)  # tokenload's own /metrics (master or local runner)
    if environment.web_ui is not None:
        from tokenload.loadgen.webui import extend_web_ui

        extend_web_ui(environment, ctx)


def _load_report_writer() -> None:
    """Import the report writer (pandas and pyarrow, about 0.6 s on a 2-core VM) on a master
    while it waits for its workers (Locust looks for them once a second, with no load running
    yet), not when the run ends: the run's files are written that much sooner. A local runner,
    with no such wait, imports it at the end (results/writer.py)."""
    import tokenload.report.writer  # noqa: F401


def _flush_loop(ctx: RunContext) -> None:
    while not ctx.finished:
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
    if env is not None:
        transport.fill_worker_report(context_of(env), data)


def _on_worker_report(client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    payload = data.get("tokenload")
    env = _master_env()
    if payload is not None and env is not None:
        transport.take_worker_report(context_of(env), client_id, payload)


def _on_test_start(environment: Environment, **_kw: Any) -> None:
    ctx = context_of(environment)
    workload_check.on_worker_start(environment, ctx)  # before any user of this worker starts
    if ctx.start_time is None:
        ctx.start_time = time.time()
        if not isinstance(environment.runner, MasterRunner) and ctx.config.gc_freeze:
            freeze_gc()
    ctx.end_time = None
    ctx.start_scraper()
    if not isinstance(environment.runner, WorkerRunner) and ctx.model is None and environment.host:
        gevent.spawn(_record_model, environment, ctx)


def _record_model(environment: Environment, ctx: RunContext) -> None:
    """The model the run sent to, for summary.json (its users look it up in their own processes):
    --model, else the first one the target's /v1/models lists; None if it does not answer."""
    if ctx.config.model:
        ctx.model = ctx.config.model
        return
    from tokenload.client.http_stream import StreamTarget, served_model

    target = StreamTarget(str(environment.host), api_key=ctx.config.api_key, pool_size=1)
    try:
        model, why = served_model(target, timeout_s=5.0)  # HTTP 401: the key is the workers' (k8s)
    finally:
        target.close()
    if ctx.model is None:
        ctx.model = model
    if why:
        log.info("tokenload: /v1/models did not say the model (%s): summary.json records none", why)


#: Full (oldest-generation) collections at most once per this many young ones, and young ones
#: after this many allocations: CPython's defaults are (700, 10, 10).
GC_THRESHOLD = (20_000, 50, 1_000)


def freeze_gc() -> None:
    """In a process that sends requests (a worker, or a local runner; never the master, which
    times nothing): everything imported and set up so far is long-lived, so move it out of the
    collector's sight (``gc.freeze``) and make collections rarer. A full collection walks every
    tracked object: with Locust, gevent and the workload loaded, that is a stall of the event
    loop, and a scheduled send or a read waits for it (``--no-gc-freeze`` leaves the collector
    alone; bench/gc_freeze.py measures both)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def _shapeless(environment: Environment) -> bool:
    """A master or local run without a load shape (its steps are implicit: see implicit_step)."""
    return not isinstance(environment.runner, WorkerRunner) and environment.shape_class is None


def _on_spawning_complete(user_count: int, **_kw: Any) -> None:
    for env in environments():
        if env.runner is not None and _shapeless(env):
            context_of(env).implicit_step(int(user_count), time.time())


def _on_test_stop(environment: Environment, **_kw: Any) -> None:
    ctx = context_of(environment)
    if isinstance(environment.runner, WorkerRunner):
        # A worker told to stop says "client_stopped" right after this, and Locust's master
        # ignores its reports from then until it is ready again (stop_timeout later): what it
        # measured since its last tick goes now, ahead of that message.
        send_report_now(environment.runner)
    ctx.end_time = time.time()
    if environment.runner is not None and _shapeless(environment):
        ctx.end_implicit_step(ctx.end_time)
    if ctx.scraper is not None:
        ctx.scraper.scrape_once()  # the state at the end of the load, inside the window
    if _interactive(environment):
        gevent.spawn(_results_when_stopped, environment)


def _interactive(environment: Environment) -> bool:
    """A web UI's master or local runner (Locust makes no web UI for a headless run or a
    worker): tests start and stop, the process goes on."""
    return environment.web_ui is not None


def _results_when_stopped(environment: Environment) -> None:
    """Write the run directory's results once the stopped test's last records are in: the
    runner stopped, and (with workers) one more report interval, the reports that carry the
    workers' last records. Skipped when a new test started meanwhile (its stop writes them)."""
    from locust.runners import STATE_STOPPED, WORKER_REPORT_INTERVAL

    runner = environment.runner
    deadline = time.monotonic() + (environment.stop_timeout or 0) + 30
    while getattr(runner, "state", None) != STATE_STOPPED and time.monotonic() < deadline:
        gevent.sleep(0.25)
    if isinstance(runner, MasterRunner):
        gevent.sleep(WORKER_REPORT_INTERVAL + 0.5)
    if getattr(runner, "state", None) != STATE_STOPPED:
        return
    try:
        context_of(environment).write_snapshot()
    except Exception:  # the next stop, or quitting, writes them again; the UI goes on
        log.exception("tokenload: the run directory's results could not be written")


def _on_reset_stats(**_kw: Any) -> None:
    for ctx in [context_of(env) for env in environments()]:
        ctx.stats = LLMStats()
        ctx.start_time = time.time()


def _on_quitting(environment: Environment, **_kw: Any) -> None:
    context_of(environment).finish()


# report_to_master / worker_report do not pass the environment; there is one runner per process.
def _worker_env(_client_id: str) -> Environment | None:
    for env in environments():
        if isinstance(env.runner, WorkerRunner):
            return env
    return None


def _master_env() -> Environment | None:
    for env in environments():
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
