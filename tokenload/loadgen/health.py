"""The load generator's own health: is this process keeping up? Samples gevent loop lag (how
late a short sleep wakes) and the process's CPU, tagged with the step and phase the process is
in when sampled, for the step's ``client`` figures: numbers measured by a client that could not
keep up are flagged, not silently reported. CPU % is of what the process may use: one core, or
its cgroup's quota when lower (``cpu_limit.py``), so a pod limited to 500m is judged against
half a core. The latest CPU % and the worst loop lag of the last
five seconds are also kept for tokenload's own /metrics (exporter.py)."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import gevent
import psutil

from tokenload.loadgen.cpu_limit import CpuLimit, read_cpu_limit
from tokenload.loadgen.greenlet_task import GreenletTask

__all__ = ["HealthMonitor"]

_TICK_S = 0.1
_CPU_EVERY = 10  # ticks: CPU % over one second


class HealthMonitor(GreenletTask):
    def __init__(
        self,
        where: Callable[[], tuple[int | None, str | None]],
        per_step: bool = True,
        cpu_limit: CpuLimit | None = None,
    ) -> None:
        self._where = where
        #: What CPU % is measured against (one core, or the cgroup's quota when lower).
        self.cpu_limit = cpu_limit if cpu_limit is not None else read_cpu_limit()
        #: Keep samples by step (worker and local runner); the master only reports its own now.
        self._per_step = per_step
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)  # the first call only primes the counter
        #: The CPU % over the last second, and the worst loop lag (s) of each of the last 5 s.
        self.cpu_percent = 0.0
        self._recent_lag_s: collections.deque[float] = collections.deque([0.0], maxlen=5)
        #: step -> (max CPU %, loop-lag samples in ms), measured phases only
        self._samples: dict[int, tuple[float, list[float]]] = {}
        self._greenlet: gevent.Greenlet | None = None

    @property
    def loop_lag_s(self) -> float:
        """The worst loop lag of the last five seconds."""
        return max(self._recent_lag_s)

    def _run(self) -> None:
        n, worst = 0, 0.0
        while True:
            t0 = time.perf_counter()
            gevent.sleep(_TICK_S)
            lag = max(0.0, (time.perf_counter() - t0 - _TICK_S) * 1000.0)
            worst = max(worst, lag)
            n += 1
            cpu = None
            if n % _CPU_EVERY == 0:
                cpu = self.cpu_percent = self.cpu_limit.percent_of_usable(self._proc.cpu_percent(None))
                self._recent_lag_s.append(worst / 1000.0)
                worst = 0.0
            step, phase = self._where()
            if not self._per_step or step is None or phase != "measure":
                continue
            cpu_max, lags = self._samples.get(step, (0.0, []))
            lags.append(lag)
            self._samples[step] = (max(cpu_max, cpu or 0.0), lags)

    def take(self) -> dict[int, tuple[float, list[float]]]:
        """The samples since the last call, by step."""
        out, self._samples = self._samples, {}
        return out
