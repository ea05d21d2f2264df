"""Line charts as inline SVG: scales, ticks and drawing. Pure: a Chart in, markup out.

No chart library and no script: the report must open offline from a ticket attachment. Every
point carries a ``<title>``, which browsers show as a tooltip on hover. Each chart is wrapped
in ``<figure data-chart=KEY data-points=N>`` (N = the points drawn) and says "no data" in words
when it has none, so an empty chart can never pass for a flat one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

__all__ = [
    "Band",
    "Chart",
    "HLine",
    "Scale",
    "Series",
    "VMark",
    "linear_ticks",
    "log_ticks",
    "render_chart",
    "tick_label",
]

PALETTE = ("#1f6fb4", "#e0701a", "#2a9d3a", "#8e44ad", "#c0392b", "#7f6a4d")
SLO_COLOR = "#c0392b"
KNEE_COLOR = "#444"
WIDTH, HEIGHT = 720, 320
LEFT, RIGHT, TOP, BOTTOM = 66, 18, 36, 50
#: Past this many points a series is drawn as a line only (a dot per scrape would be noise).
MAX_MARKERS = 400


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]
    #: Per-point words for the tooltip (e.g. "16 users, kv_capacity"); may be empty.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HLine:
    """A horizontal reference, e.g. an SLO limit."""

    y: float
    label: str


@dataclass(frozen=True, slots=True)
class VMark:
    """A vertical marker, e.g. the knee."""

    x: float
    label: str


@dataclass(frozen=True, slots=True)
class Band:
    """A shaded x range, e.g. a step (warm-up lighter than the measured part)."""

    x0: float
    x1: float
    label: str
    measured: bool


@dataclass(frozen=True, slots=True)
class Chart:
    key: str
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    hlines: tuple[HLine, ...] = ()
    vmarks: tuple[VMark, ...] = ()
    bands: tuple[Band, ...] = ()
    log_x: bool = False
    #: None: logarithmic when the values are positive and span more than LOG_SPAN.
    log_y: bool | None = None
    y_max: float | None = None
    x_ticks: tuple[float, ...] | None = None

    @property
    def n_points(self) -> int:
        return sum(len(_finite(s.points)) for s in self.series)


LOG_SPAN = 50.0


def _finite(points: tuple[tuple[float, float], ...]) -> list[tuple[float, float]]:
    return [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]


# -- ticks and scales -------------------------------------------------------------------


def _nice_step(span: float, n: int) -> float:
    raw = span / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def linear_ticks(lo: float, hi: float, n: int = 5) -> tuple[float, float, list[float]]:
    """A domain widened to round numbers and the ticks in it (1-2-2.5-5 steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        pad = abs(lo) * 0.5 or 1.0
        lo, hi = lo - pad, hi + pad
    step = _nice_step(hi - lo, n)
    lo2, hi2 = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    count = round((hi2 - lo2) / step)
    return lo2, hi2, [lo2 + i * step for i in range(count + 1)]


def log_ticks(lo: float, hi: float) -> tuple[float, float, list[float]]:
    """Decades (with 2 and 5 between them when there are few) covering [lo, hi], lo > 0."""
    if hi <= lo:
        lo, hi = lo / 2, hi * 2
    d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    d1 = max(d1, d0 + 1)
    mults = (1, 2, 5) if d1 - d0 <= 3 else (1,)
    ticks = [m * 10.0**d for d in range(d0, d1 + 1) for m in mults]
    ticks = [t for t in ticks if lo / 1.0001 <= t <= hi * 1.0001] or [10.0**d0, 10.0**d1]
    # The domain hugs the data (not whole decades) so the lines use the height, with a little
    # room so that the extreme points are not drawn on the frame.
    return min(lo, ticks[0]) / 1.25, max(hi, ticks[-1]) * 1.25, ticks


@dataclass(frozen=True, slots=True)
class Scale:
    d0: float
    d1: float
    r0: float
    r1: float
    log: bool = False

    def __call__(self, v: float) -> float:
        if self.log:
            a, b, v = math.log10(self.d0), math.log10(self.d1), math.log10(max(v, self.d0 * 1e-3))
        else:
            a, b = self.d0, self.d1
        frac = 0.5 if b == a else (v - a) / (b - a)
        return self.r0 + frac * (self.r1 - self.r0)


def tick_label(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    if a == 0 or a >= 1:
        return f"{round(v, 2):g}"
    return f"{v:.3g}"


def _domain(
    values: list[float], log: bool, zero: bool, top: float | None
) -> tuple[float, float, list[float]]:
    if log:
        pos = [v for v in values if v > 0] or [1.0]
        return log_ticks(min(pos), max(pos))
    lo = min(values, default=0.0)
    hi = max(values, default=1.0)
    if zero:
        lo = min(lo, 0.0)
    if top is not None:
        hi = max(hi, top)
    return linear_ticks(lo, hi)


def _auto_log(values: list[float]) -> bool:
    return bool(values) and min(values) > 0 and max(values) / min(values) > LOG_SPAN


# -- drawing ------------------------------------------------------------------------------


def _no_data(chart: Chart) -> str:
    return (
        f'<svg viewBox="0 0 {WIDTH} 120" role="img" aria-label="{escape(chart.title)}: no data">'
        f'<rect x="0.5" y="0.5" width="{WIDTH - 1}" height="119" fill="#fafafa" stroke="#ccc"/>'
        f'<text x="{WIDTH / 2}" y="66" text-anchor="middle" class="nodata">no data</text></svg>'
    )


def _fmt(v: float) -> str:
    return f"{v:.1f}"


def render_chart(chart: Chart) -> str:
    """``<figure data-chart data-points>`` with a title, the SVG and, when empty, 'no data'."""
    n = chart.n_points
    head = (
        f'<figure class="chart" id="chart-{escape(chart.key)}" data-chart="{escape(chart.key)}" '
        f'data-points="{n}"><figcaption>{escape(chart.title)}</figcaption>'
    )
    if n == 0:
        return head + _no_data(chart) + "</figure>"
    return head + _plot(chart) + "</figure>"


def _plot(chart: Chart) -> str:
    pts = [p for s in chart.series for p in _finite(s.points)]
    xs = [x for x, _ in pts] + [m.x for m in chart.vmarks] + [v for b in chart.bands for v in (b.x0, b.x1)]
    ys = [y for _, y in pts] + [h.y for h in chart.hlines]
    log_y = _auto_log(ys) if chart.log_y is None else chart.log_y
    log_x = chart.log_x and all(x > 0 for x in xs)
    if chart.x_ticks and not log_x:
        x0, x1, _ = linear_ticks(min(xs), max(xs))
        xt = list(chart.x_ticks)
    elif chart.x_ticks:
        x0, x1, xt = min(xs) / 1.25, max(xs) * 1.25, list(chart.x_ticks)
    else:
        x0, x1, xt = _domain(xs, log_x, zero=False, top=None)
    y0, y1, yt = _domain(ys, log_y, zero=True, top=chart.y_max)
    px0, px1, py0, py1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
    sx, sy = Scale(x0, x1, px0, px1, log_x), Scale(y0, y1, py0, py1, log_y)
    out = [f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(chart.title)}">']
    out.append(
        f'<rect x="{px0}" y="{py1}" width="{px1 - px0}" height="{py0 - py1}" fill="#fff" stroke="#bbb"/>'
    )
    for b in chart.bands:
        a, z = max(px0, sx(b.x0)), min(px1, sx(b.x1))
        if z <= a:
            continue
        fill = "#dbe7f5" if b.measured else "#f0f0f0"
        out.append(
            f'<rect class="band" x="{_fmt(a)}" y="{py1}" width="{_fmt(z - a)}" height="{py0 - py1}" '
            f'fill="{fill}"><title>{escape(b.label)}</title></rect>'
        )
        if b.measured and b.label:
            out.append(
                f'<text x="{_fmt((a + z) / 2)}" y="{py1 + 12}" text-anchor="middle" class="bandlabel">'
                f"{escape(b.label)}</text>"
            )
    for t in yt:
        y = sy(t)
        out.append(f'<line x1="{px0}" x2="{px1}" y1="{_fmt(y)}" y2="{_fmt(y)}" class="grid"/>')
        out.append(
            f'<text x="{px0 - 6}" y="{_fmt(y + 4)}" text-anchor="end" class="tick">{tick_label(t)}</text>'
        )
    for t in xt:
        if not (min(x0, x1) <= t <= max(x0, x1)):
            continue
        x = sx(t)
        out.append(f'<line x1="{_fmt(x)}" x2="{_fmt(x)}" y1="{py0}" y2="{py0 + 4}" stroke="#888"/>')
        out.append(
            f'<text x="{_fmt(x)}" y="{py0 + 17}" text-anchor="middle" class="tick">{tick_label(t)}</text>'
        )
    out.append(
        f'<text x="{(px0 + px1) / 2}" y="{HEIGHT - 10}" text-anchor="middle" class="axis">'
        f"{escape(chart.x_label)}{' (log scale)' if log_x else ''}</text>"
    )
    out.append(
        f'<text transform="translate(14 {(py0 + py1) / 2}) rotate(-90)" text-anchor="middle" class="axis">'
        f"{escape(chart.y_label)}{' (log scale)' if log_y else ''}</text>"
    )
    for m in chart.vmarks:
        x = sx(m.x)
        out.append(
            f'<line class="knee" x1="{_fmt(x)}" x2="{_fmt(x)}" y1="{py0}" y2="{py1}" stroke="{KNEE_COLOR}" '
            f'stroke-dasharray="6 4" stroke-width="1.5"><title>{escape(m.label)}</title></line>'
        )
        anchor = "end" if x > (px0 + px1) / 2 else "start"
        dx = -4 if anchor == "end" else 4
        out.append(
            # At the foot of the line: throughput rises to the right, so the bottom is free.
            f'<text x="{_fmt(x + dx)}" y="{py0 - 8}" text-anchor="{anchor}" class="marklabel">'
            f"{escape(m.label)}</text>"
        )
    for h in chart.hlines:
        y = sy(h.y)
        out.append(
            f'<line class="slo" x1="{px0}" x2="{px1}" y1="{_fmt(y)}" y2="{_fmt(y)}" stroke="{SLO_COLOR}" '
            f'stroke-dasharray="8 4" stroke-width="1.5"><title>{escape(h.label)}</title></line>'
        )
        out.append(
            f'<text x="{px1 - 4}" y="{_fmt(y - 4)}" text-anchor="end" class="slolabel" fill="{SLO_COLOR}">'
            f"{escape(h.label)}</text>"
        )
    lx = px0
    for i, s in enumerate(chart.series):
        color = PALETTE[i % len(PALETTE)]
        pts_s = _finite(s.points)
        coords = " ".join(f"{_fmt(sx(x))},{_fmt(sy(y))}" for x, y in pts_s)
        out.append(
            f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>'
        )
        if len(pts_s) <= MAX_MARKERS:
            notes = s.notes if len(s.notes) == len(s.points) else ("",) * len(s.points)
            for (x, y), note in zip(s.points, notes, strict=True):
                if not (math.isfinite(x) and math.isfinite(y)):
                    continue
                tip = f"{s.label}: {tick_label(y) if abs(y) >= 1 else f'{y:.3g}'} at {chart.x_label} {x:g}"
                tip += f" ({note})" if note else ""
                out.append(
                    f'<circle class="point" cx="{_fmt(sx(x))}" cy="{_fmt(sy(y))}" r="3.5" fill="{color}">'
                    f"<title>{escape(tip)}</title></circle>"
                )
        out.append(f'<rect x="{lx}" y="12" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{lx + 16}" y="22" class="legend">{escape(s.label)}</text>')
        lx += 28 + 7 * len(s.label)
    out.append("</svg>")
    return "".join(out)
