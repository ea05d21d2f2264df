"""Bad Prometheus and exporter options end the run before any load, with one line naming the
option; nothing here needs a Prometheus server or a target (the host does not exist)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_locust


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--prometheus-url", "ftp://prometheus:9090"), "argument --prometheus-url: expected an http://"),
        (("--prometheus-url", "http://admin:pw@prometheus:9090"), "argument --prometheus-url: credentials"),
        (("--prometheus-selector", "{job=vllm}"), "argument --prometheus-selector: expected label matchers"),
        (("--exporter-port", "70000"), "argument --exporter-port: expected a TCP port"),
        (("--prometheus-replica-label", "le"), "argument --prometheus-replica-label: expected a label"),
    ],
)
def test_bad_values_are_refused_up_front(args: tuple[str, ...], line: str, tmp_path: Path) -> None:
    run = run_locust(
        "locustfiles/chat.py", "http://127.0.0.1:9", tmp_path / "run", "-t", "1s", *args, timeout_s=60
    )
    assert run.returncode != 0
    errors = [x for x in run.output.splitlines() if "error:" in x]
    assert len(errors) == 1 and line in errors[0], run.output[-2000:]
    assert "pw@" not in run.output
    assert not (tmp_path / "run" / "requests.jsonl").exists()
