"""k8s/base/scripts/tokenload_k8s.py, the pods' entry point: TOKENLOAD_* variables to flags,
replica discovery through a headless Service, the headless master's one-line JSON result and exit
status (with a stand-in ``locust``), and the init containers' waits. Loopback only."""

from __future__ import annotations

import http.server
import importlib.util
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.k8s.manifests import K8S

SCRIPT = K8S / "base" / "scripts" / "tokenload_k8s.py"

STUB_LOCUST = """#!{python}
import json, os, signal, sys, time
from pathlib import Path
argv = sys.argv[1:]
run_dir = Path(argv[argv.index("--run-dir") + 1])
stats = {{"rows": [{{"name": "chat", "ttft_ms": {{"p50": 12.5}}}}]}}


def finish(*_):
    if os.environ.get("STUB_WRITE", "1") == "1":
        (run_dir / "llm_stats.json").write_text(json.dumps(stats, indent=2))
    print("locust log line")
    sys.exit(int(os.environ.get("STUB_RC", "0")))


if os.environ.get("STUB_UNTIL_SIGTERM"):  # like Locust: results are written on SIGTERM
    signal.signal(signal.SIGTERM, finish)
    Path(os.environ["STUB_ARGV"]).write_text(json.dumps(argv))
    while True:
        time.sleep(0.05)
Path(os.environ["STUB_ARGV"]).write_text(json.dumps(argv))
finish()
"""


@pytest.fixture(scope="module")
def entry() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tokenload_k8s", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    keep, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ inside k8s/
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = keep
    return module


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(("TOKENLOAD_", "LOCUST_")):
            monkeypatch.delenv(name)
    return monkeypatch


def test_the_master_adds_only_what_the_pod_knows_and_empty_variables_are_dropped(
    entry: ModuleType, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("TOKENLOAD_MODEL", "")
    clean_env.setenv("TOKENLOAD_NATURAL_STOP", " ")
    clean_env.setenv("TOKENLOAD_PROMPT_TOKENS", "512")
    clean_env.setenv("TOKENLOAD_EXTRA_ARGS", "--natural-stop --ttft-timeout 60")
    clean_env.setenv("TOKENLOAD_METRICS_DISCOVER", "vllm-metrics:8000")
    argv = entry.locust_argv("master-headless", Path("/results/r1"))
    assert argv[:2] == ["locust", "--master"]
    # tokenload's options are Locust's to read from their variables: no flag is made of them.
    assert "--prompt-tokens" not in argv and "--model" not in argv
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--run-dir"] == "/results/r1"
    # Replica discovery is an option like the others (tokenload repeats it during the run).
    assert "--metrics-url" not in argv and "--metrics-discover" not in argv
    assert "--headless" in argv and pairs["--html"] == "/results/r1/report.html"
    assert argv[-3:] == ["--natural-stop", "--ttft-timeout", "60"]
    web = entry.locust_argv("master-web", Path("/results/web"))
    assert "--headless" not in web and "--html" not in web and "--metrics-url" not in web
    child = entry.child_env()
    assert child["TOKENLOAD_PROMPT_TOKENS"] == "512"
    assert child["TOKENLOAD_METRICS_DISCOVER"] == "vllm-metrics:8000"
    assert "TOKENLOAD_MODEL" not in child and "TOKENLOAD_NATURAL_STOP" not in child


def master_env(tmp_path: Path, **env: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "locust"
    stub.write_text(STUB_LOCUST.format(python=sys.executable))
    stub.chmod(0o755)
    argv_file = tmp_path / "argv.json"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("TOKENLOAD_", "LOCUST_", "STUB_"))}
    full_env |= {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "STUB_ARGV": str(argv_file),
        "TOKENLOAD_RESULTS_DIR": str(tmp_path / "results"),
        "HOSTNAME": "tokenload-master-abcde",
        **env,
    }
    return full_env


def run_master(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    full_env = master_env(tmp_path, **env)
    argv_file = Path(full_env["STUB_ARGV"])
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "master-headless"],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, json.loads(argv_file.read_text())


def test_the_headless_master_ends_its_log_with_the_results_as_one_json_line(tmp_path: Path) -> None:
    proc, argv = run_master(tmp_path, STUB_RC="0")
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "results" / "tokenload-master-abcde"
    assert argv[argv.index("--run-dir") + 1] == str(run_dir)
    last = proc.stdout.strip().splitlines()[-1]
    assert json.loads(last) == json.loads((run_dir / "llm_stats.json").read_text())
    assert "\n" not in last and ": " not in last  # compact


def test_the_run_name_and_locusts_exit_status_are_kept(tmp_path: Path) -> None:
    proc, argv = run_master(tmp_path, STUB_RC="3", TOKENLOAD_RUN_NAME="users-32")
    assert proc.returncode == 3
    assert argv[argv.index("--run-dir") + 1] == str(tmp_path / "results" / "users-32")
    assert json.loads(proc.stdout.strip().splitlines()[-1])["rows"][0]["name"] == "chat"


def test_a_run_without_results_fails(tmp_path: Path) -> None:
    proc, _ = run_master(tmp_path, STUB_WRITE="0")
    assert proc.returncode == 1
    assert "no readable" in proc.stderr


def test_sigterm_reaches_locust_and_the_results_still_print(tmp_path: Path) -> None:
    """Deleting the Job sends SIGTERM to the entry script (PID 1): Locust must get it and finish."""
    env = master_env(tmp_path, STUB_UNTIL_SIGTERM="1")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "master-headless"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not Path(env["STUB_ARGV"]).exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["rows"][0]["name"] == "chat"


@pytest.fixture
def loopback_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_wait_target_returns_once_health_answers(
    entry: ModuleType, clean_env: pytest.MonkeyPatch, loopback_server: str
) -> None:
    clean_env.setenv("LOCUST_HOST", loopback_server + "/")
    clean_env.setenv("TOKENLOAD_WAIT_TARGET_S", "5")
    assert entry.main(["wait-target"]) == 0
    assert entry.wait_http(loopback_server + "/not-ready", timeout_s=0.1, interval_s=0.05) == 1


def test_wait_target_can_be_turned_off(entry: ModuleType, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LOCUST_HOST", "http://nowhere.invalid:8000")
    clean_env.setenv("TOKENLOAD_WAIT_TARGET_S", "0")
    assert entry.main(["wait-target"]) == 0


def test_wait_tcp(entry: ModuleType, loopback_server: str) -> None:
    port = loopback_server.rsplit(":", 1)[1]
    assert entry.wait_tcp(f"127.0.0.1:{port}", timeout_s=5) == 0
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert entry.wait_tcp(f"127.0.0.1:{closed}", timeout_s=0.1, interval_s=0.05) == 1


def test_unknown_command_prints_usage(entry: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert entry.main(["bogus"]) == 2
    assert "master-headless" in capsys.readouterr().err
