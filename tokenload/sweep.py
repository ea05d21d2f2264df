"""``tokenload sweep``: a headless run of a load shape on Locust, written to a run directory.

It runs Locust itself (a master and ``--workers`` worker processes, or one local process with
``--workers 0``) with the tokenload user and the shape, against ``--host`` or, without one, the
built-in emulator it starts. Arguments are checked, and the host is reached once, before any
load is sent.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

import configargparse

from tokenload.cli_args import usage_error
from tokenload.loadgen.option_table import add_options, env_var_names, forwarded_argv
from tokenload.loadgen.steps import (
    StepSpecError,
    parse_concurrency_list,
    parse_rate_list,
    rate_staircase,
    staircase,
)
from tokenload.metrics.failures import requests_ended
from tokenload.report.model import knee_sentence
from tokenload.report.search_text import search_lines
from tokenload.report.tables import flag_warnings, verdict_label
from tokenload.report.workload_text import fit_lines, one_length_line
from tokenload.results.rundir import check_new_run_dir, make_run_dir
from tokenload.serving.process import ServerProcess

__all__ = ["main"]

_LOCUSTFILE = '''"""The locustfile this sweep ran (written by tokenload sweep)."""

from tokenload.loadgen.{shape_module} import {shape_class}
from tokenload.loadgen.user import {user_class}


class User({user_class}):
    pass


class Shape({shape_class}):
    pass
'''

#: --shape -> (module of tokenload.loadgen, class)
_SHAPES = {
    "staircase": ("shapes", "StaircaseShape"),
    "knee": ("shapes", "KneeShape"),
    "rate": ("shapes", "RateShape"),
    "context": ("shapes", "ContextSweepShape"),
    "slo": ("slo_shape", "SLOShape"),
    "trace": ("trace_replay", "TraceShape"),
}


class SweepError(Exception):
    """A bad argument or an unreachable host: one line, exit status 2, no load sent."""


class _Parser(configargparse.ArgumentParser):
    """Bad arguments as one line naming the option (``tokenload sweep: --rate: expected ...``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"tokenload sweep: {usage_error(message).removeprefix('argument ')}\n")


def build_parser() -> argparse.ArgumentParser:
    """The sweep's options and every run option it forwards to Locust, from the one option table
    (:mod:`tokenload.loadgen.option_table`); each is also read from its ``TOKENLOAD_*`` variable."""
    p = _Parser(prog="tokenload sweep", description=(__doc__ or "").replace("``", "`"))
    add_options(p, "sweep", env_vars=True)
    return p


def _sim_replica_metrics(host: str) -> list[str] | None:
    """The built-in emulator's replicas' /metrics (``tokenload sim --replicas N``), or None for
    one server (its /sim/replicas answers 404)."""
    try:
        with urllib.request.urlopen(f"{host}/sim/replicas", timeout=10) as r:
            return [x["metrics_url"] for x in json.load(r)["replicas"]]
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # Not the built-in emulator's router, or it did not answer: scrape the one server.
        print(
            f"tokenload sweep: could not list the emulator's replicas ({exc}); scraping {host}/metrics",
            file=sys.stderr,
        )
        return None


def _check_fits_emulator(args: argparse.Namespace) -> None:
    """The built-in emulator's context against the shortest request the workload can draw: one
    that can never fit ends the sweep here, before any load (a real server's context is known
    only once its /tokenize answers, and a worker then ends the run)."""
    from tokenload.sim import main as sim_main
    from tokenload.workload.lengths import parse_length_spec

    try:
        profile, config = sim_main.engine_from_text(args.sim_args)
    except ValueError as exc:
        raise SweepError(f"--sim-args: {exc}") from None
    out = parse_length_spec(args.output_tokens, "--output-tokens").least()
    prompts = str(args.prompt_lengths).split(",") if args.shape == "context" else [args.prompt_tokens]
    flag = "--prompt-lengths" if args.shape == "context" else "--prompt-tokens"
    least = max(parse_length_spec(p.strip(), flag).least() for p in prompts)
    max_model_len = config.max_model_len or profile.model.max_model_len  # as the engine takes it
    if least + out > max_model_len:
        raise SweepError(
            f"{flag}/--output-tokens: {least} + {out} tokens at the least, more than the "
            f'emulator\'s max_model_len of {max_model_len} (--sim-args "--max-model-len N")'
        )


