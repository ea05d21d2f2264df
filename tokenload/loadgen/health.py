"""The load generator's own health: is this process keeping up? Samples gevent loop lag (how
late a short sleep wakes) and the process's CPU, tagged with the step and phase the process is
in when sampled, for the step's ``client`` figures: numbers measured by a client that could not
keep up are flagged, not silently reported."""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent
import psutil

__all__ = ["HealthMonitor"]

_TICK_S = 0.1
_CPU_EVERY = 10  # ticks: CPU % over one second


class HealthMonitor:
    def __init__(self, where: Callable[[], tuple[int | None, str | None]]) -> None:
        self._where = where
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)  # the first call only primes the counter
        #: step -> (max CPU %, loop-lag samples in ms), measured phases only
        self._samples: dict[int, tuple[float, list[float]]] = {}
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        n = 0
        while True:
            t0 = time.perf_counter()
            gevent.sleep(_TICK_S)
            lag = max(0.0, (time.perf_counter() - t0 - _TICK_S) * 1000.0)
            n += 1
            cpu = self._proc.cpu_percent(None) if n % _CPU_EVERY == 0 else None
            step, phase = self._where()
            if step is None or phase != "measure":
                continue
            cpu_max, lags = self._samples.get(step, (0.0, []))
            lags.append(lag)
            self._samples[step] = (max(cpu_max, cpu or 0.0), lags)

    def take(self) -> dict[int, tuple[float, list[float]]]:
        """The samples since the last call, by step."""
        out, self._samples = self._samples, {}
        return out
