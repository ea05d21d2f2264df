"""Real Locust masters and workers, and the emulator, as separate processes for the distributed
tests: each optionally started under a command prefix (``ip netns exec NAME``), each signalled
only by its own PID, each wait bounded."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import BIN, ROOT

LOCUSTFILES = f"{ROOT / 'locustfiles/completions.py'},{ROOT / 'locustfiles/staircase.py'}"
_LISTEN = re.compile(r"listening on (http://\S+)")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    """One child process whose output goes to a file (never a pipe that could fill up)."""

    name: str
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """Wait (bounded) until ``pattern`` shows in the output; fail with the output's tail."""
        deadline = time.monotonic() + timeout_s
        rx = re.compile(pattern)
        while time.monotonic() < deadline:
            if m := rx.search(self.text()):
                return m
            if self.popen.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: no {pattern!r} within {timeout_s} s:\n{self.text()[-3000:]}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=10)


@dataclass
class Cluster:
    """The processes of one test; :meth:`close` kills whatever is still running."""

    tmp: Path
    prefix: Callable[[str], list[str]] = lambda _host: []
    procs: list[Proc] = field(default_factory=list)

    def spawn(self, name: str, where: str, args: list[str], cwd: Path = ROOT) -> Proc:
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as fh:
            popen = subprocess.Popen(
                [*self.prefix(where), *args], cwd=cwd, stdout=fh, stderr=subprocess.STDOUT
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def emulator(self, where: str = "", bind: str = "127.0.0.1", *args: str) -> tuple[Proc, str, Path]:
        """The emulator (``--port 0`` unless ``args`` name one), its URL and its trace file."""
        trace = self.tmp / "sim_trace.jsonl"
        proc = self.spawn(
            "emulator", where,
            [sys.executable, "-u", "-m", "tokenload.sim", "--host", bind, "--port", "0",
             "--trace", str(trace), *args],
        )  # fmt: skip
        url = proc.wait_for(_LISTEN.pattern, 60).group(1)
        return proc, url, trace

    def master(
        self,
        host: str,
        port: int,
        workers: int,
        *args: str,
        where: str = "",
        bind: str = "127.0.0.1",
        cwd: Path = ROOT,
    ) -> Proc:
        return self.spawn(
            "master", where,
            [str(BIN / "locust"), "-f", LOCUSTFILES, "--master", "--headless", "--host", host,
             "--master-bind-host", bind, "--master-bind-port", str(port), "--expect-workers", str(workers),
             "--run-dir", str(self.tmp / "run"), "--stop-timeout", "10", *args],
            cwd=cwd,
        )  # fmt: skip

    def worker(self, i: int, master_host: str, port: int, where: str = "", cwd: Path = ROOT) -> Proc:
        return self.spawn(
            f"worker{i}", where,
            [str(BIN / "locust"), "-f", LOCUSTFILES, "--worker", "--master-host", master_host,
             "--master-port", str(port)],
            cwd=cwd,
        )  # fmt: skip

    def close(self) -> None:
        for p in reversed(self.procs):
            p.stop()


def wait_exit(proc: Proc, timeout_s: float) -> int:
    try:
        return proc.popen.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"{proc.name} still running after {timeout_s} s:\n{proc.text()[-3000:]}"
        ) from None


def read_trace(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def worker_name(proc: Proc) -> str:
    """The name a worker's records carry (``w<index>``), from its start-up log line."""
    return proc.wait_for(r"tokenload: worker (w\d+) \(", 60).group(1)
