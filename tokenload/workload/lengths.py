"""Length distributions for input and output tokens (and durations such as think time).

Parsed from compact specs: ``128`` or ``fixed:128``, ``uniform:64-256``, ``normal:512,128``,
``lognormal:mean=512,sigma=0.6`` (or ``median=``), ``empirical:hist.csv`` (``length,weight`` rows)
or ``empirical:lengths.json`` (a list of lengths, ``[length, weight]`` pairs or
``{"length", "weight"}`` objects). Sampling takes the caller's ``random.Random``, so every
worker draws from its own seeded stream (:func:`tokenload.workload.seeds.stream_for`).
"""

from __future__ import annotations

import bisect
import csv
import json
import math
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tokenload.workload.errors import WorkloadError, read_text
from tokenload.workload.seeds import stream_for

__all__ = [
    "Distribution",
    "Empirical",
    "Fixed",
    "LogNormal",
    "Normal",
    "Uniform",
    "fitting_lengths",
    "parse_length_spec",
    "parse_seconds_spec",
    "prefix_misfit",
    "stream_for",
]

# Redraws allowed while truncating (a length >= 1, a duration >= 0); parsing keeps the kept
# share of the mass large, so this bound is never reached in practice.
_MAX_REDRAWS = 10_000


def _phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


class Distribution(ABC):
    """A distribution of lengths (``sample``: integers >= 1) or durations (``sample_seconds``)."""

    spec: str

    @abstractmethod
    def draw(self, rng: random.Random) -> float:
        """One raw value, before rounding or truncation."""

    def sample(self, rng: random.Random) -> int:
        """One length: the raw value rounded, redrawn until it is >= 1 (a truncated distribution)."""
        for _ in range(_MAX_REDRAWS):
            v = round(self.draw(rng))
            if v >= 1:
                return v
        raise WorkloadError(f"{self.spec}: expected a distribution with mass at lengths >= 1")

    def sample_seconds(self, rng: random.Random) -> float:
        """One duration in seconds, redrawn until it is >= 0."""
        for _ in range(_MAX_REDRAWS):
            v = self.draw(rng)
            if v >= 0:
                return v
        raise WorkloadError(f"{self.spec}: expected a distribution with mass at durations >= 0")

    @abstractmethod
    def mean(self) -> float:
        """The expected value of :meth:`sample` (for reports, e.g. a requested prefix-hit rate)."""

    def least(self) -> int:
        """The smallest length :meth:`sample` can give (1 for an unbounded distribution)."""
        return 1

    def most(self) -> int | None:
        """The largest length :meth:`sample` can give (None for an unbounded distribution)."""
        return None


@dataclass(frozen=True)
class Fixed(Distribution):
    value: float
    spec: str = ""

    def draw(self, rng: random.Random) -> float:
        return self.value

    def mean(self) -> float:
        return float(round(self.value))

    def least(self) -> int:
        return max(1, round(self.value))

    def most(self) -> int:
        return self.least()


@dataclass(frozen=True)
class Uniform(Distribution):
    """Every integer of ``low..high`` equally likely (a continuous ``[low, high]`` for durations)."""

    low: float
    high: float
    spec: str = ""

    def draw(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)

    def sample(self, rng: random.Random) -> int:
        return rng.randint(int(self.low), int(self.high))

    def mean(self) -> float:
        return (int(self.low) + int(self.high)) / 2

    def least(self) -> int:
        return max(1, int(self.low))

    def most(self) -> int:
        return max(1, int(self.high))


@dataclass(frozen=True)
class Normal(Distribution):
    """A normal distribution truncated to lengths >= 1 (durations >= 0) by redrawing."""

    mu: float
    sigma: float
    spec: str = ""

    def draw(self, rng: random.Random) -> float:
        return rng.gauss(self.mu, self.sigma)

    def least(self) -> int:
        return max(1, round(self.mu)) if self.sigma == 0 else 1

    def most(self) -> int | None:
        return self.least() if self.sigma == 0 else None

    def mean(self) -> float:
        if self.sigma == 0:
            return float(round(self.mu))
        return _discrete_mean(lambda x: _phi((x - self.mu) / self.sigma), int(self.mu + 12 * self.sigma) + 2)


