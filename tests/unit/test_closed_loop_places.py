"""bench/closed_loop_places.py: a closed loop's users chained back from the client's records
alone, and whether they keep their places from one cycle to the next."""

from __future__ import annotations

import itertools
import random
from types import ModuleType

import pytest

from tests.conftest import bench_module


@pytest.fixture(scope="module")
def places() -> ModuleType:
    return bench_module("closed_loop_places")


def _closed_loop(users: int, e2e_ms, seed: int, duration_s: float = 10.0) -> list[dict]:
    """Each user sends its next request 0.1-0.5 ms after the last one ended (the client's
    turnaround measured on the real-vLLM tier), starting at a random point of the first cycle."""
    rng = random.Random(seed)
    records = []
    for u in range(users):
        t = rng.uniform(0.0, 0.06)
        while t < duration_s:
            e2e = e2e_ms(rng)
            records.append({"start_monotonic_s": t, "e2e_ms": e2e, "_user": u})
            t += e2e / 1000 + rng.uniform(0.0001, 0.0005)
    rng.shuffle(records)
    return records


def _one_length(rng: random.Random) -> float:
    return 60.0 + rng.gauss(0.0, 0.05)  # the same steps for everyone: a spread of tens of us


def _drawn_lengths(rng: random.Random) -> float:
    return 60.0 * rng.lognormvariate(-0.125, 0.5)  # CV about 0.5, mean 60 ms


@pytest.mark.parametrize("e2e_ms", [_one_length, _drawn_lengths])
def test_each_users_requests_are_chained_back_from_ends_and_starts(places: ModuleType, e2e_ms) -> None:
    if e2e_ms is _one_length:
        # Two users of one length started apart stay apart: no end within a turnaround of the
        # other's, so the chains are exactly the users'.
        records = sorted(_closed_loop(2, e2e_ms, seed=3), key=lambda r: r["start_monotonic_s"])
        chains = places.chains(records, 0.003)
        assert sorted({records[i]["_user"] for i in c}.pop() for c in chains) == [0, 1]
        for chain in chains:
            assert len({records[i]["_user"] for i in chain}) == 1
        assert sum(len(c) for c in chains) == len(records)
    # Six: every request is in one chain, one chain a user, each link an end and the start that
    # followed it within the window (users may swap where their turnarounds interleave).
    records = sorted(_closed_loop(6, e2e_ms, seed=3), key=lambda r: r["start_monotonic_s"])
    chains = places.chains(records, 0.003)
    assert len(chains) == 6 and sorted(i for c in chains for i in c) == list(range(len(records)))
    for chain in chains:
        for a, b in itertools.pairwise(chain):
            end = records[a]["start_monotonic_s"] + records[a]["e2e_ms"] / 1000
            assert 0.0 <= records[b]["start_monotonic_s"] - end <= 0.003


def test_users_of_one_output_length_keep_their_places_and_drawn_lengths_mix_them(places: ModuleType) -> None:
    kept = places.step_places(_closed_loop(6, _one_length, seed=5), 0.003)
    mixed = places.step_places(_closed_loop(6, _drawn_lengths, seed=5), 0.003)
    assert kept["chains"] == mixed["chains"] == 6

    def spread(result: dict) -> float:
        q = result["gap_moved_ms"]["gap <= inf ms"]["quartiles"]
        return q[2] - q[0]

    # One length: a gap moves by the turnarounds' and lengths' differences (well under a ms);
    # drawn lengths: by the lengths' own spread (tens of ms at a 60 ms mean, CV 0.5).
    assert spread(kept) < 1.0, kept
    assert abs(kept["gap_moved_ms"]["gap <= inf ms"]["quartiles"][1]) < 0.5, kept
    assert spread(mixed) > 20.0, mixed
