"""Measuring one client run: its process tree's CPU over a steady window, the tokens the mock
streamed in that window, and each request's timings joined to the mock's ground-truth trace."""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from _harness import get_json as _get_json  # bench/ is on sys.path (run.py puts it there)
from _harness import pct
from _harness import rounded as _r

__all__ = ["Rec", "Window", "accuracy_stats", "load_trace", "run_window", "stop_tree"]


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_cpu_s(pid: int) -> tuple[float, int]:
    """CPU seconds of a process tree: each live process's own time plus what its reaped children
    used (so children that exit between two samples still count). Returns (seconds, processes)."""
    total, n = 0.0, 0
    for p in _tree(pid):
        try:
            c = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        total += c.user + c.system + c.children_user + c.children_system
        n += 1
    return total, n


def stop_tree(proc: subprocess.Popen, grace_s: float = 4.0) -> None:
    """SIGINT, then SIGKILL, to the processes of this tree only, each by its PID."""
    procs = _tree(proc.pid)
    for p in procs:
        try:
            p.send_signal(signal.SIGINT)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


@dataclass
class Window:
    """What one run measured: CPU of the client's tree and tokens streamed over a steady window."""

    rc: int | None = None
    killed: bool = False
    startup_s: float | None = None
    window_s: float | None = None
    cpu_s: float | None = None
    tokens: int | None = None
    processes: int = 0
    t0: float | None = None
    t1: float | None = None
    wall_s: float = 0.0
    #: Busy seconds of the client's and the server's core over the window (all processes).
    client_core_busy_s: float | None = None
    server_core_busy_s: float | None = None
    server_cpu_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        ok = self.cpu_s is not None and self.tokens and self.window_s
        return {
            "startup_s": _r(self.startup_s, 2),
            "window_s": _r(self.window_s, 2),
            "client_processes": self.processes,
            "tokens_per_s": round(self.tokens / self.window_s) if ok else None,
            "client_cpu_share": _r(self.cpu_s / self.window_s, 3) if ok else None,
            "client_cpu_ms_per_1000_tokens": _r(self.cpu_s / self.tokens * 1e6, 2) if ok else None,
            # Contention check: what else ran on the client's core (other work on the machine),
            # and how busy the mock's core was (near 1.0: the mock, not the client, may be the limit).
            "client_core_other_share": _r(max(0.0, self.client_core_busy_s - self.cpu_s) / self.window_s, 3)
            if ok and self.client_core_busy_s is not None
            else None,
            "server_core_busy_share": _r(self.server_core_busy_s / self.window_s, 3)
            if ok and self.server_core_busy_s is not None
            else None,
            "server_core_other_share": _r(
                max(0.0, self.server_core_busy_s - self.server_cpu_s) / self.window_s, 3
            )
            if ok and self.server_core_busy_s is not None and self.server_cpu_s is not None
            else None,
            "exit_code": self.rc,
            "stopped_by_harness": self.killed,
            "notes": self.notes,
        }


def _core_busy_s(cpu: int) -> float:
    t = psutil.cpu_times(percpu=True)[cpu]
    return (
        sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    )


def run_window(
    launch: Callable[[], subprocess.Popen],
    stats_url: str,
    *,
    cores: tuple[int, int],
    server_pid: int,
    settle_s: float,
    window_s: float,
    hard_timeout_s: float,
    stop_after_window: bool,
) -> Window:
    """Start the client; once the mock has streamed its first tokens and ``settle_s`` passed,
    sample the tree's CPU and the mock's token count over ``window_s`` (and how busy the
    ``cores`` = (client core, server core) were, and the mock's own CPU, ``server_pid``). Then either stop the
    client (throughput runs) or let it end by itself (bounded by ``hard_timeout_s``)."""
    w = Window()
    t_start = time.perf_counter()
    proc = launch()
    deadline = t_start + hard_timeout_s
    t_first = None
    c0 = n0 = None
    try:
        while time.perf_counter() < deadline and proc.poll() is None:
            now = time.perf_counter()
            if t_first is None:
                if _get_json(stats_url)["tokens_sent"] > 0:
                    t_first = now
                    w.startup_s = now - t_start
            elif c0 is None and now >= t_first + settle_s:
                b0 = [_core_busy_s(c) for c in cores]
                s0, _ = tree_cpu_s(server_pid)
                c0, w.processes = tree_cpu_s(proc.pid)
                n0, w.t0 = _get_json(stats_url)["tokens_sent"], time.perf_counter()
            elif c0 is not None and now >= w.t0 + window_s:
                c1, n = tree_cpu_s(proc.pid)
                n1, w.t1 = _get_json(stats_url)["tokens_sent"], time.perf_counter()
                s1, _ = tree_cpu_s(server_pid)
                b1 = [_core_busy_s(c) for c in cores]
                w.client_core_busy_s, w.server_core_busy_s = b1[0] - b0[0], b1[1] - b0[1]
                w.server_cpu_s = s1 - s0
                w.processes = max(w.processes, n)
                w.cpu_s, w.tokens, w.window_s = c1 - c0, n1 - n0, w.t1 - w.t0
                break
            time.sleep(0.1)
        if w.cpu_s is None:
            w.notes.append(
                "the client ended before a full steady window" if proc.poll() is not None else "timed out"
            )
        if stop_after_window:
            if proc.poll() is None:
                w.killed = True
                stop_tree(proc)
        else:
            try:
                proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                w.killed = True
                w.notes.append(f"killed after the {hard_timeout_s:.0f} s limit")
                stop_tree(proc)
    except BaseException:
        stop_tree(proc, grace_s=2.0)
        raise
    w.rc = proc.returncode
    w.wall_s = time.perf_counter() - t_start
    return w