@dataclass(frozen=True)
class LogNormal(Distribution):
    """``exp(N(mu, sigma))``: ``median = exp(mu)``, ``mean = exp(mu + sigma**2 / 2)``."""

    mu: float
    sigma: float
    spec: str = ""

    def draw(self, rng: random.Random) -> float:
        return math.exp(rng.gauss(self.mu, self.sigma))

    def least(self) -> int:
        return max(1, round(math.exp(self.mu))) if self.sigma == 0 else 1

    def most(self) -> int | None:
        return self.least() if self.sigma == 0 else None

    def mean(self) -> float:
        mu, s = self.mu, self.sigma
        if s == 0:
            return float(max(1, round(math.exp(mu))))

        def cdf(x: float) -> float:
            return _phi((math.log(x) - mu) / s) if x > 0 else 0.0

        top = int(min(math.exp(mu + 9 * s), 200_000)) + 2
        body = _discrete_mean(cdf, top, normalise=False)
        # Beyond ``top`` rounding no longer matters: the continuous partial expectation.
        tail = math.exp(mu + s * s / 2) * _phi((mu + s * s - math.log(top + 0.5)) / s)
        return (body + tail) / (1.0 - cdf(0.5))


@dataclass(frozen=True)
class Empirical(Distribution):
    """Values drawn in proportion to their weights (a histogram from a file)."""

    values: tuple[float, ...]
    cum_weights: tuple[float, ...]
    spec: str = ""

    def draw(self, rng: random.Random) -> float:
        i = bisect.bisect_right(self.cum_weights, rng.random() * self.cum_weights[-1])
        return self.values[min(i, len(self.values) - 1)]

    def mean(self) -> float:
        prev, total = 0.0, 0.0
        for v, c in zip(self.values, self.cum_weights, strict=True):
            total += round(v) * (c - prev)
            prev = c
        return total / self.cum_weights[-1]

    def _kept(self) -> list[int]:
        # Values with weight that sample() keeps (a value rounding below 1 is drawn again).
        prev, kept = 0.0, []
        for v, c in zip(self.values, self.cum_weights, strict=True):
            if c > prev and round(v) >= 1:
                kept.append(round(v))
            prev = c
        return kept

    def least(self) -> int:
        return min(self._kept(), default=1)

    def most(self) -> int:
        return max(self._kept(), default=1)


def _discrete_mean(cdf: Callable[[float], float], top: int, normalise: bool = True) -> float:
    """Mean of ``round(X)`` over 1..top given X's CDF, conditioned on ``round(X) >= 1``."""
    total, prev = 0.0, cdf(0.5)
    for k in range(1, top + 1):
        cur = cdf(k + 0.5)
        total += k * (cur - prev)
        prev = cur
    kept = 1.0 - cdf(0.5)
    return total / kept if normalise else total


def prefix_misfit(dist: Distribution, prefix_tokens: int) -> str | None:
    """Why prompts of ``dist`` cannot each be a shared prefix of ``prefix_tokens`` and a part of
    their own, or None: the longest it can draw is no longer than the prefix, or (unbounded:
    normal, lognormal) its mean is not, so half its draws or more (the median is at or below the
    mean) would be drawn again."""
    most = dist.most()
    if most is not None and most <= prefix_tokens:
        return f"the longest {dist.spec} can draw is {most} tokens"
    if most is None and dist.mean() <= prefix_tokens:
        return f"{dist.spec}'s mean is {dist.mean():.0f} tokens: half its draws or more would be drawn again"
    return None


#: Draws of an (input, output) pair that does not fit the model's context before a run stops.
MAX_FIT_REDRAWS = 100


def fitting_lengths(
    draw: Callable[[], tuple[int, int]],
    max_model_len: int | None,
    min_input: int = 1,
    names: str = "input_tokens/output_tokens",
) -> tuple[int, int, int]:
    """An (input, output) pair from ``draw`` that fits ``max_model_len`` (input + output <= it, as
    vLLM admits a request) with an input of at least ``min_input`` tokens (longer than a shared
    prefix every prompt starts with), and how many were drawn again before it: the workload's
    distribution truncated to what the server takes, as a real server's 400 would otherwise cut it.
    WorkloadError after :data:`MAX_FIT_REDRAWS` in a row (lengths the model or prefix cannot take),
    naming the lengths' options as ``names``."""
    for redrawn in range(MAX_FIT_REDRAWS):
        n_in, n_out = draw()
        if n_in >= min_input and (max_model_len is None or n_in + n_out <= max_model_len):
            return n_in, n_out, redrawn
    why = [f"exceed the model's max_model_len of {max_model_len}"] if max_model_len is not None else []
    if min_input > 1:
        why.append(f"have a prompt shorter than {min_input} tokens (the shared prefix and one more)")
    raise WorkloadError(f"{names}: {MAX_FIT_REDRAWS} draws in a row {' or '.join(why) or 'did not fit'}")


