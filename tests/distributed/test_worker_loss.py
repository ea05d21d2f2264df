"""Losing a process mid-run: a worker SIGKILLed mid-step (the master names it, keeps what it
reported, rebalances its users and ends the run normally), and the master SIGKILLed (its workers
exit within a bound instead of hanging)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import locust_request_count, read_records
from tests.distributed.cluster import Cluster, free_port, read_trace, wait_exit, worker_name
from tokenload.loadgen.workers import MASTER_LOST_EXIT_CODE, MASTER_SILENCE_LIMIT_S

pytestmark = pytest.mark.slow

LOAD = ["--prompt-tokens", "64", "--output-tokens", "24", "--warmup", "0.25"]


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def test_a_worker_killed_mid_step_is_named_and_the_survivors_requests_are_all_kept(cluster: Cluster) -> None:
    _sim, url, trace_path = cluster.emulator()
    port = free_port()
    master = cluster.master(url, port, 3, "--concurrency", "6,6", "--step-duration", "8", *LOAD)
    workers = [cluster.worker(i, "127.0.0.1", port) for i in range(3)]
    names = [worker_name(w) for w in workers]
    master.wait_for(r"step 0: 6 users reached", 90)
    time.sleep(2.5)  # mid-step: the victim has reported some requests and has more in flight
    victim = workers[1]
    kill_wall, kill_mono = time.time(), time.perf_counter()  # perf_counter: the emulator's clock
    os.kill(victim.pid, signal.SIGKILL)

    assert wait_exit(master, 150) == 0, master.text()[-3000:]
    for w in (workers[0], workers[2]):
        assert wait_exit(w, 30) == 0, w.text()[-2000:]
    output = master.text()
    run_dir = cluster.tmp / "run"
    summary = json.loads((run_dir / "summary.json").read_text())
    llm_stats = json.loads((run_dir / "llm_stats.json").read_text())
    records = read_records(run_dir)

    # Named, with the time it was lost, in the step it was lost in.
    [lost] = summary["workers_lost"]
    assert llm_stats["workers_lost"] == summary["workers_lost"]
    assert lost["worker_name"] == names[1]
    assert lost["worker"] in summary["workers"]
    # Heartbeats come every second; a busy machine may delay one either side of the kill.
    assert kill_wall - 10 < lost["last_seen_at"] < kill_wall + 5 and lost["last_seen_at"] <= lost["lost_at"]
    assert kill_wall < lost["lost_at"] < kill_wall + 30
    assert lost["step"] == 0
    assert "worker_lost" in summary["steps"][0]["flags"]
    assert f"worker {names[1]} ({lost['worker']}) lost" in output
    assert "rebalanced onto the 2 remaining worker(s)" in output

    # Its reported data kept; Locust's count == the records, exactly.
    by_worker = {n: [r for r in records if r["worker"] == n] for n in names}
    assert len(by_worker[names[1]]) == lost["records_reported"] > 0
    assert len(records) == locust_request_count(output) == llm_stats["records_written"]
    # The survivors went on after the loss (they took over its users) and nothing else was lost.
    survivors = [n for n in names if n != names[1]]
    assert all(any(r["wall_start"] > lost["lost_at"] for r in by_worker[n]) for n in survivors)
    assert sorted(by_worker) == sorted({r["worker"] for r in records})
    assert all(r["status"] == "ok" for r in records), [r for r in records if r["status"] != "ok"][:3]

    # Every request the emulator served is in the records, except the victim's last ones: those
    # all reached the server by the kill (after it only the survivors were sending; the second of
    # slack is for a request already on the wire that the server reads a little later).
    served = {t["request_id"]: t for t in read_trace(trace_path)}
    recorded = {r["response_id"] for r in records}
    assert recorded <= set(served)
    unreported = [t for rid, t in served.items() if rid not in recorded]
    assert all(t["arrival_s"] < kill_mono + 1.0 for t in unreported), (kill_mono, unreported)
    assert len(served) == len(recorded) + len(unreported)


def test_workers_exit_within_a_bound_when_the_master_is_killed(cluster: Cluster) -> None:
    _sim, url, _trace = cluster.emulator()
    port = free_port()
    master = cluster.master(url, port, 2, "--concurrency", "4,4", "--step-duration", "300", *LOAD)
    workers = [cluster.worker(i, "127.0.0.1", port) for i in range(2)]
    master.wait_for(r"step 0: 4 users reached", 90)
    time.sleep(1.0)
    os.kill(master.pid, signal.SIGKILL)
    killed = time.monotonic()
    # The watchdog's silence limit, the users' stop, and slack for a busy machine: well under
    # Locust's own 60 s master timeout, which would fail this.
    bound_s = MASTER_SILENCE_LIMIT_S + 25
    for w in workers:
        code = wait_exit(w, max(1.0, bound_s - (time.monotonic() - killed)))
        assert code == MASTER_LOST_EXIT_CODE, w.text()[-2000:]
        assert "no heartbeat from the master" in w.text()
