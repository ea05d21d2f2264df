"""Replicas that come and go during a run (``--metrics-discover``, issue #19 item 5): a real
sweep (Locust master and worker processes) against one emulator, its replicas listed in a file
that the test changes mid-run as an autoscaler would (a second emulator appears, then the first
leaves the list). Each change is a line of server_metrics.jsonl, the scrapes follow it, and
summary.json, the flagged step and report.md say so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import ROOT
from tokenload.serving.process import ServerProcess


def _scrapes(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _wait_for(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.2)


def _replace(listing: Path, text: str) -> None:
    """Rewrite the listing in one step, as a tool that keeps it should: a read between
    write_text's truncation and its write would see no replicas at all."""
    tmp = listing.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, listing)


def test_a_replica_that_appears_or_vanishes_mid_run_is_scraped_and_marked(tmp_path: Path) -> None:
    with (
        ServerProcess(["-m", "tokenload.sim", "--port", "0"], log_path=tmp_path / "a.log") as a,
        ServerProcess(["-m", "tokenload.sim", "--port", "0"], log_path=tmp_path / "b.log") as b,
    ):
        host = a.url
        url_a, url_b = host + "/metrics", b.url + "/metrics"
        listing = tmp_path / "replicas.txt"
        listing.write_text(f"# the replicas, kept current by the test\n{url_a}\n")
        out = tmp_path / "run"
        cmd = [sys.executable, "-m", "tokenload", "sweep", "--host", host, "--workers", "1",
               "--out", str(out), "--concurrency", "2,3,4", "--step-duration", "8", "--warmup", "1",
               "--prompt-tokens", "64", "--output-tokens", "16", "--metrics-discover", f"file:{listing}",
               "--metrics-discover-every", "1", "--metrics-interval", "0.5"]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            scrapes = out / "server_metrics.jsonl"
            _wait_for(lambda: any(p.get("ok") for p in _scrapes(scrapes)), 90)
            time.sleep(4)
            _replace(listing, f"{url_a}\n{url_b}\n")  # a replica appears
            _wait_for(lambda: any(p.get("target") == url_b and p.get("ok") for p in _scrapes(scrapes)), 30)
            time.sleep(4)
            _replace(listing, f"{url_b}\n")  # the first one leaves
            output, _ = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, output[-3000:]
    lines = _scrapes(out / "server_metrics.jsonl")
    events = [x for x in lines if "event" in x]
    assert [(e["event"], e["target"], e["via"]) for e in events] == [
        ("target_added", url_b, f"file:{listing}"),
        ("target_removed", url_a, f"file:{listing}"),
    ]
    added, removed = events[0]["t"], events[1]["t"]
    points = [x for x in lines if "event" not in x]
    # Each replica is scraped only while it is listed, and all along then.
    assert points and all(p["ok"] for p in points)
    assert all(added <= p["t"] for p in points if p["target"] == url_b)
    assert all(p["t"] < removed for p in points if p["target"] == url_a)
    assert [p for p in points if p["target"] == url_b and p["t"] > removed]
    summary = json.loads((out / "summary.json").read_text())
    targets = summary["scrape_targets"]
    assert targets["discover"] == f"file:{listing}" and targets["every_s"] == 1
    assert targets["at_start"] == [url_a] and targets["at_end"] == [url_b]
    assert [e["target"] for e in targets["events"]] == [url_b, url_a]
    # A change inside a step's measured part flags that step, with the change; no other step.
    for step in summary["steps"]:
        inside = [e for e in events if step["measure_start"] <= e["t"] <= step["end"]]
        assert ("replicas_changed" in step["flags"]) == bool(inside), step["flags"]
        assert [e["target"] for e in step.get("replica_events", [])] == [e["target"] for e in inside]
    report = (out / "report.md").read_text()
    assert f"replicas scraped through `file:{listing}`" in report
    assert f"{url_b} appeared at" in report and f"{url_a} vanished at" in report