@dataclass
class Rec:
    """One request as a client recorded it, on CLOCK_MONOTONIC seconds.

    ``chunks``: per-chunk receive times, when the tool exports them. ``last``: the last content
    chunk's time when only first and last are known (or first + the sum of the gaps).
    ``itl_mean_ms``/``itl_p50_ms``: the tool's own per-request ITL figures, when only those are
    exported."""

    rid: str | None
    first: float | None
    chunks: list[float] | None = None
    last: float | None = None
    itl_mean_ms: float | None = None
    itl_p50_ms: float | None = None


def load_trace(path: Path) -> dict[str, dict]:
    out = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        t = json.loads(line)
        if t.get("end") is not None and t["writes"]:
            out[f"cmpl-mock{t['n']}"] = t
    return out


def mean_in_flight(trace: dict[str, dict], t0: float | None, t1: float | None) -> float | None:
    """Mean number of requests the server held at once over [t0, t1] (finished requests only)."""
    if t0 is None or t1 is None or t1 <= t0:
        return None
    busy = sum(max(0.0, min(t["end"], t1) - max(t["arrival"], t0)) for t in trace.values())
    return busy / (t1 - t0)


def _pair(values: list[float]) -> dict:
    return {"p50": _r(pct(values, 0.5)), "p99": _r(pct(values, 0.99))}


def accuracy_stats(recs: list[Rec], trace: dict[str, dict], since: float | None = None) -> dict:
    """Errors (client minus server, ms) per request joined on the response id.

    The headline figures count the requests that reached the server at or after ``since`` (the
    steady part of the run: the first wave of N simultaneous connections is left out);
    ``ttft_error_ms_all_requests`` counts every joined request."""
    ttft_all, ttft, mean_err, med_err, chunk_err, last_err = [], [], [], [], [], []
    joined = steady = 0
    for r in recs:
        t = trace.get(r.rid) if r.rid else None
        if t is None or r.first is None:
            continue
        joined += 1
        w = t["writes"]
        ttft_all.append((r.first - w[0]) * 1000)
        if since is not None and t["arrival"] < since:
            continue
        steady += 1
        ttft.append(ttft_all[-1])
        if len(w) < 2:
            continue
        gaps = [(b - a) * 1000 for a, b in itertools.pairwise(w)]
        srv_mean, srv_med = statistics.fmean(gaps), statistics.median(gaps)
        if r.chunks is not None and len(r.chunks) == len(w):
            mine = [(b - a) * 1000 for a, b in itertools.pairwise(r.chunks)]
            mean_err.append(statistics.fmean(mine) - srv_mean)
            med_err.append(statistics.median(mine) - srv_med)
            chunk_err.extend(m - g for m, g in zip(mine, gaps, strict=True))
            last_err.append((r.chunks[-1] - w[-1]) * 1000)
            continue
        if r.last is not None:
            mean_err.append((r.last - r.first) * 1000 / (len(w) - 1) - srv_mean)
            last_err.append((r.last - w[-1]) * 1000)
        elif r.itl_mean_ms is not None:
            mean_err.append(r.itl_mean_ms - srv_mean)
        if r.itl_p50_ms is not None:
            med_err.append(r.itl_p50_ms - srv_med)
    return {
        "requests_client": len(recs),
        "requests_server": len(trace),
        "requests_joined": joined,
        "requests_steady": steady,
        "ttft_error_ms": _pair(ttft),
        "itl_request_mean_error_ms": _pair(mean_err),
        "itl_request_median_error_ms": _pair(med_err) if med_err else None,
        "itl_per_chunk_error_ms": _pair(chunk_err) if chunk_err else None,
        # The last content chunk: receive time minus the server's last write.
        "last_chunk_error_ms": _pair(last_err) if last_err else None,
        "ttft_error_ms_all_requests": _pair(ttft_all),
    }


def wall_to_monotonic_offset() -> float:
    """time.time() - time.monotonic(), from the tightest of a few paired readings."""
    best = None
    for _ in range(20):
        a = time.monotonic()
        w = time.time()
        b = time.monotonic()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) / 2)
    assert best is not None
    return best[1]


def pin(cpu: int) -> Callable[[], None]:
    return lambda: os.sched_setaffinity(0, {cpu})
