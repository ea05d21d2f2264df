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
