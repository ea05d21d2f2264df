"""A fleet behind a router (issue #15 item 5): `tokenload sim --replicas 2` serves two emulated
replicas, each with its own engine and /metrics, behind one address; a real sweep scrapes both
(`--metrics-url` once per replica). Each step keeps each replica's figures and verdict, and a
router that sends one replica three requests in four (`weighted:3,1`) is named an imbalance with
the saturated replica and what ran out on it; an even split of the same load is not (run through
`tokenload sweep --sim-args`, which finds the replicas to scrape itself)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, with_trusted_client
from tokenload.serving.process import ServerProcess

#: Two H100 replicas whose 300-block KV caches (4,800 tokens) hold about 8 of these 576-token
#: requests each: 16 users split 3:1 overfill the first while the second holds 4 with room.
SIM = ["-m", "tokenload.sim", "--port", "0", "--replicas", "2", "--profile", "h100-llama3.1-8b",
       "--num-gpu-blocks", "300", "--max-model-len", "4096"]  # fmt: skip


def _run(tmp_path: Path, routing: str) -> tuple[dict, list[dict], Path]:
    """The sweep against a fresh fleet, the router's counts and the run directory: run again
    while the client's own timing was not trusted (tests.conftest.with_trusted_client), as
    these are server verdicts."""
    name = routing.replace(":", "_").replace(",", "_")
    return with_trusted_client(lambda out: _run_once(out, routing), tmp_path / name, lambda r: r[0])


def _run_once(out: Path, routing: str) -> tuple[dict, list[dict], Path]:
    with ServerProcess([*SIM, "--routing", routing], log_path=out.with_name(f"{out.name}.log")) as sim:
        with urllib.request.urlopen(sim.url + "/sim/replicas", timeout=10) as r:
            replicas = json.load(r)["replicas"]
        cmd = [sys.executable, "-m", "tokenload", "sweep", "--host", sim.url, "--workers", "0",
               "--out", str(out), "--concurrency", "4,16", "--step-duration", "8", "--warmup", "2",
               "--prompt-tokens", "512", "--output-tokens", "64", "--metrics-interval", "0.5",
               *(a for r in replicas for a in ("--metrics-url", r["metrics_url"]))]  # fmt: skip
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
        with urllib.request.urlopen(sim.url + "/sim/replicas", timeout=10) as r:
            replicas = json.load(r)["replicas"]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((out / "summary.json").read_text()), replicas, out


def test_a_router_that_overloads_one_replica_is_named_an_imbalance(tmp_path: Path) -> None:
    summary, replicas, out = _run(tmp_path, "weighted:3,1")
    heavy, light = (r["metrics_url"] for r in replicas)
    # Ground truth from the router itself: three requests in four went to the first replica.
    assert replicas[0]["routed"] == pytest.approx(3 * replicas[1]["routed"], rel=0.1)
    top = summary["steps"][-1]
    assert set(top["server_replicas"]) == {heavy, light}
    assert top["server_replicas"][heavy]["kv_cache_usage_ratio"]["max"] >= 0.9
    verdict = top["verdict"]
    assert verdict["bottleneck"] == "imbalance", verdict["evidence"]
    # The overloaded replica is saturated and named; which resource is a near tie here: its KV
    # cache is full, and its small batch mostly reads the weights (kv_capacity on this machine,
    # memory_bandwidth once in CI: README, "How often it is right").
    assert verdict["imbalance"]["with_room"] == [light]
    assert set(verdict["imbalance"]["saturated"]) == {heavy}
    assert verdict["imbalance"]["saturated"][heavy] in ("kv_capacity", "memory_bandwidth")
    assert verdict["replicas"][heavy]["bottleneck"] == verdict["imbalance"]["saturated"][heavy]
    assert verdict["decided_by"] == f"replica {heavy}"
    assert all(e["value"] is not None for e in verdict["evidence"])
    assert summary["knee"]["bottleneck"] == "imbalance"
    report = (out / "report.md").read_text()
    assert "imbalance" in report and heavy in report


def test_an_even_split_of_the_same_load_is_no_imbalance(tmp_path: Path) -> None:
    # Through --sim-args: the sweep scrapes each of the emulator's replicas on its own.
    out = tmp_path / "run"
    sim_args = " ".join(SIM[4:]) + " --routing round_robin"
    cmd = [sys.executable, "-m", "tokenload", "sweep", "--sim-args", sim_args, "--workers", "0",
           "--out", str(out), "--concurrency", "4,16", "--step-duration", "8", "--warmup", "2",
           "--prompt-tokens", "512", "--output-tokens", "64", "--metrics-interval", "0.5"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["config"]["metrics_urls"]) == 2
    verdict = summary["steps"][-1]["verdict"]
    assert verdict["bottleneck"] != "imbalance", verdict["evidence"]
    assert set(verdict["replicas"]) == set(summary["config"]["metrics_urls"])
    labels = {v["bottleneck"] for v in verdict["replicas"].values()}
    assert len(labels) == 1, verdict["replicas"]


def test_a_server_that_does_not_answer_the_replica_list_is_scraped_as_one(capsys) -> None:
    # A closed port on loopback: no router to list replicas. The sweep scrapes the one server's
    # /metrics and says why in one line, instead of a traceback before the run.
    import socket

    from tokenload.sweep import _sim_replica_metrics

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        assert _sim_replica_metrics(f"http://127.0.0.1:{port}") is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not list the emulator's replicas" in err[0], err
