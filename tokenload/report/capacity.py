"""Latency SLOs and capacity planning from a sweep's steps. Pure: no file access.

What is computed, exactly:

* A step **meets** the SLO when every listed percentile of the step (``summary.json``'s per-step
  ``ttft_ms.p95`` etc., over the requests that started in its measured part) is at or under its
  limit. That is a statement about the step's aggregate, not about each request.
* The **capacity** is the highest load of the unbroken run of steps, from the lowest load up (in
  order of load, not of running: a knee search bisects downwards), that meet the SLO: a step
  that passes above one that failed is noise, not capacity one can rely on.
* The **good share** of a step is the share of its measured requests (ok or failed; failed ones
  are never good) that individually met every per-request threshold: ``ttft_ms <= X``,
  ``tpot_ms <= Y``, ``e2e_ms <= Z`` whatever the SLO's percentile. ITL is a per-token quantity (a
  request has many), so ITL limits judge steps but not single requests.
* **Goodput** at the capacity step = its measured rate x the good share (requests/s and output
  tokens/s; the token share weighs each request by its output tokens).
* **Replicas** for a target load = ceil(target / capacity per replica x (1 + headroom)); a run
  against several replicas, each scraped, measured their capacity together: per replica is that
  over their count (an average: an uneven fleet's hot replica has less).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_HEADROOM",
    "METRICS",
    "PER_REQUEST_METRICS",
    "QUANTILES",
    "SLO",
    "Capacity",
    "ReplicaPlan",
    "SLOError",
    "SLOItem",
    "Share",
    "StepCheck",
    "Target",
    "add_capacity_options",
    "capacity_options",
    "check_headroom",
    "check_steps",
    "find_capacity",
    "good_share",
    "parse_slo",
    "replicas_needed",
    "replicas_scraped",
    "search_capacity",
    "step_load",
]

METRICS = ("ttft", "tpot", "itl", "e2e")
QUANTILES = ("p50", "p90", "p95", "p99")
#: Metrics a single request has one value of (see the module docstring for ITL).
PER_REQUEST_METRICS = ("ttft", "tpot", "e2e")
DEFAULT_HEADROOM = 0.2

_FORM = (
    f"expected NAME=MS with NAME as METRIC_pQ_ms, METRIC one of {', '.join(METRICS)} "
    f"and pQ one of {', '.join(QUANTILES)} (e.g. ttft_p95_ms=1000)"
)


class SLOError(ValueError):
    """A bad ``--slo`` item; the message is one line naming it."""


@dataclass(frozen=True, slots=True)
class SLOItem:
    metric: str  # ttft, tpot, itl, e2e
    quantile: str  # p50, p90, p95, p99
    limit_ms: float

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.quantile}_ms"

    @property
    def field(self) -> str:
        """The per-step block in summary.json and the per-request field in requests.jsonl."""
        return f"{self.metric}_ms"

    def __str__(self) -> str:
        return f"{self.metric.upper()} {self.quantile} <= {self.limit_ms:g} ms"


@dataclass(frozen=True, slots=True)
class SLO:
    items: tuple[SLOItem, ...]

    def for_metric(self, metric: str) -> list[SLOItem]:
        return [i for i in self.items if i.metric == metric]

    def __str__(self) -> str:
        return ", ".join(str(i) for i in self.items)


def parse_slo(text: str) -> SLO:
    """``ttft_p95_ms=1000,tpot_p95_ms=50`` -> SLO. Raises SLOError naming the first bad item."""
    items: list[SLOItem] = []
    seen: set[str] = set()
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        parts = name.split("_")
        if not sep or len(parts) != 3 or parts[0] not in METRICS or parts[1] not in QUANTILES:
            raise SLOError(f"--slo: {item!r}: {_FORM}")
        if parts[2] != "ms":
            raise SLOError(f"--slo: {item!r}: limits are in milliseconds; {_FORM}")
        try:
            limit = float(value)
        except ValueError:
            raise SLOError(f"--slo: {item!r}: {value.strip()!r} is not a number of milliseconds") from None
        if not math.isfinite(limit) or limit <= 0:
            raise SLOError(f"--slo: {item!r}: the limit must be a positive number of milliseconds")
        if name in seen:
            raise SLOError(f"--slo: {item!r}: {name} is given twice")
        seen.add(name)
        items.append(SLOItem(parts[0], parts[1], limit))
    if not items:
        raise SLOError(f"--slo: empty; {_FORM}")
    return SLO(tuple(items))


def step_load(step: dict[str, Any]) -> float | None:
    """The offered load of a step: its concurrency, or its target rate for a rate step."""
    c = step.get("concurrency")
    return c if c is not None else step.get("target_rate_rps")


@dataclass(frozen=True, slots=True)
class StepCheck:
    index: int
    load: float | None
    meets: bool
    #: (item, the step's value or None when unknown, whether it is within the limit)
    results: tuple[tuple[SLOItem, float | None, bool], ...]

    @property
    def failed_items(self) -> list[str]:
        return [str(i) for i, _, ok in self.results if not ok]


def check_steps(steps: list[dict[str, Any]], slo: SLO) -> list[StepCheck]:
    """Per step, each SLO percentile against its limit. An unknown value (no requests) fails:
    a step with no evidence cannot be said to meet anything."""
    out = []
    for i, step in enumerate(steps):
        results = []
        for item in slo.items:
            v = (step.get(item.field) or {}).get(item.quantile)
            results.append((item, v, v is not None and v <= item.limit_ms))
        meets = bool(results) and all(ok for _, _, ok in results)
        out.append(StepCheck(step.get("index", i), step_load(step), meets, tuple(results)))
    return out


@dataclass(frozen=True, slots=True)
class Share:
    requests: int
    good: int
    output_tokens: int
    good_output_tokens: int

    @property
    def request_share(self) -> float | None:
        return self.good / self.requests if self.requests else None

    @property
    def token_share(self) -> float | None:
        return self.good_output_tokens / self.output_tokens if self.output_tokens else self.request_share


def good_share(requests: Iterable[dict[str, Any]], step_index: int, slo: SLO) -> Share:
    """Of the requests that started in the step's measured part, those that met every
    per-request threshold (see the module docstring)."""
    per_request = [i for i in slo.items if i.metric in PER_REQUEST_METRICS]
    n = good = tokens = good_tokens = 0
    for rec in requests:
        if rec.get("step") != step_index or rec.get("phase") != "measure":
            continue
        n += 1
        out = rec.get("output_tokens") or 0
        tokens += out if rec.get("status") == "ok" else 0
        if rec.get("status") != "ok":
            continue
        ok = True
        for item in per_request:
            v = rec.get(item.field)
            # TPOT is undefined for a one-token answer; it cannot break a TPOT limit.
            if v is None and item.metric == "tpot":
                continue
            if v is None or v > item.limit_ms:
                ok = False
                break
        if ok:
            good += 1
            good_tokens += out
    return Share(n, good, tokens, good_tokens)


@dataclass(frozen=True, slots=True)
class Capacity:
    """The highest load that meets the SLO (or, without an SLO, the last unsaturated step)."""

    step_index: int
    load: float
    load_unit: str  # "users" or "req/s (target rate)"
    requests_per_s: float
    output_tokens_per_s: float
    basis: str  # how this step was chosen, in words
    share: Share | None = None

    @property
    def goodput_requests_per_s(self) -> float | None:
        s = self.share.request_share if self.share else None
        return None if s is None else self.requests_per_s * s

    @property
    def goodput_output_tokens_per_s(self) -> float | None:
        s = self.share.token_share if self.share else None
        return None if s is None else self.output_tokens_per_s * s

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``tokenload plan --json``'s ``slo_capacity``)."""
        return {
            "step": self.step_index,
            "load": self.load,
            "load_unit": self.load_unit,
            "basis": self.basis,
            "requests_per_s": self.requests_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "goodput_requests_per_s": self.goodput_requests_per_s,
            "goodput_output_tokens_per_s": self.goodput_output_tokens_per_s,
        }


