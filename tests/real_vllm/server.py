"""A real vLLM server (the CPU build in ``.venv-vllm``) as a child process on loopback.

vLLM's API server spawns an engine-core process and a model worker; the server is started in a
session of its own so that stopping it signals exactly that process group (the one we created),
never anything found by name. Given ``cpus``, the server and its children run on those CPUs only:
vLLM's engine core and worker busy-poll their queues, and on a two-core machine a client sharing a
core with them was seen reading whole streams in one burst (TPOT 0, event-loop lag over 1 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MODEL_NAME", "ServerConfig", "VllmServer", "post_json", "vllm_python", "vllm_venv"]

ROOT = Path(__file__).resolve().parents[2]
MODEL_NAME = "tiny"
#: Seconds: a cold start imports torch and vLLM in three processes (about 30 s on 2 cores).
STARTUP_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 30.0
# Variables of the test run that must not reach the server: VLLM_CPU_KVCACHE_SPACE would override
# --kv-cache-memory-bytes; PYTHONPATH would put this repository on vLLM's import path.
_DROP_ENV = ("VLLM_CPU_KVCACHE_SPACE", "PYTHONPATH", "VIRTUAL_ENV")


def vllm_venv() -> Path:
    """Where ``make vllm-cpu`` installs vLLM (``TOKENLOAD_VLLM_VENV`` points elsewhere)."""
    return Path(os.environ.get("TOKENLOAD_VLLM_VENV", ROOT / ".venv-vllm"))


def vllm_python() -> Path | None:
    """The venv's python once ``make vllm-cpu`` finished (its stamp), else None."""
    venv = vllm_venv()
    python = venv / "bin" / "python"
    return python if (venv / ".installed").exists() and python.exists() else None


@dataclass(frozen=True)
class ServerConfig:
    """One engine configuration: the knobs the saturation scenarios turn."""

    kv_cache_bytes: int
    max_model_len: int = 2048
    max_num_seqs: int | None = None
    extra: tuple[str, ...] = field(default=())

    def args(self) -> list[str]:
        out = ["--max-model-len", str(self.max_model_len)]
        out += ["--kv-cache-memory-bytes", str(self.kv_cache_bytes)]
        if self.max_num_seqs is not None:
            out += ["--max-num-seqs", str(self.max_num_seqs)]
        return out + list(self.extra)


def build_tiny_model(python: Path, out: Path, timeout_s: float = 300.0) -> None:
    """Write the tier's tiny model (tests/real_vllm/model.py) to ``out`` with vLLM's Python."""
    out.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).resolve().parent / "model.py"
    proc = subprocess.run(
        [str(python), str(script), str(out)], capture_output=True, text=True, timeout=timeout_s
    )
    if proc.returncode:
        raise RuntimeError(f"building the tiny model failed: {proc.stderr[-2000:]}")


def post_json(url: str, path: str, body: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
    """POST ``body`` as JSON; the answer's JSON (a streamed answer is read to its end, not parsed)."""
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        data = r.read()
    return {} if body.get("stream") else json.loads(data)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """``python -m vllm.entrypoints.openai.api_server`` serving ``model_dir`` as ``tiny``."""

    def __init__(
        self,
        python: Path,
        model_dir: Path,
        config: ServerConfig,
        log_path: Path,
        cpus: set[int] | None = None,
    ) -> None:
        self.python = python
        self.model_dir = model_dir
        self.config = config
        self.log_path = log_path
        self.cpus = cpus
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(self.port), "--enforce-eager",
            *self.config.args(),
        ]  # fmt: skip

    def start(self) -> str:
        env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            VLLM_HOST_IP="127.0.0.1",
            PYTHONUNBUFFERED="1",
        )
        if self.cpus:
            # The model worker's OpenMP threads on the server's CPUs, none held back for the API
            # server (vLLM's default reserves one, which would be the client's).
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in sorted(self.cpus))
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.log_path.parent,
                start_new_session=True,
            )
        if self.cpus:
            # Before it spawns anything (imports take seconds): its children inherit the mask.
            os.sched_setaffinity(self.proc.pid, self.cpus)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                raise RuntimeError(f"vLLM exited with {code} while starting:\n{self.log_tail()}")
            if self._healthy():
                self._warm_up()
                return
            time.sleep(0.5)
        raise RuntimeError(f"vLLM did not become healthy in {STARTUP_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def _warm_up(self) -> None:
        """One 16-token request before any test's. On AMX CPUs vLLM 0.32's worker dies with SIGILL
        (exit -4) when its first forward pass has 4 tokens or fewer; a longer first pass goes through
        oneDNN, which asks the kernel for the AMX tile state, after which any length works."""
        body = {"model": MODEL_NAME, "prompt": list(range(5, 21)), "max_tokens": 2, "ignore_eos": True}
        try:
            post_json(self.url, "/v1/completions", body, timeout_s=60)
        except (OSError, urllib.error.URLError) as exc:
            raise RuntimeError(f"vLLM's warm-up request failed: {exc}\n{self.log_tail()}") from None

    def log_tail(self, n_chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the server's own process group (vLLM shuts its engine down), then SIGKILL."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(proc.pid):
                return
            time.sleep(1.0)  # the engine's children outlive the leader by a moment
            if not _group_alive(proc.pid):
                return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
