"""A closed-loop client's turnaround, read from the emulator's server traces: the spread that
``tokenload/sim/turnaround.py`` keeps (issue #17; the virtual sweep draws each user's turnaround
from it). Prints JSON.

    python bench/turnaround_deciles.py RUN_DIR/server_trace.jsonl [...]

Pairing: a server trace names no user, so each request's last token sent is paired with the
earliest arrival after it that no earlier end has taken, within 50 ms (closed-loop users send
their next request a few ms after their response; a request arriving later than that is a new
step's spawn). With several users ending close together this pairs an end with *some* user's
next request, not always its own: the spread of the gaps is right, a single pair may not be.
Also per number of requests in flight at the end (the client's load), since the gap grows
with it.
"""

from __future__ import annotations

import bisect
import json
import sys
from pathlib import Path

PAIR_WITHIN_S = 0.05
IN_FLIGHT_BUCKETS = (1, 4, 16, 64, 256)


def gaps_of(trace: Path) -> list[tuple[int, float]]:
    """(requests in flight at the end, gap in ms) per paired end."""
    recs = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    arrivals = sorted(r["arrival_s"] for r in recs)
    ends = sorted(r["last_token_sent_s"] for r in recs if r.get("last_token_sent_s"))
    taken = [False] * len(arrivals)
    out = []
    for end in ends:
        k = bisect.bisect_left(arrivals, end)
        while k < len(arrivals) and taken[k]:
            k += 1
        if k < len(arrivals) and arrivals[k] - end < PAIR_WITHIN_S:
            taken[k] = True
            in_flight = bisect.bisect_right(arrivals, end) - bisect.bisect_right(ends, end) + 1
            out.append((in_flight, (arrivals[k] - end) * 1000.0))
    return out


def deciles(values: list[float]) -> list[float]:
    v = sorted(values)
    return [round(v[round(p / 10 * (len(v) - 1))], 2) for p in range(11)] if v else []


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    pairs = [p for path in argv for p in gaps_of(Path(path))]
    by: dict[int, list[float]] = {}
    for in_flight, gap in pairs:
        top = next((b for b in IN_FLIGHT_BUCKETS if in_flight <= b), IN_FLIGHT_BUCKETS[-1])
        by.setdefault(top, []).append(gap)
    print(
        json.dumps(
            {
                "traces": argv,
                "pairs": len(pairs),
                "deciles_ms": deciles([g for _, g in pairs]),
                "by_in_flight": {
                    f"<= {b}": {"pairs": len(g), "deciles_ms": deciles(g)} for b, g in sorted(by.items())
                },
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
