"""The headless Job's pods on loopback: the master and a worker started by the entry script as the
manifests start them, their options from ``k8s/base/run.env`` (the ``tokenload-run`` ConfigMap,
empty variables included), against the emulator; only the values a pod could not hold here (the
target, the locustfile's path, ports, a short run) are overridden."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, read_records
from tests.k8s import manifests
from tests.k8s.manifests import K8S
from tokenload.serving.process import ServerProcess

SCRIPT = K8S / "base" / "scripts" / "tokenload_k8s.py"


def config_map() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (K8S / "base" / "run.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            out[name] = value
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pod_env(
    tmp_path: Path, run_config: dict[str, str], host: str, port: int, workers: int = 1
) -> dict[str, str]:
    """A pod's environment: the run's ConfigMap, then what a pod here could not hold."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TOKENLOAD_", "LOCUST_"))}
    return (
        base
        | run_config
        | {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(tmp_path),
            "LOCUST_HOST": host,
            "LOCUST_LOCUSTFILE": str(ROOT / "locustfiles" / "chat.py"),
            "LOCUST_USERS": "4",
            "LOCUST_SPAWN_RATE": "4",
            "LOCUST_RUN_TIME": "5s",
            "LOCUST_EXPECT_WORKERS": str(workers),
            "LOCUST_EXPECT_WORKERS_MAX_WAIT": "60",
            "LOCUST_MASTER_BIND_HOST": "127.0.0.1",
            "LOCUST_MASTER_BIND_PORT": str(port),
            "LOCUST_MASTER_NODE_HOST": "127.0.0.1",
            "LOCUST_MASTER_NODE_PORT": str(port),
            "TOKENLOAD_OUTPUT_TOKENS": "16",
            "TOKENLOAD_EXPORTER_PORT": str(_free_port()),
            "TOKENLOAD_RESULTS_DIR": str(tmp_path / "results"),
            "TOKENLOAD_RUN_NAME": "job",
        }
    )


def _run_job(env: dict[str, str], workers: int) -> tuple[subprocess.CompletedProcess[str], list[int]]:
    """The master Job and ``workers`` worker pods, by the entry script; (master, workers' codes)."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), "worker"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(workers)
    ]
    try:
        master = subprocess.run(
            [sys.executable, str(SCRIPT), "master-headless"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return master, [p.wait(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_the_headless_job_runs_from_its_config_map(tmp_path: Path) -> None:
    sim = ServerProcess(["-m", "tokenload.sim", "--port", "0"], log_path=tmp_path / "sim.log")
    host = sim.start()
    env = _pod_env(tmp_path, config_map(), host, _free_port())
    # The empty TOKENLOAD_* lines of the ConfigMap stay: the entry script must drop them.
    assert any(k.startswith("TOKENLOAD_") and v == "" for k, v in env.items())
    try:
        master, worker_rcs = _run_job(env, 1)
    finally:
        sim.stop()
    assert master.returncode == 0 and worker_rcs == [0], master.stderr[-3000:]
    totals = json.loads(master.stdout.strip().splitlines()[-1])  # the Job log's last line
    assert totals
    run_dir = tmp_path / "results" / "job"
    records = read_records(run_dir)
    assert records and all(r["status"] == "ok" for r in records)
    # The ConfigMap's TOKENLOAD_PROMPT_TOKENS and the overridden TOKENLOAD_OUTPUT_TOKENS reached
    # the worker's users (the prompt exact through the emulator's /tokenize).
    assert {r["requested_output_tokens"] for r in records} == {16}
    assert {r["requested_input_tokens"] for r in records} == {int(config_map()["TOKENLOAD_PROMPT_TOKENS"])}
    assert all((run_dir / f).exists() for f in ("summary.json", "report.html", "report.md"))


def test_a_dataset_workload_reaches_the_workers_through_the_overlays_config_map(
    tmp_path: Path, kubectl: str
) -> None:
    """overlays/workload-dataset as processes: the ConfigMap's files laid out as the pods see them
    (the mount path mapped to a folder here), the master and two workers started by the entry
    script from the rendered run config; every request's prompt is one of the dataset's."""
    docs = manifests.render_cached(kubectl, K8S / "overlays" / "workload-dataset")
    maps = {d["metadata"]["name"].rsplit("-", 1)[0]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    mount = tmp_path / "etc-tokenload-workload"  # what /etc/tokenload/workload/ holds in a pod
    mount.mkdir()
    for name, text in maps["tokenload-workload"].items():
        (mount / name).write_text(text)
    run_config = dict(maps["tokenload-run"])
    assert run_config["TOKENLOAD_WORKLOAD"].startswith("/etc/tokenload/workload/")
    run_config["TOKENLOAD_WORKLOAD"] = str(mount / Path(run_config["TOKENLOAD_WORKLOAD"]).name)
    sim = ServerProcess(["-m", "tokenload.sim", "--port", "0"], log_path=tmp_path / "sim.log")
    env = _pod_env(tmp_path, run_config, sim.start(), _free_port(), workers=2)
    try:
        master, worker_rcs = _run_job(env, 2)
    finally:
        sim.stop()
    assert master.returncode == 0 and worker_rcs == [0, 0], master.stderr[-3000:]
    records = read_records(tmp_path / "results" / "job")
    assert records and all(r["status"] == "ok" for r in records)
    assert len({r["worker"] for r in records}) == 2  # both workers sent
    assert {r["requested_output_tokens"] for r in records} == {64}  # the workload file's, not the run's
