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


def run_sweep(out: Path, args: list[str], cpus: set[int] | None = None) -> tuple[dict, float]:
    """One ``tokenload sweep --out OUT ARGS`` (on ``cpus`` only, its workers too, when given):
    its summary.json and its wall time (s)."""
    import time

    cmd = [sys.executable, "-m", "tokenload", "sweep", "--out", str(out), *args]
    t0 = time.monotonic()
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800, preexec_fn=pin)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads((out / "summary.json").read_text()), wall


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


RESULTS = ROOT / "bench" / "RESULTS.md"


def write_results_section(name: str, body: str) -> None:
    """Replace (or append) the section of bench/RESULTS.md between ``<!-- name:begin -->`` and
    ``<!-- name:end -->``: each bench script owns one section and leaves the others alone."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    md = f"{begin}\n{body.strip()}\n{end}"
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + md + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + md + "\n"
    RESULTS.write_text(text)


def machine() -> str:
    """One line: cores, CPU model, Python, date."""
    import datetime
    import platform

    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )  # fmt: skip
    return (
        f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, "
        f"{datetime.date.today().isoformat()}"
    )


def start_target(args: list[str]) -> ServerProcess:
    """A target process (``-m tokenload.mock ...`` or ``-m tokenload.sim ...``) pinned to SERVER_CPU."""
    srv = ServerProcess(args)
    srv.start()
    assert srv.proc is not None
    os.sched_setaffinity(srv.proc.pid, {SERVER_CPU})
    return srv


def start_locust(
    host: str, run_dir: Path, users: int, run_time: str, *args: str, headless: bool = True
) -> subprocess.Popen:
    """A Locust process pinned to CLIENT_CPU: headless without a server scrape, or (``headless=
    False``) with the web UI started at once (pass ``--web-port`` and ``--metrics-url`` in args)."""
    mode = (
        ["--headless", "--only-summary", "--no-server-metrics"]
        if headless
        else ["--autostart", "--autoquit", "0", "--web-host", "127.0.0.1"]
    )
    cmd = [
        str(BIN / "locust"), "-f", str(ROOT / "locustfiles/completions.py"), "--host", host, *mode,
        "-u", str(users), "-r", str(max(users, 1)), "-t", run_time, "--stop-timeout", "60",
        "--run-dir", str(run_dir), "--loglevel", "WARNING", *args,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, {CLIENT_CPU}),
    )