def _check(args: argparse.Namespace) -> None:
    """What the options' own types cannot see: one option against another, or the whole shape."""
    if args.out and "," in str(args.out):
        # The run's locustfile is written there, and Locust reads -f as a comma-separated list.
        raise SweepError(f"--out: expected a path without commas (Locust splits -f), got {args.out!r}")
    if args.out:
        try:
            check_new_run_dir(args.out, "--out")  # a run's files there would be mixed with this one's
        except ValueError as exc:
            raise SweepError(str(exc)) from None
    try:
        if args.shape == "rate":
            rate_staircase(parse_rate_list(args.rate), args.step_duration, args.warmup, args.max_in_flight)
        elif args.shape == "slo":
            rate_staircase([args.slo_start], args.step_duration, args.warmup, args.max_in_flight)
        else:
            levels = parse_concurrency_list(args.concurrency) if args.shape == "staircase" else [1]
            staircase(levels, args.step_duration, args.warmup)
        if args.probe_duration is not None:
            staircase([1], args.probe_duration, args.warmup)
    except StepSpecError as exc:
        raise SweepError(str(exc)) from None
    if args.shape == "trace" or args.trace or (args.shape == "slo" and _workload_kind(args) == "trace"):
        from tokenload.loadgen.trace_replay import load_run_trace, trace_steps
        from tokenload.workload.errors import WorkloadError

        try:
            trace = load_run_trace(args)
            n = trace_steps(args)
            windows = trace.windows(n) if args.shape == "trace" else []
        except WorkloadError as exc:
            raise SweepError(str(exc)) from None
        if n > 1 and args.shape != "trace":
            raise SweepError(
                f"--trace-steps: only --shape trace replays a trace in windows, got --shape {args.shape}"
            )
        staircase([1], min([w.end_s - w.start_s for w in windows] or [trace.duration_s]) + 1.0, args.warmup)
    if args.shape == "slo" and not args.slo.strip():
        raise SweepError("--slo: the slo shape needs an SLO, e.g. --slo ttft_p95_ms=500,tpot_p95_ms=50")
    if args.slo_max < args.slo_start:
        raise SweepError(f"--slo-max: expected a rate >= --slo-start, got {args.slo_max:g}")
    if args.knee_max < args.knee_start:
        raise SweepError(f"--knee-max: expected an integer >= --knee-start, got {args.knee_max}")
    if args.host is None and not args.workload and not args.trace and args.shape != "trace":
        _check_fits_emulator(args)  # a workload file or a trace has its own lengths
    if args.workload:
        from tokenload.workload.errors import WorkloadError
        from tokenload.workload.spec import load_workload_file

        try:
            load_workload_file(args.workload)
        except WorkloadError as exc:
            raise SweepError(str(exc)) from None
    if args.host is not None and not args.host.startswith(("http://", "https://")):
        raise SweepError(f"--host: expected an http:// or https:// URL, got {args.host!r}")


def _workload_kind(args: argparse.Namespace) -> str | None:
    if not args.workload:
        return None
    from tokenload.workload.errors import WorkloadError
    from tokenload.workload.spec import load_workload_file

    try:
        return load_workload_file(args.workload).kind
    except WorkloadError:
        return None  # reported by the workload check below


def _reach(host: str) -> None:
    url = host.rstrip("/") + "/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            r.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return  # reachable; the key is the user's business (OPENAI_API_KEY)
        hint = (
            f" (the host is the server's base URL: drop the /v1, --host {host.rstrip('/')[:-3]})"
            if host.rstrip("/").endswith("/v1")
            else ""
        )
        raise SweepError(f"--host: {url} answered HTTP {exc.code}{hint}") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SweepError(f"--host: cannot reach {url}: {reason}") from None


#: How often the readiness wait asks the target's /health.
READY_POLL_S = 0.5


