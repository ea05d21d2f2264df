"""Open-loop arrival schedules: when each request is *meant* to be sent. Pure.

One global schedule per step (a seeded sequence of inter-arrival gaps at the step's rate) is
split exactly across workers: worker ``slot`` of ``of`` takes arrivals ``slot``, ``slot + of``,
``slot + 2 of``, ... so the union over workers is the global schedule, whatever the number of
workers. Processes (``--arrival``):

* ``constant``: gaps of exactly 1/rate;
* ``poisson``: exponential gaps with mean 1/rate (a Poisson process);
* ``gamma:B``: gamma gaps with shape B and mean 1/rate, B the *burstiness factor* as vLLM's
  ``benchmark_serving --burstiness`` defines it: B = 1 is Poisson, B < 1 burstier (coefficient
  of variation 1/sqrt(B)), B > 1 more even.

A trace (``--shape trace``) is a schedule too: its rows' times, finite; each arrival's global
index is then the row it sends.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["ArrivalSpec", "ArrivalSpecError", "SlotSchedule", "global_gaps", "parse_arrival", "trace_gaps"]


class ArrivalSpecError(ValueError):
    """A bad ``--arrival``; the message names the option."""


@dataclass(frozen=True, slots=True)
class ArrivalSpec:
    kind: str  # constant | poisson | gamma
    burstiness: float = 1.0

    def __str__(self) -> str:
        return f"gamma:{self.burstiness:g}" if self.kind == "gamma" else self.kind


def parse_arrival(text: str, option: str = "--arrival") -> ArrivalSpec:
    """``constant``, ``poisson`` or ``gamma:B`` (B > 0, the burstiness factor)."""
    kind, _, arg = text.strip().lower().partition(":")
    if kind in ("constant", "poisson") and not arg:
        return ArrivalSpec(kind)
    if kind == "gamma":
        try:
            b = float(arg)
        except ValueError:
            b = float("nan")
        if not (b > 0 and math.isfinite(b)):
            raise ArrivalSpecError(f"{option}: expected gamma:B with a burstiness B > 0, got {text!r}")
        return ArrivalSpec("gamma", b)
    raise ArrivalSpecError(f"{option}: expected constant, poisson or gamma:B (B > 0), got {text!r}")


def global_gaps(spec: ArrivalSpec, rate_rps: float, seed: int) -> Iterator[float]:
    """The step's global inter-arrival gaps in seconds, endless and reproducible from ``seed``."""
    if not rate_rps > 0:
        raise ArrivalSpecError(f"--rate: expected a positive request rate, got {rate_rps:g}")
    mean = 1.0 / rate_rps
    if spec.kind == "constant":
        while True:
            yield mean
    rng = random.Random(seed)
    if spec.kind == "poisson":
        while True:
            yield rng.expovariate(rate_rps)
    shape = spec.burstiness
    while True:
        yield rng.gammavariate(shape, mean / shape)


def trace_gaps(times: list[float]) -> Iterator[float]:
    """A trace's gaps between consecutive rows (its times from 0, in order); finite."""
    for a, b in itertools.pairwise(times):
        yield b - a


class SlotSchedule:
    """One worker's share of a step's global schedule, as absolute times on the caller's clock.

    The first global arrival is at ``t0`` (gap 0), the next at ``t0 + gap_1``, and so on. A finite
    schedule (a trace) ends: past its last arrival, :meth:`next` returns infinity.
    """

    __slots__ = ("_gaps", "_t", "index", "last_index", "of", "slot", "taken")

    def __init__(
        self,
        spec: ArrivalSpec | None,
        rate_rps: float,
        seed: int,
        t0: float,
        slot: int,
        of: int,
        times: list[float] | None = None,
        first_index: int = 0,
    ) -> None:
        if not 0 <= slot < of:
            raise ValueError(f"slot {slot} of {of}")
        if times is not None:
            self._gaps = trace_gaps(times)
        else:
            assert spec is not None
            self._gaps = global_gaps(spec, rate_rps, seed)
        self.slot, self.of = slot, of
        self._t = t0 if times is None or times else math.inf
        for _ in range(slot):
            self._advance()
        #: The global index of the arrival :meth:`next` hands out next (a trace's row: a window
        #: of the trace starts at its ``first_index``).
        self.index = first_index + slot
        #: The global index of the arrival :meth:`next` handed out last.
        self.last_index = -1
        self.taken = 0

    def _advance(self) -> None:
        try:
            self._t += next(self._gaps)
        except StopIteration:
            self._t = math.inf

    def next(self) -> float:
        """The intended time of this worker's next arrival (infinity once a trace is done)."""
        t = self._t
        for _ in range(self.of):
            self._advance()
        self.taken += 1
        self.last_index, self.index = self.index, self.index + self.of
        return t

    def peek(self) -> float:
        return self._t