def _unit(step: dict[str, Any]) -> str:
    return "users" if step.get("concurrency") is not None else "req/s (target rate)"


def find_capacity(
    steps: list[dict[str, Any]],
    slo: SLO | None,
    requests: Iterable[dict[str, Any]] = (),
) -> Capacity | None:
    """With an SLO: the highest load of the passing steps from the first (None if the first
    fails). Without: the last step whose verdict is not saturated, before the first saturated one."""
    if not steps:
        return None
    # In order of load, whatever order the steps ran in (a knee search bisects downwards).
    steps = sorted(steps, key=lambda s: step_load(s) or 0.0)
    chosen: int | None = None
    if slo is not None:
        for i, check in enumerate(check_steps(steps, slo)):
            if not check.meets:
                break
            chosen = i
        basis = f"highest load meeting the SLO ({slo}) at every step up to it"
        if chosen == len(steps) - 1:
            # Every step met it: the highest run is a floor, and replicas sized from it a ceiling.
            basis += "; the highest step run: the real capacity is at least this"
    else:
        for i, step in enumerate(steps):
            v = step.get("verdict") or {}
            if v.get("saturated") and v.get("bottleneck") != "client":
                break
            chosen = i
        basis = "last step before saturation (no SLO given)"
        if chosen == len(steps) - 1:
            basis = "highest step run, not saturated: the real capacity is at least this"
    if chosen is None:
        return None
    step = steps[chosen]
    load = step_load(step)
    if load is None:
        return None
    share = good_share(requests, step.get("index", chosen), slo) if slo is not None else None
    return Capacity(
        step_index=step.get("index", chosen),
        load=load,
        load_unit=_unit(step),
        requests_per_s=step.get("requests_per_s") or 0.0,
        output_tokens_per_s=step.get("output_tokens_per_s") or 0.0,
        basis=basis,
        share=share,
    )


