"""Comparing two runs step by step, and telling a change from run-to-run noise. Pure.

Steps are matched by load (concurrency, or target rate for rate steps) and prompt length. For
each matched step and each metric (TTFT/TPOT/ITL/E2E p50 and p99, output tokens/s, requests/s)
the change is ``B / A - 1`` of the figures in the two summary.json files.

The rule (statistics in tokenload/report/noise.py). The samples of a step are the per-request
values of its measured part in requests.jsonl (``step`` = its index, ``phase`` = ``measure``, ok
requests); ITL has no per-token samples there, so each request's own ITL p50 (p99) stands in.

A latency percentile is a **regression** when all of these hold:

1. it is worse (higher) in B by more than ``--tolerance`` (relative);
2. sampling noise: the ``CONFIDENCE`` bootstrap interval of the change (seeded) lies entirely
   above zero. Requests of one run are not independent (a closed loop settles into a rhythm of
   arrivals; a step drifts): the interval is widened by the square root of each run's
   correlation factor (noise.correlation_factor: batch medians in time order against the same
   requests shuffled), so correlated requests count for fewer. A percentile with fewer than 5
   samples beyond it a side (10 requests for p50, 500 for p99) is not judged;
3. run-to-run noise, given A and 2 or more repeats (``--baseline-runs``): B lies outside the
   prediction interval of those runs' values (noise.run_to_run_bound). Identical
   configurations can differ for real from run to run (TTFT p50 at 8 users of 19.6 and 26.2 ms
   on the emulator, each with a tight interval): only repeats measure that, and without them the
   comparison says it was not measured. Nothing here requires a change wider than the
   distribution itself (an earlier rule asked for more than the P10-P90 spread of per-request
   values, which no slowdown of a wide latency distribution could pass);
4. it is above a jitter floor, ``JITTER_MS`` (2 ms for TTFT and E2E, single timestamps that each
   carry a scheduling delay of a shared host; 0.2 ms for the per-token TPOT and ITL).

A rate is a **regression** when it is lower in B by more than the tolerance, its counting
interval (noise.rate_interval: completions as a closed-loop renewal count, or Poisson for rate
steps) lies entirely below zero, B lies below the baseline runs' prediction interval when
``--baseline-runs`` are given (rule 3: a closed loop's rhythm moves its throughput from run to
run as much as its latencies), and neither run was ``client_bound`` at the step: a load
generator that cannot keep up sets a closed loop's pace itself (it cost one run 22 % of its
throughput at 1 user on a busy 2-core machine), so such a step's rates are not judged.

Steps are matched by load and workload (a context sweep's prompt length), so each step is
compared with its own counterpart; runs that sent other requests (``WORKLOAD_CONFIG``) are
refused. **Beyond noise** means 2-4 (latencies), or the counting interval and rule 3 (rates),
whichever the direction. Both halves are needed: identical configurations differ by a few
percent for real (beyond noise, within tolerance), and small or correlated samples differ by a
lot by chance.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tokenload.analysis.thresholds import CLOSE_CALL
from tokenload.loadgen.options import config_differences, workload_differences
from tokenload.report.noise import (
    BOOTSTRAP_ROUNDS,
    CONFIDENCE,
    bootstrap_interval,
    centre_interval,
    correlation_factor,
    count_variance,
    rate_interval,
    run_to_run_bound,
    spread,
    widen_interval,
)
from tokenload.report.redact import redact
from tokenload.results.prediction import prediction_label

__all__ = [
    "DEFAULT_TOLERANCE",
    "JITTER_MS",
    "LATENCY_METRICS",
    "RATE_METRICS",
    "TOKENS_BY_ARRIVAL_SINCE",
    "TOKEN_COUNT_NOTE",
    "Comparison",
    "MetricChange",
    "StepComparison",
    "compare_runs",
    "request_samples",
    "step_key",
    "tokens_by_arrival",
]

DEFAULT_TOLERANCE = 0.1
JITTER_MS = {"ttft_ms": 2.0, "e2e_ms": 2.0, "tpot_ms": 0.2, "itl_ms": 0.2}
LATENCY_METRICS = tuple((m, q) for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms") for q in ("p50", "p99"))
RATE_METRICS = ("output_tokens_per_s", "requests_per_s")
_QUANTILE = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


def step_key(step: dict[str, Any]) -> tuple[str, float, str] | None:
    """(unit, load, prompt length spec) of a step: its load, and the workload a context sweep varies."""
    prompt = str(step.get("prompt_tokens") or "")
    if step.get("target_rate_rps") is not None:
        return ("req/s", float(step["target_rate_rps"]), prompt)
    if step.get("concurrency") is not None:
        return ("users", float(step["concurrency"]), prompt)
    return None


def _key_label(key: tuple[str, float, str]) -> str:
    unit = "user" if key[:2] == ("users", 1.0) else key[0]
    return f"{key[1]:g} {unit}" + (f", prompt {key[2]}" if key[2] else "")


def request_samples(
    requests: list[dict[str, Any]], step_index: int, metric: str, quantile: str
) -> list[float]:
    """Per-request values of a metric for the requests in the step's measured part, in the
    order they started (``wall_start`` when recorded)."""
    name = {"itl_ms": f"itl_{quantile}_ms"}.get(metric, metric)
    out = []
    for r in requests:
        if r.get("step") != step_index or r.get("phase") != "measure" or r.get("status") != "ok":
            continue
        v = r.get(name)
        if isinstance(v, int | float) and math.isfinite(v):
            t = r.get("wall_start")
            out.append((float(t) if isinstance(t, int | float) else 0.0, float(v)))
    out.sort(key=lambda tv: tv[0])  # stable: records without a start keep their order
    return [v for _, v in out]


@dataclass(slots=True)
class MetricChange:
    metric: str  # "ttft_ms p50", "output_tokens_per_s"
    a: float | None
    b: float | None
    change: float | None  # b / a - 1
    interval: tuple[float, float] | None  # sampling (latencies) or counting (rates) noise of the change
    spread: float | None  # latencies: the wider P90 - P10 of the two runs' per-request values (shown)
    samples: tuple[int, int]  # per-request samples (latencies) or completions (rates)
    beyond_noise: bool
    worse: bool
    regression: bool
    not_judged: str | None = None  # why the noise could not be judged
    #: Latencies: the baseline runs' prediction interval for one more run (--baseline-runs).
    run_to_run: tuple[float, float] | None = None

    #: The --tolerance it was judged with: a change within it is never a regression.
    tolerance: float = 0.0

    @property
    def flag(self) -> str:
        """REGRESSION; else the direction and why it is not one: within the tolerance, within
        the noise, or not judged (and why); nothing for a change that shows as 0.0 %."""
        if self.regression:
            return "REGRESSION"
        if self.change is None or abs(self.change) < 5e-4:  # shows as +0.0 %
            return ""
        side = "worse" if self.worse else "better"
        if abs(self.change) <= self.tolerance:
            return f"{side}, within tolerance"
        if self.not_judged:
            return f"{side}, not judged: {self.not_judged}"
        return f"{side}, beyond noise" if self.beyond_noise else f"{side}, within noise"


@dataclass(slots=True)
class StepComparison:
    key: tuple[str, float]
    index_a: int
    index_b: int
    verdict_a: str | None
    verdict_b: str | None
    changes: list[MetricChange]
    #: Warnings about the step, e.g. a run whose load generator was client-bound there.
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return _key_label(self.key)

    @property
    def verdict_changed(self) -> bool:
        return self.verdict_a != self.verdict_b


@dataclass(slots=True)
class Comparison:
    run_a: str
    run_b: str
    tolerance: float
    confidence: float
    seed: int
    steps: list[StepComparison]
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    config_diff: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: Further runs of A's configuration that measured run-to-run noise.
    baseline_runs: int = 0
    #: A run that is a prediction (``tokenload plan --out``): its label, else None.
    prediction_a: str | None = None
    prediction_b: str | None = None

    @property
    def regressions(self) -> list[tuple[str, MetricChange]]:
        return [(s.label, c) for s in self.steps for c in s.changes if c.regression]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for s, sd in zip(self.steps, d["steps"], strict=True):
            sd["label"] = s.label
            sd["verdict_changed"] = s.verdict_changed
            for c, cd in zip(s.changes, sd["changes"], strict=True):
                cd["flag"] = c.flag
        d["regressions"] = [
            {"step": label, "metric": c.metric, "change": c.change} for label, c in self.regressions
        ]
        return d


def _value(step: dict[str, Any], metric: str, quantile: str | None) -> float | None:
    v = (step.get(metric) or {}).get(quantile) if quantile else step.get(metric)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def _change(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return b / a - 1.0


def _beyond(
    change: float | None,
    interval: tuple[float, float] | None,
    b: float | None,
    run_to_run: tuple[float, float] | None,
) -> bool:
    """A change is beyond noise when its interval excludes zero and, given baseline runs, B lies
    outside their prediction interval on the side the change went."""
    if not change or interval is None:
        return False
    if not ((change > 0 and interval[0] > 0) or (change < 0 and interval[1] < 0)):
        return False
    if run_to_run is None or b is None:
        return True
    return b > run_to_run[1] if change > 0 else b < run_to_run[0]


def _latency_change(
    name: str,
    metric: str,
    a: float | None,
    b: float | None,
    xa: list[float],
    xb: list[float],
    interval: tuple[float, float] | None,
    tolerance: float,
    run_to_run: tuple[float, float] | None = None,
) -> MetricChange:
    change = _change(a, b)
    wide = max((w for w in (spread(xa), spread(xb)) if w is not None), default=None)
    not_judged = None
    if interval is None:
        not_judged = "too few samples"
    diff = abs((b or 0.0) - (a or 0.0))
    beyond = _beyond(change, interval, b, run_to_run) and diff > JITTER_MS.get(metric, 0.0)
    worse = bool(change and change > 0)
    regression = bool(worse and beyond and change is not None and change > tolerance)
    return MetricChange(
        name, a, b, change, interval, wide, (len(xa), len(xb)), beyond, worse, regression, not_judged,
        run_to_run, tolerance,
    )  # fmt: skip


def _rate_change(
    name: str,
    a: float | None,
    b: float | None,
    interval: tuple[float, float] | None,
    samples: tuple[int, int],
    client_bound: str | None,
    tolerance: float,
    run_to_run: tuple[float, float] | None = None,
) -> MetricChange:
    change = _change(a, b)
    not_judged = client_bound or (None if interval is not None else "no completions")
    beyond = not not_judged and _beyond(change, interval, b, run_to_run)
    worse = bool(change and change < 0)
    regression = bool(worse and beyond and change is not None and -change > tolerance)
    return MetricChange(
        name,
        a,
        b,
        change,
        interval,
        None,
        samples,
        beyond,
        worse,
        regression,
        not_judged,
        run_to_run,
        tolerance,
    )


#: summary.json version 3 counts a step's tokens as they arrive; earlier ones at completion.
TOKENS_BY_ARRIVAL_SINCE = 3
TOKEN_COUNT_NOTE = (
    "output_tokens_per_s not compared: one run counted a step's tokens when its requests ended "
    "(summary.json version < 3), the other as they arrived"
)


def tokens_by_arrival(summary: dict[str, Any]) -> bool:
    """Whether the run's steps count output tokens as they arrived (FORMULAS["output_tokens_per_s"])."""
    return (summary.get("schema_version") or 1) >= TOKENS_BY_ARRIVAL_SINCE