def _wait_ready(host: str, budget_s: float) -> None:
    """Before any load: while the target's /health answers 503 (vLLM and the emulator while the
    model loads), wait, up to ``budget_s``; a 200, a server with no /health (404, 405) or one
    not reached at all goes on (the reachability check then says so). A sweep against a server
    not yet ready measured only failures: one user sent ~2,400 failing requests a second
    (walkthrough, 2026-12-05)."""
    if budget_s <= 0:
        return
    url = host.rstrip("/") + "/health"
    deadline, said = time.monotonic() + budget_s, False
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 503:
                return  # no /health, or one that says nothing of readiness: the load decides
        except (OSError, ValueError):
            return  # not reached at all: said by the reachability check, at once (a wrong port)
        if time.monotonic() >= deadline:
            raise SweepError(f"--wait-ready: {url} still answered HTTP 503 after {budget_s:g} s")
        if not said:
            print(f"waiting up to {budget_s:g} s for {url} (HTTP 503: loading; --wait-ready)", flush=True)
            said = True
        time.sleep(READY_POLL_S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _locust_bin() -> str:
    return shutil.which("locust", path=str(Path(sys.executable).parent)) or "locust"


#: Seconds the master waits for every worker to connect before it gives up (a worker that dies
#: at start would otherwise hang the sweep; workers on this host connect within seconds).
EXPECT_WORKERS_MAX_WAIT_S = 60


def _run_locust(args: argparse.Namespace, host: str, run_dir: Path, emulator: str = "") -> int:
    locustfile = run_dir / "locustfile.py"
    user = "ChatUser" if args.endpoint == "chat" else "CompletionsUser"
    module, cls = _SHAPES[args.shape]
    locustfile.write_text(_LOCUSTFILE.format(user_class=user, shape_module=module, shape_class=cls))
    common = [_locust_bin(), "-f", str(locustfile)]
    # Every run option that is not Locust's default, as flags; the workload file by its full path.
    given = dict(
        vars(args),
        workload=str(Path(args.workload).resolve()) if args.workload else "",
        trace=str(Path(args.trace).resolve()) if args.trace else "",
    )
    load = [
        "--host", host, "--headless", "--only-summary", "--run-dir", str(run_dir), *forwarded_argv(given),
        "--stop-timeout", "120", "--loglevel", "WARNING",
        *(["--target-emulator", emulator] if emulator else []),
    ]  # fmt: skip
    # The sweep read the TOKENLOAD_* variables already; what it forwards is the whole run.
    env = {k: v for k, v in os.environ.items() if k not in env_var_names()}
    env["PYTHONUNBUFFERED"] = "1"
    if args.workers == 0:
        return subprocess.call([*common, *load], env=env)
    port = _free_port()
    master = subprocess.Popen(
        # A worker that dies at start must not hang the sweep: the master gives up after a minute.
        [*common, *load, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
         "--expect-workers", str(args.workers), "--expect-workers-max-wait", str(EXPECT_WORKERS_MAX_WAIT_S)],
        env=env,
    )  # fmt: skip
    workers = [
        subprocess.Popen(
            # Workers stop their users gracefully too: requests in flight at the end are counted.
            [
                *common,
                "--worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                str(port),
                "--loglevel",
                "WARNING",
                "--stop-timeout",
                "120",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        for _ in range(args.workers)
    ]
    try:
        return master.wait()
    finally:
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()


def _fmt(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def print_steps(summary: dict[str, Any]) -> None:
    open_loop = any(s.get("target_rate_rps") is not None for s in summary["steps"])
    load = "rate" if open_loop else "users"
    extra = f" {'sent/s':>7} {'lag p99':>8}" if open_loop else ""
    prompts = any(s.get("prompt_tokens") for s in summary["steps"])  # a context sweep's lengths
    load = f"{load:>6}" + (f" {'prompt':>7}" if prompts else "")
    print(f"\n{'step':>4} {load} {'req/s':>7} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'TPOT p50':>9} {'KV use':>7} {'running':>8} {'waiting':>8} {'preempt':>8}"
          f"{extra}  verdict")  # fmt: skip
    for s in summary["steps"]:
        srv = s.get("server") or {}
        kv = (srv.get("kv_cache_usage_ratio") or {}).get("mean")
        run = (srv.get("requests_running") or {}).get("mean")
        wait = (srv.get("requests_waiting") or {}).get("mean")
        pre = (srv.get("preemptions") or {}).get("increase")
        level = f"{s['target_rate_rps']:g}" if open_loop else str(s["concurrency"])
        level = f"{level:>6}" + (f" {s.get('prompt_tokens') or '-':>7}" if prompts else "")
        more = ""
        if open_loop:
            lag = (s.get("client") or {}).get("send_lag_ms_p99")
            more = f" {_fmt(s.get('achieved_rate_rps'), 2):>7} {_fmt(lag):>8}"
        print(
            f"{s['index']:>4} {level} {_fmt(s['requests_per_s'], 2):>7} "
            f"{_fmt(s['output_tokens_per_s']):>10} "
            f"{_fmt(s['ttft_ms']['p50']):>9} {_fmt(s['ttft_ms']['p99']):>9} {_fmt(s['tpot_ms']['p50']):>9} "
            f"{_fmt(kv, 3):>7} {_fmt(run):>8} {_fmt(wait):>8} {_fmt(pre, 0):>8}{more}  {verdict_label(s)}"
        )


def print_findings(summary: dict[str, Any]) -> None:
    print("\n" + knee_sentence(summary))  # the report's headline, word for word
    # The report's warnings too: steps whose load was not the one asked for, or still drifting.
    for line in search_lines(summary) + flag_warnings(summary.get("steps") or []) + fit_lines(summary):
        print(line)
    if (line := one_length_line(summary)) is not None:
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check(args)
        if args.host is not None:
            _wait_ready(args.host, args.wait_ready)
            _reach(args.host)
    except SweepError as exc:
        print(f"tokenload sweep: {exc}", file=sys.stderr)
        return 2
    try:
        run_dir = make_run_dir(args.out, "--out")
    except ValueError as exc:
        print(f"tokenload sweep: {exc}", file=sys.stderr)
        return 2
    sim: ServerProcess | None = None
    host = args.host
    command = ""  # the emulator's, when the sweep starts it
    if host is None:
        sim = ServerProcess(
            [
                "-m",
                "tokenload.sim",
                "--port",
                "0",
                "--trace",
                str(run_dir / "server_trace.jsonl"),
                *args.sim_args.split(),
            ],
            log_path=run_dir / "sim.log",
        )
        try:
            host = sim.start()
        except RuntimeError as exc:
            print(
                f"tokenload sweep: --sim-args: the emulator did not start: {str(exc).splitlines()[-1]}",
                file=sys.stderr,
            )
            return 2
        command = " ".join(["tokenload sim", *args.sim_args.split()])
        print(f"target: the built-in emulator ({command}) at {host}", flush=True)
        try:
            _wait_ready(host, args.wait_ready)
        except SweepError as exc:
            sim.stop()
            print(f"tokenload sweep: {exc}", file=sys.stderr)
            return 2
        if not args.metrics_url and not args.metrics_discover and not args.prometheus_url:
            # Several replicas behind the emulator's router: scrape each one's /metrics, as a
            # fleet behind a gateway is scraped (the router exports none).
            args.metrics_url = _sim_replica_metrics(host)
        # No GPU peaks from the emulator's own profile: the analysis would then divide the
        # emulator's FLOP/byte counters by the peaks they were computed from (the emulator
        # confirming itself). Peaks are the user's to give (--gpu-peaks), as for a real server.
    t0 = time.monotonic()
    try:
        rc = _run_locust(args, host, run_dir, command)
    finally:
        if sim is not None:
            sim.stop()
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        # The Locust process wrote the report at its end (every run does); rebuilt only if it
        # could not. (The writer's import, pandas, costs 0.6 s: only then.)
        report_html: Path | None = run_dir / "report.html"
        if not report_html.exists():
            from tokenload.report.rundir import ReportError
            from tokenload.report.writer import write_reports

            try:
                report_html = write_reports(run_dir).report_html
            except (ReportError, OSError, ValueError) as exc:  # the measured data stays in the run directory
                report_html = None
                print(f"tokenload sweep: the report could not be written: {exc}", file=sys.stderr)
        summary = json.loads(summary_path.read_text())
        print_steps(summary)
        print_findings(summary)
        if report_html is not None:
            print(f"\nreport: {report_html}")
    print(f"\nrun directory: {run_dir} ({time.monotonic() - t0:.0f} s)")
    if not summary_path.exists():
        # A run that ended before its end (a workload the server refused, no worker) wrote no
        # summary: nothing was measured, whatever Locust's own exit status.
        print("tokenload sweep: the run ended before it measured anything (no summary.json; the "
              "reason is logged above)", file=sys.stderr)  # fmt: skip
        return rc or 2
    if not any(requests_ended(step) for step in summary["steps"]):
        # Its first step began, and its workers were gone before a request ended (the same
        # workload, with the worker lost a moment later): no more measured than above.
        print("tokenload sweep: the run ended before it measured anything (no request ended in "
              "any step; the reason is logged above)", file=sys.stderr)  # fmt: skip
        return rc or 2
    return rc


if __name__ == "__main__":
    sys.exit(main())