def search_capacity(
    steps: list[dict[str, Any]], search: dict[str, Any], slo: SLO, requests: Iterable[dict[str, Any]] = ()
) -> Capacity | None:
    """The capacity an SLO search (``--shape slo``, summary.json's ``search``) found: its answer
    step, the highest rate shown to meet the SLO on 95 % intervals (None when none was)."""
    index = search.get("answer_step")
    step = next((s for s in steps if s.get("index") == index), None) if index is not None else None
    if step is None or search.get("slo_capacity_rps") is None:
        return None
    hi = (search.get("bracket") or [None, None])[1]
    above = f"; the lowest rate above it that did not: {hi:g} req/s" if hi is not None else ""
    if not search.get("determinate", True):
        above += " (an end of that bracket straddled the limit and was decided on point estimates)"
    if search.get("answer_is_screen"):
        above += "; a screen held for --step-duration only, not confirmed in full: the search stopped first"
    return Capacity(
        step_index=index,
        load=float(search["slo_capacity_rps"]),
        load_unit=_unit(step),
        requests_per_s=step.get("requests_per_s") or 0.0,
        output_tokens_per_s=step.get("output_tokens_per_s") or 0.0,
        basis=(f"SLO search ({search.get('outcome')}): highest probed rate meeting the SLO{above}"),
        share=good_share(requests, index, slo),
    )


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # "rps" or "users"
    value: float

    def __post_init__(self) -> None:
        if self.kind not in ("rps", "users"):
            raise ValueError(f"target kind must be 'rps' or 'users', got {self.kind!r}")
        if not math.isfinite(self.value) or self.value <= 0:
            raise ValueError(f"--target-{self.kind}: expected a positive number, got {self.value:g}")


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    target: Target
    per_replica: float
    headroom: float
    replicas: int
    #: The replicas the measured capacity was served by (those scraped; 1 for one server).
    replicas_in_run: int = 1

    @property
    def formula(self) -> str:
        unit = "req/s" if self.target.kind == "rps" else "users"
        n = self.replicas_in_run
        per = (
            f"{self.per_replica:.3g} {unit} per replica"
            if n == 1
            else f"({self.per_replica * n:.3g} {unit} / {n} replicas scraped) per replica"
        )
        head = f"(1 + {self.headroom:g} headroom)"
        return f"ceil({self.target.value:g} {unit} / {per} x {head}) = {self.replicas}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``tokenload plan --json``'s ``replicas``)."""
        return {
            "replicas": self.replicas,
            "target": {"kind": self.target.kind, "value": self.target.value},
            "per_replica": self.per_replica,
            "headroom": self.headroom,
            "replicas_in_run": self.replicas_in_run,
            "formula": self.formula,
        }


