"""Does one Locust master hold a fleet? Master CPU, memory, report-to-disk latency and records
written per second with N simulated workers and 16 scraped replicas (issue #19 item 7).

For each N (``--workers 10,50,100,200``) a real tokenload master (``locust -f locustfiles/chat.py
--master --headless``, the plugin whole: merging, steps, the records file, the scraper) runs
while N simulated workers, greenlets in one other process, speak Locust's worker protocol to it
(``client_ready``, heartbeats every second, ``spawning``/``spawning_complete``, and a ``stats``
report every 3 s carrying what a tokenload worker sends: Locust's request stats, tokenload's
mergeable histograms, step tallies, health and one record per request finished). Each simulated
worker stands for ``--users-per-worker`` streams (256) finishing requests with lognormal E2E
(mean 8 s, CV 0.5: about 32 requests/s per worker); its records have the fields and sizes of a
real run's. The master scrapes ``--replicas`` (16) emulated replicas' /metrics every second: a
vLLM 0.32 page (the golden one of tests/goldens) served from ports of one process.

Measured on the master, over the steady part (after every worker spawned and ``--warmup``):
CPU (psutil, user+system / wall, in cores), peak RSS, requests.jsonl lines written per second,
and the report-to-disk latency (the first record of each report carries its send time; a tailer
reads the file every 0.1 s: resolution 0.1 s). Nothing dropped: records sent = lines written.
The simulated side runs on the other core; if it cannot send what it should (offered vs sent
is printed), the figures for that N are the master under a lighter load than asked.

Target (#19): 100 workers (25,600 streams) and 16 replicas under half a core on the master,
nothing dropped.

Run: ``.venv/bin/python bench/master_scale.py [--workers 10,50,100,200] [--duration 30]``;
``--write-results`` replaces its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import gevent

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _harness import CPUS, machine, rounded, write_results_section  # noqa: E402

from tokenload.metrics.aggregate import LLMStats, itl_histogram  # noqa: E402

GOLDEN = ROOT / "tests" / "goldens" / "vllm-0.32-cpu-metrics.txt"
BIN = Path(sys.executable).parent
REPORT_INTERVAL_S = 3.0  # Locust's WORKER_REPORT_INTERVAL
HEARTBEAT_S = 1.0
E2E_MEAN_S, E2E_CV = 8.0, 0.5
OUTPUT_TOKENS = 128


# -- the simulated side ----------------------------------------------------------------------------


def _lognormal(mean: float, cv: float, rng: random.Random) -> float:
    sigma = math.sqrt(math.log(1 + cv * cv))
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


class FakeWorker:
    """One simulated tokenload worker: Locust's protocol, tokenload's report, no requests."""

    def __init__(
        self, host: str, port: int, index: int, users: int, itl_pool: list[Any], counts: dict
    ) -> None:
        from locust import __version__
        from locust.rpc import Message, zmqrpc
        from locust.stats import RequestStats

        self.Message, self.version = Message, __version__
        self.id = f"sim-{index}_{os.getpid()}"
        self.client = zmqrpc.Client(host, port, self.id)
        self.users, self.itl_pool, self.counts = users, itl_pool, counts
        self.rng = random.Random(index)
        self.state = "ready"
        self.user_classes: dict[str, int] = {}
        self.locust_stats = RequestStats()
        self.seq = 0
        self.rate = users / E2E_MEAN_S  # requests finished per second, once running
        self.running_since: float | None = None
        self.last_report = time.time()

    def run(self) -> None:
        self.client.send(self.Message("client_ready", self.version, self.id))
        gevent.spawn(self._heartbeat)
        gevent.spawn(self._reporter)
        while True:
            msg = self.client.recv()
            if msg.type == "spawn":
                self.client.send(self.Message("spawning", None, self.id))
                self.user_classes = dict(msg.data["user_classes_count"])
                self.users = sum(self.user_classes.values())
                self.rate = self.users / E2E_MEAN_S
                self.state = "running"
                self.running_since = self.running_since or time.time()
                done = {"user_classes_count": self.user_classes, "user_count": self.users}
                self.client.send(self.Message("spawning_complete", done, self.id))
            elif msg.type in ("stop", "quit"):
                self._report()
                self.client.send(self.Message("client_stopped", None, self.id))
                self.state = "stopped"
                if msg.type == "quit":
                    return

    def _heartbeat(self) -> None:
        while self.state != "stopped":
            data = {"state": self.state, "current_cpu_usage": 5.0, "current_memory_usage": 80_000_000}
            self.client.send(self.Message("heartbeat", data, self.id))
            gevent.sleep(HEARTBEAT_S)

    def _reporter(self) -> None:
        gevent.sleep(self.rng.uniform(0, REPORT_INTERVAL_S))  # workers' ticks are not aligned
        while self.state != "stopped":
            self._report()
            gevent.sleep(REPORT_INTERVAL_S)

    def _record(self, now: float) -> dict[str, Any]:
        self.seq += 1
        e2e = _lognormal(E2E_MEAN_S, E2E_CV, self.rng) * 1000
        ttft = min(e2e * 0.1, _lognormal(400, 0.8, self.rng))
        tpot = (e2e - ttft) / (OUTPUT_TOKENS - 1)
        return {
            "request_id": f"{self.id}-{self.seq}", "worker": self.id, "name": "/v1/chat/completions",
            "wall_start": now - e2e / 1000, "start_monotonic_s": time.monotonic() - e2e / 1000,
            "response_id": f"chatcmpl-{self.rng.getrandbits(128):032x}", "step": 0, "phase": "measure",
            "status": "ok", "failure_class": None, "http_status": 200, "ttft_ms": ttft, "tpot_ms": tpot,
            "e2e_ms": e2e, "send_lag_ms": None, "send_queued": None, "input_tokens": 512,
            "requested_input_tokens": 512, "output_tokens": OUTPUT_TOKENS,
            "requested_output_tokens": OUTPUT_TOKENS, "ignore_eos": True, "output_tokens_source": "usage",
            "token_count_diff": 0, "content_chunks": OUTPUT_TOKENS, "first_read_events": 1,
            "first_read_coalesced": False, "finish_reason": "length", "detail": "",
            "itl_count": OUTPUT_TOKENS - 1, "itl_mean_ms": tpot, "itl_p50_ms": tpot * 0.95,
            "itl_p99_ms": tpot * 2.1, "itl_max_ms": tpot * 3.0,
        }  # fmt: skip

    def _report(self) -> None:
        now = time.time()
        span, self.last_report = now - self.last_report, now
        n = 0
        if self.state == "running":
            carry = self.rate * span
            n = int(carry) + (1 if self.rng.random() < carry - int(carry) else 0)
        stats = LLMStats()
        records = []
        for _ in range(n):
            rec = self._record(now)
            stats.record(rec, self.rng.choice(self.itl_pool))
            self.locust_stats.log_request("POST", rec["name"], rec["e2e_ms"], OUTPUT_TOKENS)
            records.append(rec)
        if records:
            records[0]["bench_sent_at"] = now
        data = {
            "stats": self.locust_stats.serialize_stats(),
            "stats_total": self.locust_stats.total.get_stripped_report(),
            "errors": self.locust_stats.serialize_errors(),
            "user_classes_count": self.user_classes,
            "user_count": self.users,
            "tokenload": {
                "stats": stats.to_dict(),
                "records": records,
                # As in a staircase: the step's own tallies too (the same histograms again).
                "steps": {0: stats.to_dict()},
                "health": {0: (35.0, [self.rng.uniform(0.2, 2.0) for _ in range(3)])},
                "live": {"in_flight": self.users, "measured_in_flight": []},
            },
        }
        self.client.send(self.Message("stats", data, self.id))
        self.counts["records"] += len(records)
        self.counts["reports"] += 1
        if self.running_since is not None:
            self.counts["offered"] = self.counts.get("offered", 0.0) + (self.rate * span)


def simulated_workers(args: argparse.Namespace) -> None:
    """The ``--role workers`` process: N fake workers until the master quits them, then its counts."""
    import locust  # noqa: F401  (gevent's patching before any socket of this process)

    rng = random.Random(0)
    pool = [
        itl_histogram([(_lognormal(60, 0.5, rng), 1) for _ in range(OUTPUT_TOKENS - 1)]) for _ in range(200)
    ]
    counts: dict[str, Any] = {"records": 0, "reports": 0}
    workers = [
        FakeWorker("127.0.0.1", args.master_port, i, args.users_per_worker, pool, counts)
        for i in range(args.count)
    ]
    jobs = [gevent.spawn(w.run) for w in workers]
    gevent.joinall(jobs, timeout=args.timeout)
    Path(args.counts_file).write_text(json.dumps(counts))


def replicas(args: argparse.Namespace) -> None:
    """The ``--role replicas`` process: the golden vLLM /metrics page on ``--count`` ports."""
    import locust  # noqa: F401  (gevent's patching before any socket of this process)

    from tokenload.serving.http import HTTPServer

    page = GOLDEN.read_bytes()
    servers = []
    for _ in range(args.count):
        http = HTTPServer("127.0.0.1", 0)
        http.route("GET", "/metrics")(lambda req, conn: conn.respond(200, page, content_type="text/plain"))
        http.start()
        servers.append(http)
    print(" ".join(f"http://127.0.0.1:{s.address[1]}/metrics" for s in servers), flush=True)
    gevent.sleep(args.timeout)


# -- the measuring side -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tailer(threading.Thread):
    """Reads requests.jsonl as it grows; the time each report's first record reached the disk."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.latencies, self.stop = path, [], threading.Event()
        self.lines: list[tuple[float, int]] = []  # (time, lines so far)

    def run(self) -> None:
        pos, count, rest = 0, 0, b""
        pattern = re.compile(rb'"bench_sent_at":([0-9.]+)')
        while not self.stop.is_set():
            time.sleep(0.1)
            if not self.path.exists():
                continue
            with open(self.path, "rb") as fh:
                fh.seek(pos)
                chunk = fh.read()
            now = time.time()
            pos += len(chunk)
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            rest, data = data[cut:], data[:cut]
            count += data.count(b"\n")
            self.lines.append((now, count))
            self.latencies += [now - float(m) for m in pattern.findall(data)]


