"""Whether a closed loop's users keep their places: from a run's client records alone.

A closed-loop user sends its next request as soon as the last one ends, so a step's requests
form one chain per user (each request's end followed, within ``--link-ms``, by the earliest
start no other end took). The gap between two consecutive starts of different users is
measured again one cycle later (the same two users' next requests): if it hardly changes, the
users keep the order and spacing they had, and the step's TTFT depends on how they happened to
line up when it started. Prints, per step and by the size of the gap, how many pairs and how
much the gap moved in one cycle (quartiles, ms), as JSON.

The records name no user, so where two users' ends and next starts interleave within the
client's turnaround (a few tenths of a ms) the pairing can swap them: each link is still an end
and a start that followed it, so a swap moves a measured gap by at most the difference of two
turnarounds.

    python bench/closed_loop_places.py RUN_DIR [--link-ms 3]
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from pathlib import Path

#: Gap sizes (ms) the pairs are grouped by: up to each bound.
BUCKETS_MS = (1.0, 3.0, 6.0, 10.0, float("inf"))


def _quartiles(values: list[float]) -> list[float]:
    if len(values) < 2:
        return [round(v, 2) for v in values]
    return [round(q, 2) for q in statistics.quantiles(values, n=4)]


def chains(records: list[dict], link_s: float) -> list[list[int]]:
    """Indices of ``records`` (sorted by start) chained user by user: each request's end to the
    earliest later start within ``link_s`` that no earlier end took."""
    starts = [r["start_monotonic_s"] for r in records]
    nxt: dict[int, int] = {}
    taken: set[int] = set()
    ends = sorted(range(len(records)), key=lambda i: starts[i] + records[i]["e2e_ms"] / 1000)
    for i in ends:
        end = starts[i] + records[i]["e2e_ms"] / 1000
        j = bisect.bisect_left(starts, end)
        while j < len(starts) and j in taken:
            j += 1
        if j < len(starts) and starts[j] - end <= link_s:
            taken.add(j)
            nxt[i] = j
    out = []
    for head in (i for i in range(len(records)) if i not in taken):
        chain = [head]
        while chain[-1] in nxt:
            chain.append(nxt[chain[-1]])
        out.append(chain)
    return out


def step_places(records: list[dict], link_s: float) -> dict:
    """One step's chains and, by gap size, how the gap between consecutive starts of two users
    moved one cycle later."""
    records = sorted(records, key=lambda r: r["start_monotonic_s"])
    starts = [r["start_monotonic_s"] for r in records]
    users = chains(records, link_s)
    place = {i: (c, k) for c, chain in enumerate(users) for k, i in enumerate(chain)}
    moved: dict[float, list[float]] = {b: [] for b in BUCKETS_MS}
    for i in range(1, len(records)):
        (ca, ka), (cb, kb) = place[i - 1], place[i]
        if ca == cb or ka + 1 >= len(users[ca]) or kb + 1 >= len(users[cb]):
            continue
        gap = (starts[i] - starts[i - 1]) * 1000
        later = (starts[users[cb][kb + 1]] - starts[users[ca][ka + 1]]) * 1000
        moved[next(b for b in BUCKETS_MS if gap <= b)].append(later - gap)
    return {
        "requests": len(records),
        "chains": len(users),
        "longest_chains": sorted((len(c) for c in users), reverse=True)[:12],
        "gap_moved_ms": {
            f"gap <= {b:g} ms": {"pairs": len(v), "quartiles": _quartiles(v)} for b, v in moved.items() if v
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument(
        "--link-ms", type=float, default=3.0, help="an end and the next start at most this far apart"
    )
    args = p.parse_args()
    by_step: dict[int, list[dict]] = {}
    with open(args.run_dir / "requests.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r.get("status") == "ok" and r.get("step") is not None:
                by_step.setdefault(int(r["step"]), []).append(r)
    summary = json.loads((args.run_dir / "summary.json").read_text())["steps"]
    users = {int(s["index"]): s.get("concurrency") for s in summary}
    out = {
        str(k): {"users": users.get(k), **step_places(v, args.link_ms / 1000)}
        for k, v in sorted(by_step.items())
    }
    print(json.dumps({"run": str(args.run_dir), "steps": out}, indent=2))


if __name__ == "__main__":
    main()