def replicas_scraped(steps: list[dict[str, Any]]) -> int:
    """The replicas the run's load was spread over: the most whose figures any step holds
    (``server_replicas``; 1 for one server), when every replica behind the target was scraped.
    The most, not the capacity step's own count: a scrape that failed there leaves the fleet as
    large."""
    return max((len(st.get("server_replicas") or {}) for st in steps), default=0) or 1


def replicas_needed(
    capacity: Capacity, target: Target, headroom: float = DEFAULT_HEADROOM, replicas_in_run: int = 1
) -> ReplicaPlan:
    """Replicas to carry ``target`` with ``headroom`` spare. Per replica: the capacity step's
    measured requests/s for an rps target; its concurrency for a users target (for a rate step,
    Little's law is not applied: the users a rate step carried are not measured, so it fails);
    divided by ``replicas_in_run`` when the run's load was served by that many replicas (each
    one scraped: a fleet's capacity is theirs together)."""
    check_headroom(headroom)
    if target.kind == "rps":
        per = capacity.requests_per_s
    else:
        if capacity.load_unit != "users":
            raise ValueError("--target-users: the sweep ran target rates, not users; use --target-rps")
        per = capacity.load
    if per <= 0:
        raise ValueError("the capacity step completed no requests: no per-replica capacity to plan with")
    if replicas_in_run < 1:
        raise ValueError(f"replicas in the run: expected at least 1, got {replicas_in_run}")
    per /= replicas_in_run
    # The small epsilon keeps 2.4 / 1.2 x 1.0 (exactly 2 in decimal) from rounding up to 3.
    replicas = max(1, math.ceil(target.value / per * (1.0 + headroom) - 1e-9))
    return ReplicaPlan(target, per, headroom, replicas, replicas_in_run)


def check_headroom(headroom: float) -> float:
    """The headroom as given, or ValueError: a share from 0 to 1 (0.2: replicas for 1.2 x the
    target). Above 1 is refused as a likely percentage (``--headroom 20`` would plan 21 x the
    target); a target that is to grow is given as the larger target."""
    if not (math.isfinite(headroom) and 0.0 <= headroom <= 1.0):
        raise ValueError(
            f"--headroom: expected a share from 0 to 1 (0.2 = 20 % spare over the target), got {headroom:g}"
        )
    return headroom


def add_capacity_options(p: argparse.ArgumentParser) -> None:
    """--slo, --target-rps or --target-users, --headroom: how ``tokenload report`` and
    ``tokenload plan`` judge capacity and size replicas (one declaration for both)."""
    p.add_argument(
        "--slo", default=None, help="latency SLO for the capacity, e.g. ttft_p95_ms=1000,tpot_p95_ms=50"
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument("--target-rps", type=float, default=None, help="size replicas for this req/s")
    target.add_argument("--target-users", type=float, default=None, help="size replicas for these users")
    p.add_argument(
        "--headroom",
        type=float,
        default=None,
        help=f"capacity to spare over the target, a share of it from 0 to 1 (default {DEFAULT_HEADROOM:g}: "
        f"replicas for {1 + DEFAULT_HEADROOM:g} x the target)",
    )


def capacity_options(args: argparse.Namespace) -> tuple[SLO | None, Target | None, float]:
    """The SLO, target and headroom that :func:`add_capacity_options` declared, checked (SLOError
    or ValueError, one line naming the option)."""
    slo = parse_slo(args.slo) if args.slo is not None else None
    target = None
    if args.target_rps is not None:
        target = Target("rps", args.target_rps)
    elif args.target_users is not None:
        target = Target("users", args.target_users)
    headroom = check_headroom(DEFAULT_HEADROOM if args.headroom is None else args.headroom)
    return slo, target, headroom
