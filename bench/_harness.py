"""Shared pieces of the bench scripts: the target on one core, Locust on the other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tokenload.serving.process import ServerProcess  # noqa: E402

BIN = Path(sys.executable).parent
CPUS = sorted(os.sched_getaffinity(0))
SERVER_CPU, CLIENT_CPU = (CPUS[0], CPUS[-1]) if len(CPUS) > 1 else (CPUS[0], CPUS[0])


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def rounded(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def start_target(args: list[str]) -> ServerProcess:
    """A target process (``-m tokenload.mock ...`` or ``-m tokenload.sim ...``) pinned to SERVER_CPU."""
    srv = ServerProcess(args)
    srv.start()
    assert srv.proc is not None
    os.sched_setaffinity(srv.proc.pid, {SERVER_CPU})
    return srv


def start_locust(host: str, run_dir: Path, users: int, run_time: str, *args: str) -> subprocess.Popen:
    """A headless Locust process pinned to CLIENT_CPU."""
    cmd = [
        str(BIN / "locust"), "-f", str(ROOT / "locustfiles/completions.py"), "--host", host, "--headless",
        "--only-summary", "-u", str(users), "-r", str(max(users, 1)), "-t", run_time, "--stop-timeout", "60",
        "--run-dir", str(run_dir), "--loglevel", "WARNING", "--no-server-metrics", *args,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, {CLIENT_CPU}),
    )
