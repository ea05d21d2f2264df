"""Fixtures of the real-vLLM tier: the vLLM venv (skip, or fail under CI), the tiny model (built
once per session) and the servers, one alive at a time (two cores cannot host more)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real_vllm.model import KV_BYTES_PER_TOKEN
from tests.real_vllm.server import ServerConfig, VllmServer, vllm_python, vllm_venv

HERE = Path(__file__).resolve().parent
#: vLLM's CPU build pages the KV cache in blocks of 128 tokens (64 KiB for the tiny model).
BLOCK_TOKENS = 128


def _blocks(n: int) -> int:
    return n * BLOCK_TOKENS * KV_BYTES_PER_TOKEN


#: The engine configurations of the tier, by name (max_model_len 2048 for all: the golden's token
#: histograms have buckets up to it).
SERVERS: dict[str, ServerConfig] = {
    # 32 MiB, 65,536 tokens: nothing but the CPU limits it. MFU counters on, so the scraper sees
    # vllm:estimated_flops_per_gpu_total move (vLLM exports zeros without the flag).
    "roomy": ServerConfig(kv_cache_bytes=_blocks(512), extra=("--enable-mfu-metrics",)),
    # 2 MiB, 32 blocks (one is vLLM's null block): two requests of 1,800 + 64 tokens (15 blocks
    # each) fit, a third waits for KV capacity.
    "tiny_kv": ServerConfig(kv_cache_bytes=_blocks(32)),
    # The roomy cache, but at most two requests in the running batch.
    "two_seqs": ServerConfig(kv_cache_bytes=_blocks(512), max_num_seqs=2),
}


@pytest.fixture(scope="session")
def vllm_bin() -> Path:
    python = vllm_python()
    if python is None:
        msg = f"vLLM is not installed in {vllm_venv()} (make vllm-cpu)"
        if os.environ.get("CI"):
            pytest.fail(msg + "; CI is set, so the real-vLLM tier must run")
        pytest.skip(msg)
    return python


@pytest.fixture(scope="session")
def tiny_model(vllm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-llama")
    proc = subprocess.run(
        [str(vllm_bin), str(HERE / "model.py"), str(out)], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return out


class ServerPool:
    """Starts the named configuration on demand and stops the one running before it.

    While it is open, the server runs on all CPUs but the last and this process (so the Locust
    clients it starts) on the last one: the client's timing needs a core of its own."""

    def __init__(self, python: Path, model_dir: Path, log_dir: Path) -> None:
        self.python, self.model_dir, self.log_dir = python, model_dir, log_dir
        self.current: tuple[str, VllmServer] | None = None
        self._own_cpus = os.sched_getaffinity(0)
        cpus = sorted(self._own_cpus)
        self._server_cpus = set(cpus[:-1]) if len(cpus) > 1 else None
        if self._server_cpus:
            os.sched_setaffinity(0, {cpus[-1]})

    def get(self, name: str) -> VllmServer:
        if self.current and self.current[0] == name:
            return self.current[1]
        self._stop_current()
        log = self.log_dir / f"vllm-{name}.log"
        server = VllmServer(self.python, self.model_dir, SERVERS[name], log, self._server_cpus)
        server.start()
        self.current = (name, server)
        return server

    def _stop_current(self) -> None:
        if self.current:
            self.current[1].stop()
            self.current = None

    def close(self) -> None:
        self._stop_current()
        os.sched_setaffinity(0, self._own_cpus)


_POOL = pytest.StashKey[ServerPool]()


@pytest.fixture(scope="session")
def vllm_servers(
    vllm_bin: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerPool]:
    pool = ServerPool(vllm_bin, tiny_model, tmp_path_factory.mktemp("vllm-logs"))
    request.config.stash[_POOL] = pool
    try:
        yield pool
    finally:
        pool.close()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the tier's last test: stop the server and give this process its CPUs back, rather
    than at the end of the whole session."""
    pool = item.config.stash.get(_POOL, None)
    if pool is not None and (nextitem is None or HERE not in Path(nextitem.path).parents):
        pool.close()


@pytest.fixture
def roomy(vllm_servers: ServerPool) -> VllmServer:
    return vllm_servers.get("roomy")
