"""A closed-loop client's turnaround, as the virtual sweep draws it: from a request's last token
sent by the server to the same user's next request reaching the server (the response's way back,
the client's own work, the next request's way there). Pure.
"""

from __future__ import annotations

import itertools
import math
import random

__all__ = ["CLIENT_TURNAROUND_S", "check_quantiles", "turnaround"]

#: A closed-loop user's turnaround (seconds), its deciles from min to max, pooled over the
#: client's load: from a request's last token sent by the server to the next request's arrival
#: (bench/turnaround_deciles.py: a server trace names no user, so an end is paired with the
#: earliest arrival after it that no earlier end took, within 50 ms). Read from the emulator's
#: server_trace.jsonl of two tokenload sweeps over loopback (this project's 2-core VM,
#: 2026-12-05): 1/4/16/64 users, 128 in / 64 out, 5 s steps, and 2/8 users, 1024 in / 256 out,
#: 30 s steps; 255 pairs. It grows with the streams the client handles (median 0.8 ms at 1 in
#: flight, 3.3 ms at 17-64); one pooled spread serves every load. A client across a network adds
#: its round trip to each turnaround, and a busier client more (tokenload plan
#: --client-turnaround-ms). Fitted, not validated, on the second sweep: one 1 ms value had every
#: 2-user request take 315.7 ms to its first token where the real run split between 194 and 337
#: ms (TTFT mean 265.8 ms); drawn from these the plan's mean is 261.8 ms (bench/RESULTS.md).
CLIENT_TURNAROUND_S = (
    0.00056,
    0.00088,
    0.00122,
    0.00181,
    0.00215,
    0.00267,
    0.00303,
    0.00344,
    0.00368,
    0.00413,
    0.00578,
)


def turnaround(quantiles: tuple[float, ...], rng: random.Random) -> float:
    """One draw from evenly spaced quantiles (linear between them)."""
    if len(quantiles) == 1:
        return quantiles[0]
    x = rng.random() * (len(quantiles) - 1)
    k = min(int(x), len(quantiles) - 2)
    return quantiles[k] + (quantiles[k + 1] - quantiles[k]) * (x - k)


def check_quantiles(values: object, field: str, unit: str = "seconds") -> tuple[float, ...]:
    """The turnaround quantiles as a tuple, or ValueError naming ``field``: at least one, each
    finite and >= 0, in increasing order (min to max); a bare number is not quantiles."""
    if isinstance(values, int | float | str):
        raise ValueError(f"{field}: expected quantiles ({unit}), not one value")
    q = tuple(values)  # type: ignore[call-overload]
    if (
        not q
        or not all(isinstance(x, int | float) and math.isfinite(x) and x >= 0 for x in q)
        or any(b < a for a, b in itertools.pairwise(q))
    ):
        raise ValueError(f"{field}: expected finite quantiles >= 0 ({unit}) in increasing order")
    return tuple(float(x) for x in q)
