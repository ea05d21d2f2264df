"""The emulator's router (tokenload.sim.router): which replica each policy picks, and bad
``--routing`` values refused with one line. The fleet over HTTP is tests/sweep/test_replicas.py."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT
from tokenload.sim.router import Router, parse_routing


def _apis(*loads: tuple[int, int]) -> list[SimpleNamespace]:
    """Replicas as the router sees them: their engine's running and waiting counts."""
    return [
        SimpleNamespace(engine=SimpleNamespace(num_running=r, num_waiting=w), handler=lambda m, p: None)
        for r, w in loads
    ]


def _router(text: str, *loads: tuple[int, int]) -> Router:
    urls = [f"http://r{i}" for i in range(len(loads))]
    return Router(_apis(*loads), urls, *parse_routing(text, len(loads)))


def test_round_robin_takes_the_replicas_in_turn() -> None:
    r = _router("round_robin", (0, 0), (0, 0), (0, 0))
    assert [r.pick() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert r.routed == [3, 2, 2]


def test_weighted_gives_each_replica_its_share_spread_out() -> None:
    r = _router("weighted:3,1", (0, 0), (0, 0))
    picks = [r.pick() for _ in range(400)]
    assert r.routed == [300, 100]
    assert max(len(run) for run in "".join(map(str, picks)).split("1")) == 3  # never 4 in a row
    assert _router("weighted:0,1", (0, 0), (0, 0)).pick() == 1


def test_least_requests_picks_the_replica_with_the_fewest_in_the_system() -> None:
    assert _router("least_requests", (5, 2), (3, 2), (3, 0)).pick() == 2


def test_random_is_seeded() -> None:
    a, b = _router("random", (0, 0), (0, 0)), _router("random", (0, 0), (0, 0))
    assert [a.pick() for _ in range(20)] == [b.pick() for _ in range(20)]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--replicas", "2", "--routing", "weighted:1"], "--routing: expected weighted:W1,...,W2"),
        (["--replicas", "2", "--routing", "spiral"], "--routing: expected one of round_robin"),
        (["--replicas", "0"], "--replicas: expected a positive integer"),
        (["--routing", "weighted:9,1"], "routes between replicas: give --replicas 2 or more"),  # walkthrough
    ],
)
def test_bad_fleet_options_are_one_line(args: list[str], needle: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tokenload.sim", "--port", "0", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_the_replicas_share_one_trace_and_each_line_names_its_replica(tmp_path) -> None:
    """`--trace` with `--replicas 2`: one file, each request's line says which replica served it,
    and the counts are the router's own (`GET /sim/replicas`)."""
    import json
    import urllib.request

    from tokenload.serving.process import ServerProcess

    trace = tmp_path / "trace.jsonl"
    args = ["-m", "tokenload.sim", "--port", "0", "--replicas", "2", "--routing", "weighted:3,1",
            "--trace", str(trace)]  # fmt: skip
    with ServerProcess(args, log_path=tmp_path / "sim.log") as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as r:
            model = json.load(r)["data"][0]["id"]
        for i in range(8):
            body = json.dumps({"model": model, "prompt": f"hello {i}", "max_tokens": 2}).encode()
            req = urllib.request.Request(
                sim.url + "/v1/completions", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
        with urllib.request.urlopen(sim.url + "/sim/replicas", timeout=10) as r:
            routed = [x["routed"] for x in json.load(r)["replicas"]]
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    assert len(lines) == 8 and len({x["request_id"] for x in lines}) == 8
    assert [sum(x["replica"] == i for x in lines) for i in range(2)] == routed == [6, 2]
