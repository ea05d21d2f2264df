"""A /metrics page -> the canonical quantities it carries (one scrape of one target). Pure.

Parsing uses ``prometheus_client``'s parser on the lines of the families we know only, so a
page full of process and Python metrics costs little. Label sets of one family are summed
(``finished_reason`` counters, per-engine series) unless the vocabulary asks for one label value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tokenload.servermetrics.vocabulary import FAMILY_INDEX

__all__ = ["HistogramState", "ParseError", "ScrapeValues", "parse_page"]


class ParseError(ValueError):
    """The page is not Prometheus text exposition."""


@dataclass(slots=True)
class HistogramState:
    """Cumulative buckets (upper bound, count) in ascending order, +Inf last, with sum and count."""

    buckets: list[tuple[float, float]]
    sum: float
    count: float


@dataclass(slots=True)
class ScrapeValues:
    scalars: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, HistogramState] = field(default_factory=dict)
    #: Canonical quantities seen, by the server generation whose family carried them.
    families_seen: set[str] = field(default_factory=set)


_PREFIXES = tuple(sorted({name.split(":", 1)[0] + ":" for name in FAMILY_INDEX}))


def _relevant_lines(text: str) -> str:
    keep = []
    for line in text.splitlines():
        if line.startswith("# "):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[2].startswith(_PREFIXES):
                keep.append(line)
        elif line.startswith(_PREFIXES):
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_page(text: str) -> ScrapeValues:
    out = ScrapeValues()
    hist_parts: dict[str, dict[str, object]] = {}
    try:
        families = list(text_string_to_metric_families(_relevant_lines(text)))
    except (ValueError, TypeError, IndexError) as exc:
        raise ParseError(f"not Prometheus text exposition: {exc}") from None
    for fam in families:
        targets = FAMILY_INDEX.get(fam.name)
        if not targets:
            continue
        out.families_seen.add(fam.name)
        for quantity, required in targets:
            if quantity.kind == "histogram":
                acc = hist_parts.setdefault(quantity.name, {"b": {}, "s": 0.0, "c": 0.0})
                for s in fam.samples:
                    if any(s.labels.get(k) != v for k, v in required.items()):
                        continue
                    if s.name.endswith("_bucket"):
                        le = float(s.labels["le"])
                        acc["b"][le] = acc["b"].get(le, 0.0) + s.value  # type: ignore[union-attr]
                    elif s.name.endswith("_sum"):
                        acc["s"] += s.value  # type: ignore[operator]
                    elif s.name.endswith("_count"):
                        acc["c"] += s.value  # type: ignore[operator]
            else:
                total = 0.0
                found = False
                for s in fam.samples:
                    if s.name.endswith("_created"):
                        continue
                    if any(s.labels.get(k) != v for k, v in required.items()):
                        continue
                    total += s.value
                    found = True
                if found:
                    out.scalars[quantity.name] = out.scalars.get(quantity.name, 0.0) + total
    for name, acc in hist_parts.items():
        buckets = sorted(acc["b"].items())  # type: ignore[union-attr]
        if buckets and math.isinf(buckets[-1][0]):
            out.histograms[name] = HistogramState(buckets, acc["s"], acc["c"])  # type: ignore[arg-type]
    return out
