"""Start a built-in target (mock or emulator) as a child process and learn its URL."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["ServerProcess"]

_LISTEN = re.compile(rb"listening on (http://\S+)")


class ServerProcess:
    """``with ServerProcess(["-m", "tokenload.mock", "--port", "0"]) as srv: srv.url``.

    The child prints ``... listening on http://HOST:PORT`` once it accepts connections; we wait for
    that line rather than polling the port. Only this child is ever signalled, by its PID."""

    def __init__(
        self, args: list[str], *, log_path: Path | None = None, startup_timeout_s: float = 30.0
    ) -> None:
        self.args = [sys.executable, *args]
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout_s
        seen = b""
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            seen += line
            m = _LISTEN.search(line)
            if m:
                self.url = m.group(1).decode()
                self._drain()
                return self.url
        self.stop()
        raise RuntimeError(
            f"server did not start: {' '.join(self.args)}\n{seen.decode(errors='replace')[-2000:]}"
        )

    def _drain(self) -> None:
        """Keep reading the child's output so it never blocks on a full pipe."""
        import threading

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            sink = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115
            try:
                for line in self.proc.stdout:
                    if sink:
                        sink.write(line)
                        sink.flush()
            finally:
                if sink:
                    sink.close()

        threading.Thread(target=pump, daemon=True).start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