# -- parsing ---------------------------------------------------------------------------------

_EXPECT = {
    "fixed": ("fixed:N with an integer N >= 1", "fixed:SECONDS with SECONDS >= 0"),
    "uniform": ("uniform:LOW-HIGH with integers 1 <= LOW <= HIGH", "uniform:LOW-HIGH with 0 <= LOW <= HIGH"),
    "normal": (
        "normal:MEAN,STD (or normal:mean=M,std=S) with MEAN >= 1 and STD >= 0",
        "normal:MEAN,STD (or normal:mean=M,std=S) with MEAN >= 0 and STD >= 0",
    ),
    "lognormal": ("lognormal:mean=M,sigma=S (or median=M) with M > 0 and 0 <= S <= 5",) * 2,
    "empirical": ("empirical:PATH to a CSV of length,weight rows or a JSON list",) * 2,
}
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"


def parse_length_spec(
    spec: str | int, field: str = "input_tokens", base_dir: str | Path | None = None
) -> Distribution:
    """A token-length distribution (integers >= 1) from its spec; relative file paths are read
    from ``base_dir`` (default: the working directory)."""
    return _parse(spec, field, integer=True, base_dir=base_dir)


def parse_seconds_spec(
    spec: str | float, field: str = "think_time_s", base_dir: str | Path | None = None
) -> Distribution:
    """A duration distribution (seconds >= 0, sampled with ``sample_seconds``) from its spec."""
    return _parse(spec, field, integer=False, base_dir=base_dir)


def _parse(spec: str | float, field: str, integer: bool, base_dir: str | Path | None) -> Distribution:
    if isinstance(spec, bool) or not isinstance(spec, (str, int, float)):
        raise WorkloadError(
            f"{field}: expected a distribution spec such as fixed:128 or uniform:64-256, got {spec!r}"
        )
    text = str(spec).strip()
    kind, sep, args = text.partition(":")
    kind = kind.strip().lower()
    if not sep:
        kind, args = "fixed", text
    args = args.strip()
    floor = 1.0 if integer else 0.0

    def fail(k: str) -> WorkloadError:
        return WorkloadError(f"{field}: expected {_EXPECT[k][0 if integer else 1]}, got {text!r}")

    if kind == "fixed":
        v = _number(args, integer)
        if v is None or v < floor:
            raise fail("fixed")
        return Fixed(v, spec=f"fixed:{_fmt(v)}")
    if kind == "uniform":
        m = re.fullmatch(rf"({_NUMBER})\s*[-,]\s*({_NUMBER})", args)
        lo = _number(m.group(1), integer) if m else None
        hi = _number(m.group(2), integer) if m else None
        if lo is None or hi is None or lo < floor or hi < lo:
            raise fail("uniform")
        return Uniform(lo, hi, spec=f"uniform:{_fmt(lo)}-{_fmt(hi)}")
    if kind == "normal":
        p = _params(args, ("mean", "std"), {"sd": "std", "sigma": "std", "mu": "mean"})
        if p is None or p["mean"] < floor or p["std"] < 0:
            raise fail("normal")
        return Normal(p["mean"], p["std"], spec=f"normal:{_fmt(p['mean'])},{_fmt(p['std'])}")
    if kind == "lognormal":
        return _lognormal(args, fail)
    if kind == "empirical":
        if not args:
            raise fail("empirical")
        path = Path(args)
        if base_dir is not None and not path.is_absolute():
            path = Path(base_dir) / path
        values, weights = _read_histogram(path, field, integer)
        cum, total = [], 0.0
        for w in weights:
            total += w
            cum.append(total)
        return Empirical(tuple(values), tuple(cum), spec=f"empirical:{path}")
    raise WorkloadError(
        f"{field}: expected fixed:, uniform:, normal:, lognormal: or empirical: followed by parameters "
        f"(e.g. uniform:64-256), got {text!r}"
    )


