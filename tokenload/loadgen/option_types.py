"""The checks of tokenload's options: argparse ``type=`` functions, each refusing a bad value
with a message that says what was expected (argparse adds the option's name).

Pure: heavy modules (PromQL, SLO, workload parsers) are imported only when a value is checked.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "count",
    "discover_type",
    "factor",
    "fraction",
    "gpu_peaks",
    "gpu_peaks_type",
    "integer",
    "label_name",
    "length_list",
    "length_spec",
    "metrics_url_type",
    "number",
    "port",
    "positive_number",
    "positive_seconds",
    "promql_type",
    "seconds_or_fraction",
    "slo_type",
    "spec_type",
    "target_moe_type",
    "trace_file",
    "trace_window",
]


def _length(text: str, option: str) -> None:
    try:
        value = int(text)
    except ValueError:
        pass
    else:
        if value < 1:
            raise ValueError(f"{option}: expected an integer >= 1, got {value}")
        return
    from tokenload.workload.lengths import parse_length_spec

    parse_length_spec(text, option)  # a WorkloadError is a ValueError naming the option


def length_spec(option: str) -> Callable[[str], str]:
    """A length (``512``) or a distribution (``uniform:64-256``, ...), in the target's tokens."""
    return spec_type(_length, option)


def number(cast: Callable[[str], Any], ok: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
    """An argparse type: ``cast`` the text, then check it (``ok``), or say what was ``expected``."""

    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


positive_seconds = number(float, lambda v: v > 0, "a positive number of seconds")
positive_number = number(float, lambda v: v > 0 and v < 1e7, "a positive number")
seconds_or_fraction = number(
    float, lambda v: v >= 0, "a fraction of the step (< 1) or seconds (>= 1), not negative"
)
fraction = number(float, lambda v: 0 <= v <= 1, "a share from 0 to 1")
factor = number(float, lambda v: v > 1, "a factor > 1")
count = number(int, lambda v: v >= 1, "a positive integer")
integer = number(int, lambda v: True, "an integer")
count_or_zero = number(int, lambda v: v >= 0, "a positive integer, or 0 for not given")


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0..65535 (0 = off), got {text!r}")
    return value


def label_name(text: str) -> str:
    """A Prometheus label name (``instance``, ``pod``), or empty."""
    value = str(text).strip()
    if value and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise argparse.ArgumentTypeError(f"expected a Prometheus label name like pod, got {text!r}")
    if value in ("le", "__name__"):  # histogram buckets' own label; the metric's name
        raise argparse.ArgumentTypeError(
            f"expected a label that tells replicas apart, like pod, got {text!r}"
        )
    return value


def promql_type(option: str) -> Callable[[str], str]:
    """--prometheus-url or --prometheus-selector, from :mod:`tokenload.servermetrics.promql`'s checks
    (empty = not set)."""

    def parse(text: str) -> str:
        from tokenload.servermetrics.promql import PromQLError, check_prometheus_url, parse_selector

        if not str(text).strip():
            return ""
        try:
            (check_prometheus_url if option == "--prometheus-url" else parse_selector)(str(text), option)
        except PromQLError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option}: ")) from None
        return str(text).strip()

    return parse


def gpu_peaks(text: str) -> dict[str, float] | None:
    """``FLOPS,BYTES_PER_S`` -> ``{"flops_per_s": ..., "bytes_per_s": ...}`` ('' -> None)."""
    if not text:
        return None
    try:
        flops, bw = (float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(
            f"--gpu-peaks: expected FLOPS,BYTES_PER_S like 989e12,3.35e12, got {text!r}"
        ) from None
    if not (flops > 0 and bw > 0) or float("inf") in (flops, bw):
        raise ValueError(f"--gpu-peaks: expected positive numbers, got {text!r}")
    return {"flops_per_s": flops, "bytes_per_s": bw}


def gpu_peaks_type(text: str) -> str:
    """argparse type of --gpu-peaks: FLOPS,BYTES_PER_S, both positive (checked before any load)."""
    try:
        gpu_peaks(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--gpu-peaks: ")) from None
    return text


def discover_type(text: str) -> str:
    """argparse type of --metrics-discover: HOST:PORT[/PATH] or file:PATH (empty = off)."""
    from tokenload.servermetrics.discovery import parse_spec

    if text.strip():
        try:
            parse_spec(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("--metrics-discover: ")) from None
    return text.strip()


def metrics_url_type(text: str) -> str:
    """argparse type of --metrics-url: http(s) URLs with a host, comma-separated."""
    from tokenload.servermetrics.discovery import is_metrics_url

    for url in (u.strip() for u in text.split(",")):
        if url and not is_metrics_url(url):
            raise argparse.ArgumentTypeError(f"expected an http(s) URL, got {url!r}")
    return text


def spec_type(parse: Callable[[str, str], Any], option: str) -> Callable[[str], str]:
    """An argparse type from a parser that raises ValueError with a message naming the option;
    the value is kept as text (the shapes parse it again)."""

    def check(text: str) -> str:
        try:
            parse(text, option)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option}: ")) from None
        return text

    return check


def _slo(text: str, option: str) -> None:
    from tokenload.report.capacity import SLOError, parse_slo

    if not text.strip():
        return  # no SLO: no stop condition
    try:
        parse_slo(text)
    except SLOError as exc:
        raise ValueError(str(exc).replace("--slo:", f"{option}:", 1)) from None


def slo_type(option: str) -> Callable[[str], str]:
    return spec_type(_slo, option)


def _length_list(text: str, option: str) -> None:
    items = [s.strip() for s in text.split(",")]
    if not text.strip() or not all(items):
        raise ValueError(f"{option}: expected lengths like 121,511,2041, got {text!r}")
    for item in items:
        try:
            _length(item, option)
        except ValueError as exc:
            raise ValueError(f"{option}: {item!r}: {str(exc).removeprefix(f'{option}: ')}") from None


def _target_moe(text: str, option: str) -> None:
    from tokenload.metrics.precision import parse_target_moe

    parse_target_moe(text, option)


def target_moe_type(option: str) -> Callable[[str], str]:
    return spec_type(_target_moe, option)


def length_list(option: str) -> Callable[[str], str]:
    return spec_type(_length_list, option)


def _trace_file(text: str, option: str) -> None:
    from pathlib import Path

    if text and not Path(text).is_file():
        raise ValueError(f"{option}: no such file: {text}")


def _trace_window(text: str, option: str) -> None:
    from tokenload.workload.trace import parse_window

    if text:
        parse_window(text, option)  # a WorkloadError is a ValueError naming the option


trace_file = spec_type(_trace_file, "--trace")
trace_window = spec_type(_trace_window, "--trace-window")