def one(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import psutil

    master_port = _free_port()
    run_dir = tmp / f"run-{n}"
    timeout = args.duration + args.warmup + 120
    other = {CPUS[0]} if len(CPUS) > 1 else set(CPUS)
    master_cpu = {CPUS[-1]}
    rep = subprocess.Popen(
        [sys.executable, __file__, "--role", "replicas", "--count", str(args.replicas),
         "--timeout", str(timeout)],
        stdout=subprocess.PIPE, text=True, preexec_fn=lambda: os.sched_setaffinity(0, other),
    )  # fmt: skip
    assert rep.stdout is not None
    urls = rep.stdout.readline().split()
    assert len(urls) == args.replicas, urls
    users = n * args.users_per_worker
    run_time = args.warmup + args.duration + 15  # + the spawn
    master = subprocess.Popen(
        [str(BIN / "locust"), "-f", str(ROOT / "locustfiles/chat.py"), "--master", "--headless",
         "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
         "--expect-workers", str(n), "--expect-workers-max-wait", "120", "-u", str(users), "-r", str(users),
         "-t", f"{run_time:.0f}s", "--host", urls[0].removesuffix("/metrics"),
         "--metrics-url", ",".join(urls), "--run-dir", str(run_dir),
         "--only-summary", "--loglevel", "WARNING", "--stop-timeout", "5", "--model", "bench"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp / f"master-{n}.log", "w"),  # noqa: SIM115
        preexec_fn=lambda: os.sched_setaffinity(0, master_cpu),
    )  # fmt: skip
    counts_file = tmp / f"counts-{n}.json"
    fleet = subprocess.Popen(
        [sys.executable, __file__, "--role", "workers", "--count", str(n), "--master-port", str(master_port),
         "--users-per-worker", str(args.users_per_worker), "--counts-file", str(counts_file),
         "--timeout", str(timeout)],
        stderr=open(tmp / f"fleet-{n}.log", "w"),  # noqa: SIM115
        preexec_fn=lambda: os.sched_setaffinity(0, other),
    )  # fmt: skip
    proc = psutil.Process(master.pid)
    tailer = Tailer(run_dir / "requests.jsonl")
    tailer.start()
    try:
        # Steady once records flow (every worker spawned), then the warm-up.
        deadline = time.monotonic() + 150
        while not tailer.lines or tailer.lines[-1][1] == 0:
            assert master.poll() is None, (tmp / f"master-{n}.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "no record reached the master"
            time.sleep(0.2)
        time.sleep(args.warmup)
        c0, t0, lines0 = proc.cpu_times(), time.time(), tailer.lines[-1][1]
        lat0 = len(tailer.latencies)
        rss = 0
        while time.time() - t0 < args.duration:
            rss = max(rss, proc.memory_info().rss)
            time.sleep(0.5)
        c1, t1, lines1 = proc.cpu_times(), time.time(), tailer.lines[-1][1]
        latencies = sorted(tailer.latencies[lat0:])
        master.wait(timeout=run_time + 60)
        fleet.wait(timeout=60)
    finally:
        tailer.stop.set()
        for p in (master, fleet, rep):
            if p.poll() is None:
                p.kill()
                p.wait()
    counts = json.loads(counts_file.read_text()) if counts_file.exists() else {}
    written = sum(1 for _ in open(run_dir / "requests.jsonl", "rb"))  # noqa: SIM115
    scrapes = [json.loads(line) for line in open(run_dir / "server_metrics.jsonl", "rb")]  # noqa: SIM115
    in_window = [x for x in scrapes if t0 <= x["t"] <= t1]
    summary = json.loads((run_dir / "llm_stats.json").read_text())
    wall = t1 - t0

    def q(p: float) -> float | None:
        return rounded(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 3) if latencies else None

    return {
        "workers": n,
        "streams": users,
        "replicas": args.replicas,
        "master_cpu_cores": rounded((c1.user + c1.system - c0.user - c0.system) / wall, 3),
        "master_rss_mb": rounded(rss / 2**20, 1),
        "records_per_s": rounded((lines1 - lines0) / wall, 1),
        "records_offered_per_s": rounded(n * args.users_per_worker / E2E_MEAN_S, 1),
        "report_to_disk_s": {"p50": q(0.5), "p99": q(0.99), "max": q(1.0), "n": len(latencies)},
        "scrapes_per_s": rounded(len(in_window) / wall, 1),
        "scrapes_ok_share": rounded(sum(x["ok"] for x in in_window) / len(in_window), 3)
        if in_window
        else None,
        "records_sent": counts.get("records"),
        "records_written": written,
        "dropped": None if not counts else counts["records"] - written,
        "requests_in_llm_stats": next(
            (r["requests"] for r in summary.get("rows", []) if r["name"] == "Aggregated"), None
        ),
        "scrape_failures": {
            u: f for u, f in ((summary.get("server") or {}).get("scrape_failures") or {}).items() if f
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=("bench", "workers", "replicas"), default="bench")
    ap.add_argument("--workers", default="10,50,100,200")
    ap.add_argument("--users-per-worker", type=int, default=256)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=6.0)
    ap.add_argument("--write-results", action="store_true")
    # the child processes' own options
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--master-port", type=int, default=0)
    ap.add_argument("--counts-file", default="")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    if args.role == "workers":
        return simulated_workers(args)
    if args.role == "replicas":
        return replicas(args)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="tokenload-master-scale-") as tmp:
        rows = [one(int(n), args, Path(tmp)) for n in args.workers.split(",")]
    out = {"machine": machine(), "seconds": round(time.time() - started), "runs": rows}
    print(json.dumps(out, indent=2))
    if args.write_results:
        write_results_section("master_scale", _markdown(out, args))


def _markdown(out: dict[str, Any], args: argparse.Namespace) -> str:
    cmd = f"python bench/master_scale.py --workers {args.workers} --duration {args.duration:g}"
    head = [
        "## One master, a fleet of simulated workers (issue #19)",
        "",
        f"`{cmd}` on {out['machine']}, {out['seconds']} s. A real tokenload master (one core) with N",
        "simulated workers (one process on the other core, Locust's protocol, tokenload's reports:",
        f"{args.users_per_worker} streams each, lognormal E2E mean {E2E_MEAN_S:g} s CV {E2E_CV:g}, one",
        f"record per request) and {args.replicas} scraped replicas at 1 s. Over {args.duration:g} s",
        "after every worker spawned. Target: 100 workers and 16 replicas under 0.5 core, nothing dropped.",
        "",
        "| workers | streams | master CPU (cores) | RSS MB | records/s written | offered | "
        "report-to-disk p50 / p99 s | scrapes/s (ok) | sent | written | dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in out["runs"]:
        lat = r["report_to_disk_s"]
        head.append(
            f"| {r['workers']} | {r['streams']} | {r['master_cpu_cores']} | {r['master_rss_mb']} | "
            f"{r['records_per_s']} | {r['records_offered_per_s']} | {lat['p50']} / {lat['p99']} | "
            f"{r['scrapes_per_s']} ({r['scrapes_ok_share']}) | "
            f"{r['records_sent']} | {r['records_written']} | {r['dropped']} |"
        )
    at100 = next((r for r in out["runs"] if r["workers"] == 100), None)
    if at100 is not None:
        met = at100["master_cpu_cores"] < 0.5 and at100["dropped"] == 0
        head += [
            "",
            f"Target met: **{'yes' if met else 'no'}** (100 workers: {at100['master_cpu_cores']} cores, "
            f"{at100['dropped']} records dropped). The report-to-disk latency is read every 0.1 s (its "
            "resolution); the master's CPU covers merging the reports (Locust's and tokenload's), the step "
            "tallies, writing requests.jsonl and scraping, not the web UI (headless) or real workers' "
            "requests. The simulated side sent what it offered at every N (records/s written vs offered).",
        ]
    return "\n".join(head)


if __name__ == "__main__":
    main()
