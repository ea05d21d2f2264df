"""What one tokenload worker process costs and how true its clock is.

Prints one JSON object:

* ``throughput``: streamed tokens/s one Locust process (the client, pinned to one core) sustains
  against an as-fast-as-possible local stream (the mock, pinned to the other core), and the
  client's CPU seconds per 1,000 tokens, counted at the server over a steady window;
* ``accuracy``: at 1, 64 and 256 concurrent streams against a mock with TTFT 50 ms and a token
  every 10 ms, the client's error against the server's own write times (joined per request on
  the response id; CLOCK_MONOTONIC is shared by processes on one host): TTFT error, per-request
  ITL median error and end-of-stream error, at p50 and p99, plus the client's CPU share.

Run: ``.venv/bin/python bench/client_overhead.py [--quick]``. Times are medians and ratios of
one machine; the machines are shared, so compare runs side by side, not across days.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from _harness import CLIENT_CPU, CPUS, SERVER_CPU, get_json, pct, rounded, start_locust, start_target


def _mock(args: list[str], trace: Path):
    return start_target(["-m", "tokenload.mock", "--port", "0", "--trace", str(trace), *args])


def _locust(host: str, run_dir: Path, users: int, run_time: str, output_tokens: int, *extra: str, **kw):
    lengths = ("--output-tokens", str(output_tokens), "--prompt-tokens", "32")
    return start_locust(host, run_dir, users, run_time, *lengths, *extra, **kw)


def _mock_stats(url: str) -> dict:
    return get_json(url + "/mock/stats")


def throughput(users: int, seconds: float, tmp: Path) -> dict:
    srv = _mock(["--ttft-ms", "0", "--itl-ms", "0", "--tokens", "512"], tmp / "tp_trace.jsonl")
    try:
        proc = _locust(srv.url, tmp / "tp_run", users, f"{int(seconds + 6)}s", 512)
        ps = psutil.Process(proc.pid)
        server_ps = psutil.Process(srv.proc.pid)
        time.sleep(3.0)  # imports, spawning, first streams: outside the window
        c0, s0, n0, t0 = (
            ps.cpu_times(),
            server_ps.cpu_times(),
            _mock_stats(srv.url)["tokens_sent"],
            time.perf_counter(),
        )
        time.sleep(seconds)
        c1, s1, n1, t1 = (
            ps.cpu_times(),
            server_ps.cpu_times(),
            _mock_stats(srv.url)["tokens_sent"],
            time.perf_counter(),
        )
        proc.wait(timeout=120)
    finally:
        srv.stop()
    tokens = n1 - n0
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    server_cpu = (s1.user + s1.system) - (s0.user + s0.system)
    return {
        "concurrent_streams": users,
        "window_s": round(t1 - t0, 2),
        "tokens_per_s": round(tokens / (t1 - t0)),
        "client_cpu_share": round(cpu / (t1 - t0), 3),
        "client_cpu_ms_per_1000_tokens": round(cpu / tokens * 1e6, 2) if tokens else None,
        "server_cpu_share": round(server_cpu / (t1 - t0), 3),
    }


def accuracy(users: int, seconds: float, tmp: Path, everything_on: bool = False) -> dict:
    """TTFT/ITL error against the mock's writes. ``everything_on``: the web UI runs with its LLM
    tab polled every second (as an open page does) and the scraper reads an emulator's /metrics
    every second (the emulator on the mock's core), besides the records writer."""
    tag = f"{users}{'_all' if everything_on else ''}"
    trace = tmp / f"acc{tag}_trace.jsonl"
    run_dir = tmp / f"acc{tag}_run"
    srv = _mock(["--ttft-ms", "50", "--itl-ms", "10", "--tokens", "128"], trace)
    sim = start_target(["-m", "tokenload.sim", "--port", "0"]) if everything_on else None
    page = None
    try:
        if sim is not None:
            port = _free_port()
            page = f"http://127.0.0.1:{port}/tokenload/api/series"
            extra = ("--web-port", str(port), "--metrics-url", sim.url + "/metrics")
            proc = _locust(srv.url, run_dir, users, f"{int(seconds)}s", 128, *extra, headless=False)
        else:
            proc = _locust(srv.url, run_dir, users, f"{int(seconds)}s", 128)
        ps = psutil.Process(proc.pid)
        cpu_share, polls = [], 0
        while proc.poll() is None:
            cpu_share.append(ps.cpu_percent(interval=0.5) / 100.0)
            if page is not None:
                try:
                    get_json(page)
                    polls += 1
                except OSError:
                    pass  # not up yet, or gone
    except psutil.NoSuchProcess:
        pass
    finally:
        proc.wait(timeout=120)
        srv.stop()
        if sim is not None:
            sim.stop()
    traces = {f"cmpl-mock{t['n']}": t for t in map(json.loads, trace.read_text().splitlines())}
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    ok = [r for r in records if r["status"] == "ok" and r["response_id"] in traces]
    ttft_err, itl_err, end_err = [], [], []
    for r in ok:
        t = traces[r["response_id"]]
        ttft_err.append((r["start_monotonic_s"] + r["ttft_ms"] / 1000 - t["writes"][0]) * 1000)
        gaps = [(b - a) * 1000 for a, b in zip(t["writes"], t["writes"][1:], strict=False)]
        itl_err.append(r["itl_p50_ms"] - statistics.median(gaps))
        end_err.append((r["start_monotonic_s"] + r["e2e_ms"] / 1000 - t["end"]) * 1000)
    return {
        "concurrent_streams": users,
        "requests": len(ok),
        "failed": sum(r["status"] == "failed" for r in records),
        "ttft_error_ms": {"p50": rounded(pct(ttft_err, 0.5)), "p99": rounded(pct(ttft_err, 0.99))},
        "itl_p50_error_ms": {"p50": rounded(pct(itl_err, 0.5)), "p99": rounded(pct(itl_err, 0.99))},
        "end_error_ms": {"p50": rounded(pct(end_err, 0.5)), "p99": rounded(pct(end_err, 0.99))},
        "client_cpu_share_max": rounded(max(cpu_share[1:] or [0.0])),
        # What the client knew of its own error: first tokens read behind later ones, the flags.
        "coalesced_first_share": rounded(sum(bool(r.get("first_read_coalesced")) for r in ok) / len(ok))
        if ok
        else None,
        "ttft_error_ms_not_coalesced_p99": rounded(
            pct([e for e, r in zip(ttft_err, ok, strict=True) if not r.get("first_read_coalesced")], 0.99)
        ),
        "flags": _flags(run_dir),
        "bound_by": _flags(run_dir, "bound_by"),
        **({"live_page_polls": polls, "scrapes": _scrapes(run_dir)} if everything_on else {}),
    }


def _flags(run_dir: Path, key: str = "flags") -> list[str] | None:
    """The steps' flags (or, with ``bound_by``, the client limits behind client_bound), together."""
    try:
        steps = json.loads((run_dir / "summary.json").read_text())["steps"]
    except (OSError, ValueError, KeyError):
        return None
    return sorted({f for s in steps for f in (s["flags"] if key == "flags" else s["client"][key])})


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrapes(run_dir: Path) -> int | None:
    """How many times the scraper read the emulator's /metrics (from the run's server series)."""
    path = run_dir / "server_metrics.jsonl"
    return sum(bool(json.loads(line).get("ok")) for line in path.open()) if path.exists() else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="shorter windows (a smoke run)")
    args = p.parse_args()
    window = 4.0 if args.quick else 10.0
    acc_time = 6.0 if args.quick else 12.0
    with tempfile.TemporaryDirectory(prefix="tokenload-bench-") as d:
        tmp = Path(d)
        result = {
            "machine": {"cpus": len(CPUS), "client_cpu": CLIENT_CPU, "server_cpu": SERVER_CPU},
            "throughput": [throughput(u, window, tmp) for u in (64, 256)],
            "accuracy": [accuracy(u, acc_time, tmp) for u in (1, 64, 256)],
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