def _lognormal(args: str, fail: Callable[[str], WorkloadError]) -> LogNormal:
    m = {}
    for part in args.split(","):
        key, eq, value = part.partition("=")
        if not eq:
            m[len(m)] = part.strip()  # positional: mean, sigma
        else:
            m[key.strip().lower()] = value.strip()
    if 0 in m:
        m.setdefault("mean", m.pop(0))
    if 1 in m:
        m.setdefault("sigma", m.pop(1))
    centre_keys = [k for k in ("mean", "median") if k in m]
    if len(centre_keys) != 1 or "sigma" not in m or set(m) - {"mean", "median", "sigma"}:
        raise fail("lognormal")
    centre, sigma = _number(m[centre_keys[0]], False), _number(m["sigma"], False)
    if centre is None or sigma is None or centre <= 0 or not 0 <= sigma <= 5:
        raise fail("lognormal")
    mu = math.log(centre) - (sigma * sigma / 2 if centre_keys[0] == "mean" else 0.0)
    return LogNormal(mu, sigma, spec=f"lognormal:{centre_keys[0]}={_fmt(centre)},sigma={_fmt(sigma)}")


def _params(args: str, names: tuple[str, ...], aliases: dict[str, str]) -> dict[str, float] | None:
    parts = [p.strip() for p in args.split(",")]
    if len(parts) != len(names):
        return None
    out: dict[str, float] = {}
    for i, part in enumerate(parts):
        key, eq, value = part.partition("=")
        name = aliases.get(key.strip().lower(), key.strip().lower()) if eq else names[i]
        number = _number(value if eq else part, False)
        if name not in names or name in out or number is None:
            return None
        out[name] = number
    return out


def _number(text: str, integer: bool) -> float | None:
    text = text.strip()
    if not re.fullmatch(_NUMBER, text):
        return None
    v = float(text)
    if integer:
        if v != int(v):
            return None
        return int(v)
    return v


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _read_histogram(path: Path, field: str, integer: bool) -> tuple[list[float], list[float]]:
    where = f"{field}: {path}"
    raw = read_text(path, where)
    if not raw.strip():
        raise WorkloadError(f"{where}: empty file, expected length,weight rows or a JSON list")
    kind = "length" if integer else "value"
    rows = _json_rows(raw, where) if path.suffix.lower() == ".json" else _csv_rows(raw)
    values: list[float] = []
    weights: list[float] = []
    for label, cells in rows:
        value = _number(str(cells[0]), integer) if cells and not isinstance(cells[0], bool) else None
        weight = _number(str(cells[1]), False) if len(cells) == 2 and not isinstance(cells[1], bool) else None
        if len(cells) == 1:
            weight = 1.0
        if value is None or weight is None or len(cells) > 2 or value < (1 if integer else 0):
            minimum = "an integer length >= 1" if integer else "a value >= 0"
            raise WorkloadError(
                f"{where} {label}: expected {kind},weight with {minimum} and a weight >= 0, got {cells!r}"
            )
        values.append(value)
        weights.append(weight)
    if not values:
        raise WorkloadError(f"{where}: no rows, expected length,weight rows or a JSON list")
    if sum(weights) <= 0:
        raise WorkloadError(f"{where}: expected a positive total weight, got {sum(weights)}")
    return values, weights


def _csv_rows(raw: str) -> list[tuple[str, list]]:
    rows = []
    for line_no, cells in enumerate(csv.reader(raw.splitlines()), start=1):
        cells = [c.strip() for c in cells]
        if not any(cells):
            continue
        if line_no == 1 and _number(cells[0], False) is None:
            continue  # a header row such as "length,weight"
        rows.append((f"line {line_no}", cells))
    return rows


def _json_rows(raw: str, where: str) -> list[tuple[str, list]]:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where} line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(doc, list):
        raise WorkloadError(f"{where}: expected a JSON list, got {type(doc).__name__}")
    rows = []
    for i, item in enumerate(doc):
        if isinstance(item, dict):
            cells = [item.get("length", item.get("value")), item.get("weight", 1)]
        elif isinstance(item, list):
            cells = item
        else:
            cells = [item]
        rows.append((f"item {i}", list(cells)))
    return rows
