"""The master, two workers and the emulator as four hosts on a private network of namespaces: the
distributed run works across real interfaces, not only over loopback, and counts exactly."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import locust_request_count, read_records
from tests.distributed.cluster import Cluster, read_trace, wait_exit
from tests.distributed.netns import NetnsUnavailable, TestNet

pytestmark = pytest.mark.slow

SIM_PORT, MASTER_PORT = 8000, 5557


@pytest.fixture
def net() -> Iterator[TestNet]:
    pid = os.getpid()
    # Unique per pytest process: namespace names carry the pid, the /24 is picked by it.
    testnet = TestNet(str(pid), f"10.203.{pid % 250}.0/24")
    try:
        try:
            testnet.setup()
        except NetnsUnavailable as exc:
            pytest.skip(f"network namespaces unavailable: {exc}")
        yield testnet
    finally:
        problems = testnet.close()
        assert not problems, problems


def test_master_workers_and_emulator_on_separate_hosts(net: TestNet, tmp_path: Path) -> None:
    addr = {host: net.add_host(host) for host in ("sim", "master", "worker0", "worker1")}
    cluster = Cluster(tmp_path, prefix=net.prefix)
    try:
        _sim, url, trace = cluster.emulator("sim", addr["sim"], "--port", str(SIM_PORT))
        assert url == f"http://{addr['sim']}:{SIM_PORT}"
        master = cluster.master(
            url, MASTER_PORT, 2, "--concurrency", "2,4", "--step-duration", "5", "--warmup", "0.2",
            "--prompt-tokens", "32", "--output-tokens", "16", where="master", bind=addr["master"],
        )  # fmt: skip
        workers = [cluster.worker(i, addr["master"], MASTER_PORT, where=f"worker{i}") for i in range(2)]
        assert wait_exit(master, 150) == 0, master.text()[-3000:]
        for w in workers:
            assert wait_exit(w, 30) == 0, w.text()[-2000:]
        output = master.text()
        run_dir = tmp_path / "run"
        records = read_records(run_dir)
        served = read_trace(trace)
    finally:
        cluster.close()

    assert len({r["worker"] for r in records}) == 2
    assert all(r["status"] == "ok" for r in records)
    assert locust_request_count(output) == len(records) == len(served) > 10, output[-2000:]
    assert {r["response_id"] for r in records} == {t["request_id"] for t in served}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["host"] == url and len(summary["workers"]) == 2 and summary["workers_lost"] == []
