"""Which charts a run's report has, and their data: from summary.json's steps (per load) and
server_metrics.jsonl (over time). Pure: builds svg.Chart values, draws nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenload.report.capacity import SLO, step_load
from tokenload.report.svg import Band, Chart, HLine, Series, VMark
from tokenload.report.tables import load_label
from tokenload.servermetrics.promql_answers import FLEET_TARGET
from tokenload.servermetrics.summary import tick_series

__all__ = ["CHART_KEYS", "build_charts", "cumulative_increase", "fleet_increase", "server_series"]

CHART_KEYS = (
    "throughput",
    "ttft_percentiles",
    "tpot_percentiles",
    "itl_percentiles",
    "e2e_percentiles",
    "latency_vs_throughput",
    "kv_usage",
    "running_waiting",
    "preemptions",
)
_PCTS = ("p50", "p90", "p99")


@dataclass(slots=True)
class _Point:
    """A server_metrics.jsonl line in the shape tick_series reads."""

    t: float
    target: str
    ok: bool
    scalars: dict[str, float]
    histograms: dict[str, Any] = field(default_factory=dict)


def server_series(
    points: list[dict[str, Any]], quantity: str, target: str | None = None
) -> list[tuple[float, float]]:
    """(t, value) per scrape tick over all targets (ratios averaged, counts summed: the same
    rule as the run's own window summaries), or of one ``target``."""
    pts = [
        _Point(p["t"], p.get("target", ""), bool(p.get("ok")), p.get("scalars") or {})
        for p in points
        if isinstance(p.get("t"), int | float)
    ]
    return tick_series(pts, quantity, target=target)


def cumulative_increase(series: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A counter as its increase since the first scrape; a drop is a restart (counts from 0)."""
    out: list[tuple[float, float]] = []
    total, prev = 0.0, None
    for t, v in series:
        if prev is not None:
            total += v - prev if v >= prev else v
        out.append((t, total))
        prev = v
    return out


def fleet_increase(points: list[dict[str, Any]], quantity: str) -> list[tuple[float, float]]:
    """A counter's increase since the first scrape, summed over the targets: each target's own
    (its drop is its restart), so that a replica that goes or comes does not read as the whole
    fleet's counter restarting. One value per tick any target was scraped in; a target adds its
    latest increase (0 before its first scrape)."""
    targets = sorted({str(p.get("target", "")) for p in points if p.get("ok")})
    own = [cumulative_increase(server_series(points, quantity, t)) for t in targets]
    ticks = sorted({t for series in own for t, _ in series})
    out: list[tuple[float, float]] = []
    pos, last = [0] * len(own), [0.0] * len(own)
    for tick in ticks:
        for i, series in enumerate(own):
            while pos[i] < len(series) and series[pos[i]][0] <= tick:
                last[i] = series[pos[i]][1]
                pos[i] += 1
        out.append((tick, sum(last)))
    return out


def _load_axis(steps: list[dict[str, Any]]) -> tuple[str, bool, tuple[float, ...]]:
    loads = [load for s in steps if (load := step_load(s)) is not None]
    label = "users (concurrency)" if any(s.get("concurrency") is not None for s in steps) else "target req/s"
    log = bool(loads) and min(loads) > 0 and max(loads) / min(loads) >= 8
    return label, log, tuple(sorted(set(loads)))


def _per_load(
    steps: list[dict[str, Any]], getter: Any
) -> tuple[tuple[tuple[float, float], ...], tuple[str, ...]]:
    pts, notes = [], []
    for s in steps:
        x, y = step_load(s), getter(s)
        if x is None or not isinstance(y, int | float):
            continue
        pts.append((float(x), float(y)))
        notes.append(f"{load_label(s)}, {(s.get('verdict') or {}).get('bottleneck', '-')}")
    return tuple(pts), tuple(notes)


def _slo_lines(slo: SLO | None, metrics: tuple[str, ...]) -> tuple[HLine, ...]:
    if slo is None:
        return ()
    items = [i for i in slo.items if i.metric in metrics]
    return tuple(HLine(i.limit_ms, f"SLO {i.metric.upper()} {i.quantile} {i.limit_ms:g} ms") for i in items)


def _percentile_chart(steps: list[dict[str, Any]], metric: str, title: str, slo: SLO | None) -> Chart:
    x_label, log_x, ticks = _load_axis(steps)
    series = []
    for q in _PCTS:
        pts, notes = _per_load(steps, lambda s, q=q: (s.get(f"{metric}_ms") or {}).get(q))
        series.append(Series(f"{metric.upper()} {q}", pts, notes))
    return Chart(
        key=f"{metric}_percentiles",
        title=title,
        x_label=x_label,
        y_label="ms",
        series=tuple(series),
        hlines=_slo_lines(slo, (metric,)),
        log_x=log_x,
        x_ticks=ticks,
    )


def _bands(steps: list[dict[str, Any]], t0: float) -> tuple[Band, ...]:
    out = []
    for s in steps:
        start, mstart, end = s.get("start"), s.get("measure_start"), s.get("end")
        if not all(isinstance(v, int | float) for v in (start, mstart, end)):
            continue
        label = load_label(s)
        out.append(Band(start - t0, mstart - t0, f"step {s.get('index')} warm-up ({label})", False))
        out.append(Band(mstart - t0, end - t0, label, True))
    return tuple(out)


def build_charts(
    summary: dict[str, Any], points: list[dict[str, Any]], slo: SLO | None = None
) -> list[Chart]:
    """The report's charts, in CHART_KEYS order. ``summary`` carries the (refreshed) verdicts
    and knee; ``points`` are server_metrics.jsonl lines."""
    steps = summary.get("steps") or []
    x_label, log_x, ticks = _load_axis(steps)
    knee = summary.get("knee")
    marks: tuple[VMark, ...] = ()
    if knee:
        load = knee.get("concurrency") if knee.get("concurrency") is not None else knee.get("target_rate_rps")
        if load is not None:
            marks = (VMark(float(load), f"knee: {knee.get('bottleneck')} at {load:g}"),)
    tput, notes = _per_load(steps, lambda s: s.get("output_tokens_per_s"))
    charts = [
        Chart(
            key="throughput",
            title="Throughput vs load (the knee marked)",
            x_label=x_label,
            y_label="output tokens/s",
            series=(Series("output tokens/s", tput, notes),),
            vmarks=marks,
            log_x=log_x,
            log_y=False,
            x_ticks=ticks,
        ),
        _percentile_chart(steps, "ttft", "Time to first token vs load", slo),
        _percentile_chart(steps, "tpot", "Time per output token vs load", slo),
        _percentile_chart(steps, "itl", "Inter-token latency vs load", slo),
        _percentile_chart(steps, "e2e", "End-to-end latency vs load", slo),
    ]
    lat_series = []
    for metric in ("ttft", "e2e"):
        pts, pnotes = [], []
        for s in steps:
            x, y = s.get("output_tokens_per_s"), (s.get(f"{metric}_ms") or {}).get("p50")
            if isinstance(x, int | float) and isinstance(y, int | float):
                pts.append((float(x), float(y)))
                pnotes.append(load_label(s))
        lat_series.append(Series(f"{metric.upper()} p50", tuple(pts), tuple(pnotes)))
    charts.append(
        Chart(
            key="latency_vs_throughput",
            title="Latency vs throughput (each point a step)",
            x_label="output tokens/s",
            y_label="ms",
            series=tuple(lat_series),
            hlines=_slo_lines(slo, ("ttft", "e2e")),
        )
    )
    # Time zero: the run's start, else the first scrape.
    ts = [p["t"] for p in points if isinstance(p.get("t"), int | float)]
    t0 = summary.get("started_at") or (min(ts) if ts else 0.0)
    bands = _bands(steps, t0)

    def rel(series: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
        return tuple((t - t0, v) for t, v in series)

    # Replicas: the scrape targets, or Prometheus' series by their replica label; a series
    # without the label is the fleet's (FLEET_TARGET), not one more replica.
    targets = sorted({t for p in points if p.get("ok") and (t := p.get("target")) and t != FLEET_TARGET})
    replicas = targets if len(targets) >= 2 else []

    charts.append(
        Chart(
            key="kv_usage",
            title="KV cache usage over time (steps shaded: measured part darker)",
            x_label="seconds since start",
            y_label="KV cache usage (0-1)",
            series=(
                Series("kv_cache_usage_ratio", rel(server_series(points, "kv_cache_usage_ratio"))),
                # Several replicas: each one's own, where a full one hides in the mean.
                *(
                    Series(f"kv_cache_usage_ratio {t}", rel(server_series(points, "kv_cache_usage_ratio", t)))
                    for t in replicas
                ),
            ),
            bands=bands,
            log_y=False,
            y_max=1.0,
        )
    )
    charts.append(
        Chart(
            key="running_waiting",
            title="Running and waiting requests over time",
            x_label="seconds since start",
            y_label="requests",
            series=(
                Series("requests_running", rel(server_series(points, "requests_running"))),
                Series("requests_waiting", rel(server_series(points, "requests_waiting"))),
            ),
            bands=bands,
            log_y=False,
        )
    )
    charts.append(
        Chart(
            key="preemptions",
            title="Preemptions over time (cumulative)",
            x_label="seconds since start",
            y_label="preemptions since start",
            series=(Series("preemptions", rel(fleet_increase(points, "preemptions"))),),
            bands=bands,
            log_y=False,
        )
    )
    return charts
