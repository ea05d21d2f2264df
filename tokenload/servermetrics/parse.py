"""A /metrics page -> the canonical quantities it carries (one scrape of one target). Pure.

Only the lines of the families we know are parsed, so a page full of process and Python
metrics costs little; a small sample-line parser does it, held equal to ``prometheus_client``'s
parser (``reference=True``) by the tests. Label sets of one family are summed
(``finished_reason`` counters, per-engine series) unless the vocabulary asks for one label value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

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
_SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def _known(name: str) -> bool:
    return _family_of(name) is not None


def _relevant_lines(text: str) -> str:
    """Only the TYPE lines and samples of families in the vocabulary: prometheus_client's parser
    is pure Python, and a vLLM page is mostly HELP text, ``_created`` series and families we do
    not use, so this cuts the parse several times."""
    keep = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and _known(parts[2]):
                keep.append(line)
        elif line.startswith(_PREFIXES):
            end = line.find("{")
            name = line[:end] if end >= 0 else line.split(" ", 1)[0]
            if not name.endswith("_created") and _known(name):
                keep.append(line)
    return "\n".join(keep) + "\n"


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _family_of(name: str) -> str | None:
    if name in FAMILY_INDEX:
        return name
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in FAMILY_INDEX:
            return name[: -len(suffix)]
    return None


def _fast_families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """The samples of the vocabulary's families, by family. Equivalent to prometheus_client's
    parser on these lines (a test holds them equal on every golden page) at a fraction of the
    cost: the scrape runs in the load generator's event loop, where milliseconds are timing error."""
    fams: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for line in _relevant_lines(text).splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise ParseError(f"not Prometheus text exposition: {line[:80]!r}")
        name, raw_labels, raw_value = m.groups()
        labels: dict[str, str] = {}
        if raw_labels:
            pos = 0
            while pos < len(raw_labels):
                lm = _LABEL.match(raw_labels, pos)
                if lm is None:
                    raise ParseError(f"not Prometheus text exposition: bad labels in {line[:80]!r}")
                value = lm.group(2)
                if "\\" in value:
                    value = re.sub(r"\\[\\\"n]", lambda x: _UNESCAPE[x.group(0)], value)
                labels[lm.group(1)] = value
                pos = lm.end()
        try:
            value_f = float(raw_value)
        except ValueError:
            raise ParseError(f"not Prometheus text exposition: bad value in {line[:80]!r}") from None
        family = _family_of(name)
        if family is not None:
            fams.setdefault(family, []).append((name, labels, value_f))
    return fams


def _reference_families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """The same through prometheus_client's parser: the reference the fast path is tested against."""
    from prometheus_client.parser import text_string_to_metric_families  # only the reference path

    try:
        families = list(text_string_to_metric_families(_relevant_lines(text)))
    except (ValueError, TypeError, IndexError) as exc:
        raise ParseError(f"not Prometheus text exposition: {exc}") from None
    return {
        f.name: [(s.name, dict(s.labels), s.value) for s in f.samples]
        for f in families
        if f.name in FAMILY_INDEX
    }


def parse_page(text: str, reference: bool = False) -> ScrapeValues:
    """The canonical quantities of one /metrics page. ``reference=True`` parses with
    prometheus_client's parser instead of the fast path (same result, several times slower)."""
    out = ScrapeValues()
    hist_parts: dict[str, dict[str, object]] = {}
    families = _reference_families(text) if reference else _fast_families(text)
    for fam_name, samples in families.items():
        targets = FAMILY_INDEX.get(fam_name)
        if not targets:
            continue
        out.families_seen.add(fam_name)
        for quantity, required in targets:
            if quantity.kind == "histogram":
                acc = hist_parts.setdefault(quantity.name, {"b": {}, "s": 0.0, "c": 0.0})
                for name, labels, value in samples:
                    if any(labels.get(k) != v for k, v in required.items()):
                        continue
                    if name.endswith("_bucket"):
                        le = float(labels["le"])
                        acc["b"][le] = acc["b"].get(le, 0.0) + value  # type: ignore[union-attr]
                    elif name.endswith("_sum"):
                        acc["s"] += value  # type: ignore[operator]
                    elif name.endswith("_count"):
                        acc["c"] += value  # type: ignore[operator]
            else:
                total = 0.0
                found = 0
                for name, labels, value in samples:
                    if name.endswith("_created"):
                        continue
                    if any(labels.get(k) != v for k, v in required.items()):
                        continue
                    total += value
                    found += 1
                if found and quantity.name.endswith("_ratio"):
                    # A ratio (KV usage) of several engines (data parallel: one series per
                    # engine label) is their mean: two engines at 50 % are a cache at 50 %.
                    out.scalars[quantity.name] = total / found
                elif found:
                    out.scalars[quantity.name] = out.scalars.get(quantity.name, 0.0) + total
    for name, acc in hist_parts.items():
        buckets = sorted(acc["b"].items())  # type: ignore[union-attr]
        if buckets and math.isinf(buckets[-1][0]):
            out.histograms[name] = HistogramState(buckets, acc["s"], acc["c"])  # type: ignore[arg-type]
    return out
