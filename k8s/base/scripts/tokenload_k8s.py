"""Container entry points for tokenload's Kubernetes manifests (mounted from a ConfigMap).

    python tokenload_k8s.py master-headless   # Locust master, headless; prints its result at exit
    python tokenload_k8s.py master-web        # Locust master with the web UI, started by hand
    python tokenload_k8s.py worker            # Locust worker
    python tokenload_k8s.py wait-target       # init container: wait for $LOCUST_HOST's /health
    python tokenload_k8s.py wait-tcp HOST:PORT  # init container: wait until HOST:PORT accepts

Locust reads its own options from ``LOCUST_*`` variables and tokenload's from ``TOKENLOAD_*``
variables (the ``tokenload-run`` ConfigMap; every option has one, listed in k8s/README.md). This
script drops the empty ones first, so that an empty variable leaves tokenload's default, and
adds what only the pod knows: the run directory. (The replicas behind a headless Service,
``TOKENLOAD_METRICS_DISCOVER``, are an option: tokenload looks them up again during the run.)
The API key is never a flag: the pod gets it from a Secret, in the variable ``--api-key-env``
names.

Standard library only: it runs in the tokenload image before anything else is known to work.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def log(message: str) -> None:
    print(f"tokenload-k8s: {message}", file=sys.stderr, flush=True)


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, "").strip() or default


def child_env() -> dict[str, str]:
    """The environment for Locust: without empty ``TOKENLOAD_*`` variables (empty = default)."""
    return {k: v for k, v in os.environ.items() if not (k.startswith("TOKENLOAD_") and not v.strip())}


def run_dir() -> Path:
    """``$TOKENLOAD_RESULTS_DIR/$TOKENLOAD_RUN_NAME``; the run name defaults to the pod's name."""
    name = env("TOKENLOAD_RUN_NAME") or env("HOSTNAME") or "run"
    return Path(env("TOKENLOAD_RESULTS_DIR", "/results")) / name


def locust_argv(role: str, directory: Path) -> list[str]:
    """The master's command line; the options come from the LOCUST_* and TOKENLOAD_* variables
    (TOKENLOAD_METRICS_DISCOVER too: tokenload looks the replicas up itself, during the run)."""
    argv = ["locust", "--master", "--run-dir", str(directory), "--csv", str(directory / "locust")]
    if role == "master-headless":
        # --headless, not --autostart: a headless master sends its workers "quit" when the run ends
        # (Locust 2.47's autostart master forgets stopped workers, which then wait 60 s to exit).
        argv += ["--headless", "--html", str(directory / "report.html")]
    argv += shlex.split(env("TOKENLOAD_EXTRA_ARGS"))
    return argv


def compact_json(path: Path) -> str | None:
    try:
        return json.dumps(json.loads(path.read_text()), separators=(",", ":"), sort_keys=False)
    except (OSError, ValueError):
        return None


def master(role: str) -> int:
    directory = run_dir()
    directory.mkdir(parents=True, exist_ok=True)
    argv = locust_argv(role, directory)
    log("run directory " + str(directory))
    log("exec " + shlex.join(argv))
    if role == "master-web":
        sys.stdout.flush()
        os.execvpe(argv[0], argv, child_env())

    proc = subprocess.Popen(argv, env=child_env())

    def forward(signum: int, _frame: Any) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)  # Locust writes its results on SIGTERM
        else:
            raise SystemExit(128 + signum)  # already done: do not hold on

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    rc = proc.wait()
    hold_s = float(env("TOKENLOAD_HOLD_S", "0"))
    if hold_s > 0:
        log(f"holding {hold_s:g} s: kubectl cp {env('HOSTNAME', '<pod>')}:{directory} ./results")
    result = directory / env("TOKENLOAD_RESULT_FILE", "llm_stats.json")
    line = compact_json(result)
    if line is None:
        log(f"no readable {result} (locust exited {rc})")
        rc = rc or 1
    else:
        print(line, flush=True)  # the last line of the log: kubectl logs job/tokenload-master --tail=1
    if hold_s > 0:
        time.sleep(hold_s)
    return rc


def wait_http(url: str, timeout_s: float, interval_s: float = 2.0) -> int:
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    log(f"{url} is ready")
                    return 0
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            log(f"{url} not ready after {timeout_s:g} s: {last}")
            return 1
        time.sleep(interval_s)


def wait_tcp(hostport: str, timeout_s: float, interval_s: float = 2.0) -> int:
    host, _, port = hostport.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5):
                log(f"{hostport} accepts connections")
                return 0
        except OSError as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            log(f"{hostport} not reachable after {timeout_s:g} s: {last}")
            return 1
        time.sleep(interval_s)


def main(argv: Sequence[str]) -> int:
    command = argv[0] if argv else ""
    if command in ("master-headless", "master-web"):
        return master(command)
    if command == "worker":
        sys.stdout.flush()
        os.execvpe("locust", ["locust", "--worker"], child_env())
    if command == "wait-target":
        timeout_s = float(env("TOKENLOAD_WAIT_TARGET_S", "300"))
        if timeout_s <= 0:
            return 0
        url = env("LOCUST_HOST").rstrip("/") + env("TOKENLOAD_WAIT_TARGET_PATH", "/health")
        return wait_http(url, timeout_s)
    if command == "wait-tcp" and len(argv) == 2:
        return wait_tcp(argv[1], float(env("TOKENLOAD_WAIT_MASTER_S", "1200")))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
