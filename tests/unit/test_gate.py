"""loadgen/gate.py: --drain's hold between steps, in one process."""

from __future__ import annotations

import time

import gevent

from tokenload.loadgen.gate import Gate


def test_a_closed_gate_holds_users_until_it_opens_then_spreads_them() -> None:
    gate = Gate()
    released: list[float] = []
    gate.wait()  # open: returns at once
    gate.set_closed(True)
    users = [gevent.spawn(lambda: (gate.wait(), released.append(time.monotonic()))) for _ in range(20)]
    gevent.sleep(0.05)
    assert gate.closed and not released
    opened = time.monotonic()
    gate.set_closed(False, spread_s=0.2)
    gevent.joinall(users, timeout=5)
    assert len(released) == 20
    delays = [t - opened for t in released]
    assert all(d >= -0.01 for d in delays) and max(delays) <= 0.2 + 1.0  # loose: a shared machine
    assert len({round(d, 3) for d in delays}) > 1  # spread, not all at once
    gate.set_closed(True)
    gate.set_closed(False)  # no spread: an open-loop step's arrivals set the start
    assert gate.spread_s == 0.0