def compare_runs(
    summary_a: dict[str, Any],
    requests_a: list[dict[str, Any]],
    summary_b: dict[str, Any],
    requests_b: list[dict[str, Any]],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    rounds: int = BOOTSTRAP_ROUNDS,
    baselines: list[dict[str, Any]] | None = None,
    allow_workload_change: bool = False,
) -> Comparison:
    """Every step of A matched by load to a step of B, each metric judged by the module's rule.
    ``baselines``: summaries of further runs of A's configuration (run-to-run noise), which
    must have sent A's requests; B may send others only with ``allow_workload_change`` (the same
    workload file at another path, a change of workload on purpose: listed in the config diff)."""
    if not (tolerance >= 0 and math.isfinite(tolerance)):
        raise ValueError(f"--tolerance: expected a relative change >= 0 (0.1 = 10 %), got {tolerance:g}")
    # A prediction has no options (tokenload plan --out writes none): no configuration to compare.
    cfg_a, cfg_b = summary_a.get("config") or {}, summary_b.get("config") or {}
    # Through redact: a run recorded before its config was (URLs with credentials) shows none.
    diff = (
        {k: (redact(a, k), redact(b, k)) for k, (a, b) in config_differences(cfg_a, cfg_b).items()}
        if (cfg_a and cfg_b)
        else {}
    )
    if summary_a.get("model") and summary_b.get("model") and summary_a["model"] != summary_b["model"]:
        diff["model (served)"] = (summary_a["model"], summary_b["model"])
    # A context sweep's steps carry their own prompt length, which matching already compares.
    per_step = all(s.get("prompt_tokens") for s in summary_a.get("steps") or [])
    for k, other in [
        ("B", summary_b),
        *((f"baseline run {i + 1}", r) for i, r in enumerate(baselines or [])),
    ]:
        changed = workload_differences(cfg_a, other.get("config") or {}, per_step)
        if k != "B" and summary_a.get("model") and other.get("model") not in (None, summary_a["model"]):
            changed["model (served)"] = (summary_a["model"], other["model"])  # not a repeat of A
        if changed and not (k == "B" and allow_workload_change):
            what = "; ".join(f"{key}: {a!r} -> {b!r}" for key, (a, b) in changed.items())
            raise ValueError(
                f"A and {k} sent different requests ({what}): a change would be the workload's, not "
                "the server's; compare runs of one workload (--allow-workload-change for B on purpose)"
            )
    rng = np.random.default_rng(seed)
    mixed_token_counts = tokens_by_arrival(summary_a) != tokens_by_arrival(summary_b)
    by_key_b = {k: s for s in summary_b.get("steps") or [] if (k := step_key(s)) is not None}
    keys_a = []
    steps = []
    for sa in summary_a.get("steps") or []:
        key = step_key(sa)
        if key is None:
            continue
        keys_a.append(key)
        sb = by_key_b.get(key)
        if sb is None:
            continue
        ia, ib = sa.get("index", 0), sb.get("index", 0)
        changes = []
        repeats = [s for run in baselines or [] for s in run.get("steps") or [] if step_key(s) == key]
        factors: dict[str, float] = {}
        for metric, quantile in LATENCY_METRICS:
            xa = request_samples(requests_a, ia, metric, quantile)
            xb = request_samples(requests_b, ib, metric, quantile)
            if metric not in factors:
                factors[metric] = max(correlation_factor(xa, rng), correlation_factor(xb, rng))
            change = _change(_value(sa, metric, quantile), _value(sb, metric, quantile))
            interval = widen_interval(
                centre_interval(
                    bootstrap_interval(xa, xb, _QUANTILE[quantile], rng, rounds, confidence),
                    change,
                    xa,
                    xb,
                    _QUANTILE[quantile],
                ),
                change,
                factors[metric],
            )
            runs = [v for st in [sa, *repeats] if (v := _value(st, metric, quantile)) is not None]
            changes.append(
                _latency_change(
                    f"{metric} {quantile}",
                    metric,
                    _value(sa, metric, quantile),
                    _value(sb, metric, quantile),
                    xa,
                    xb,
                    interval,
                    tolerance,
                    run_to_run_bound(runs, confidence) if repeats else None,
                )
            )
        # Completions behind each rate: requests/s x the measured seconds.
        na = (_value(sa, "requests_per_s", None) or 0.0) * (sa.get("measured_s") or 0.0)
        nb = (_value(sb, "requests_per_s", None) or 0.0) * (sb.get("measured_s") or 0.0)
        var_a = count_variance(na, sa.get("concurrency"), request_samples(requests_a, ia, "e2e_ms", "p50"))
        var_b = count_variance(nb, sb.get("concurrency"), request_samples(requests_b, ib, "e2e_ms", "p50"))
        bound = [run for run, st in (("A", sa), ("B", sb)) if "client_bound" in (st.get("flags") or [])]
        client_bound = f"client_bound in {' and '.join(bound)}" if bound else None
        for metric in RATE_METRICS:
            if metric == "output_tokens_per_s" and mixed_token_counts:
                continue
            ra, rb = _value(sa, metric, None), _value(sb, metric, None)
            interval = None
            if ra is not None and rb is not None:
                interval = rate_interval(ra, na, var_a, rb, nb, var_b, confidence)
            runs = [v for st in [sa, *repeats] if (v := _value(st, metric, None)) is not None]
            changes.append(
                _rate_change(
                    metric,
                    ra,
                    rb,
                    interval,
                    (round(na), round(nb)),
                    client_bound,
                    tolerance,
                    run_to_run_bound(runs, confidence) if repeats else None,
                )
            )
        notes = [
            f"{run} was client_bound here: its latencies include the load generator's own delays"
            for run, st in (("A", sa), ("B", sb))
            if "client_bound" in (st.get("flags") or [])
        ]
        if mixed_token_counts:
            notes.append(TOKEN_COUNT_NOTE)
        verdict_a, verdict_b = ((st.get("verdict") or {}) for st in (sa, sb))
        close = [run for run, v in (("A", verdict_a), ("B", verdict_b)) if v.get("close_call")]
        if close and verdict_a.get("bottleneck") != verdict_b.get("bottleneck"):
            notes.append(
                f"the verdict was a close call in {' and '.join(close)} ({CLOSE_CALL}): a change "
                "of verdict here is not by itself a change of the server"
            )
        steps.append(
            StepComparison(
                key,
                ia,
                ib,
                verdict_a.get("bottleneck"),
                verdict_b.get("bottleneck"),
                changes,
                notes,
            )
        )
    return Comparison(
        run_a=str(summary_a.get("run_id")),
        run_b=str(summary_b.get("run_id")),
        tolerance=tolerance,
        confidence=confidence,
        seed=seed,
        steps=steps,
        only_a=[_key_label(k) for k in keys_a if k not in by_key_b],
        only_b=[_key_label(k) for k in by_key_b if k not in set(keys_a)],
        config_diff=diff,
        baseline_runs=len(baselines or []),
        prediction_a=prediction_label(summary_a),
        prediction_b=prediction_label(summary_b),
    )
