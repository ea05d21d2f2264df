"""Load steps: what a shape asks for (a concurrency held for a duration) and the parsing of step
lists. Pure: the Locust shape in ``shapes.py`` drives them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "SHRINK_MAX_S",
    "Step",
    "StepSpecError",
    "parse_concurrency_list",
    "parse_rate_list",
    "rate_staircase",
    "spawn_rate",
    "staircase",
]

#: Going down, how long the previous step's extra users may take to stop before the step's
#: clock starts anyway (with a warning): a user that does not stop must not hang the run.
SHRINK_MAX_S = 30.0


def spawn_rate(users: int) -> float:
    """Users a second a step of ``users`` is spawned at (at least 10, at most 1,000): Locust
    dispatches ``floor(rate)`` users at once each second, so a step of up to 1,000 users starts
    them all at once, and its clock (which waits for them all) as soon as they run. The virtual
    sweep spawns as this says (and starts the clock at the next tick)."""
    return float(max(min(users, 1000), 10))


class StepSpecError(ValueError):
    """A step list or duration that cannot be used; the message names the option."""


@dataclass(frozen=True, slots=True)
class Step:
    index: int
    concurrency: int
    duration_s: float
    #: The first part of the step whose requests are left out of its statistics.
    warmup_s: float
    #: Open loop: requests per second across all workers (``concurrency`` is then the pool of
    #: users that send them, the most requests in flight). None: closed loop.
    rate_rps: float | None = None
    #: The step's own prompt length spec (the context-length sweep), else the run's.
    prompt_tokens: str | None = None
    #: The arrival process when not the run's ``--arrival``: ``trace`` (the trace's rows).
    arrival: str | None = None
    #: A trace step's rows (first, one past the last) and the trace time of the first, when the
    #: step replays a window of the trace (``--trace-steps``); None: the whole trace.
    trace_rows: tuple[int, int] | None = None

    def overrides(self) -> dict[str, str]:
        """Workload options this step sets for its requests (announced to every worker)."""
        return {"prompt_tokens": self.prompt_tokens} if self.prompt_tokens is not None else {}


@dataclass(frozen=True, slots=True)
class _Series:
    """What one kind of step list holds, for its parsing and its messages."""

    cast: type  # int or float
    example: str  # a list and a geometric series, as the message shows them
    items: str  # what each value must be
    bounds: str  # the geometric series' condition


_CONCURRENCY = _Series(int, "1,2,4,8 or 1:64:x2", "positive integers", "1 <= start <= stop")
_RATE = _Series(
    float, "0.5,1,2 or start:stop:xfactor like 1:16:x2 (requests per second)", "positive request rates",
    "0 < start <= stop",
)  # fmt: skip


def _parse_series(text: str, option: str, kind: _Series) -> list:
    """``a,b,c`` or a geometric series ``start:stop:xfactor`` (factor 2 when left out)."""
    text = text.strip()
    if not text:
        raise StepSpecError(f"{option}: expected a list like {kind.example}, got an empty value")
    integral = kind.cast is int
    if ":" in text:
        parts = text.split(":")
        try:
            start, stop = kind.cast(parts[0]), kind.cast(parts[1])
            factor = float(parts[2].lstrip("x")) if len(parts) > 2 else 2.0
        except (ValueError, IndexError):
            raise StepSpecError(f"{option}: expected a list like {kind.example}, got {text!r}") from None
        if not (0 < start <= stop < 1e7) or factor <= 1:
            raise StepSpecError(f"{option}: expected {kind.bounds} and a factor > 1, got {text!r}")
        values: list = []
        v = float(start)
        while (round(v) if integral else v) <= stop * (1 + 1e-9):
            x = round(v) if integral else round(v, 6)
            if not values or x != values[-1]:
                values.append(x)
            v *= factor
        return values
    values = []
    for item in text.split(","):
        try:
            x = kind.cast(item)
        except ValueError:
            raise StepSpecError(f"{option}: expected {kind.items}, got {item.strip()!r}") from None
        if not 0 < x < 1e7:
            raise StepSpecError(f"{option}: expected {kind.items}, got {x:g}")
        values.append(x)
    return values


def parse_concurrency_list(text: str, option: str = "--concurrency") -> list[int]:
    """``1,2,4,8`` or a geometric series ``1:64:x2`` (start:stop:xfactor)."""
    return _parse_series(text, option, _CONCURRENCY)


def parse_rate_list(text: str, option: str = "--rate") -> list[float]:
    """``0.5,1,2`` requests/s or a geometric series ``1:16:x2`` (start:stop:xfactor)."""
    return _parse_series(text, option, _RATE)


def rate_staircase(
    rates: list[float], duration_s: float, warmup: float = 0.2, max_in_flight: int = 512
) -> list[Step]:
    """Open-loop steps at the given rates. Each step's pool of users (the most requests in
    flight) is ``max_in_flight``: enough that arrivals never wait for a free user unless the
    server falls behind (the step is then flagged ``pool_exhausted``)."""
    if max_in_flight < 1:
        raise StepSpecError(f"--max-in-flight: expected a positive number of users, got {max_in_flight}")
    steps = staircase([max_in_flight] * len(rates), duration_s, warmup)
    return [
        Step(s.index, s.concurrency, s.duration_s, s.warmup_s, r) for s, r in zip(steps, rates, strict=True)
    ]


def staircase(concurrencies: list[int], duration_s: float, warmup: float = 0.2) -> list[Step]:
    """Steps of the given concurrencies. ``warmup`` < 1 is a fraction of each step, else seconds."""
    if duration_s <= 0:
        raise StepSpecError(f"--step-duration: expected a positive number of seconds, got {duration_s:g}")
    if warmup < 0:
        raise StepSpecError(f"--warmup: expected a fraction (< 1) or seconds (>= 1), got {warmup:g}")
    # Rounded to the nanosecond: 0.2 x 6 s is 1.2 s, not 1.2000000000000002.
    warmup_s = round(warmup * duration_s, 9) if warmup < 1 else warmup
    if warmup_s >= duration_s:
        raise StepSpecError(f"--warmup: {warmup_s:g} s leaves nothing of a {duration_s:g} s step to measure")
    return [Step(i, c, duration_s, warmup_s) for i, c in enumerate(concurrencies)]
