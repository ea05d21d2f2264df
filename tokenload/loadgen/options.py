"""tokenload's Locust command-line options (also shown in the web UI), validated up front.

The API key is never an option: only the *name* of the environment variable that holds it, so
the key cannot appear in the web UI, in logs or in a saved configuration.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["RunConfig", "add_arguments", "length_spec", "run_config"]


def length_spec(option: str):
    def parse(text: str) -> str:
        text = str(text).strip()
        try:
            value = int(text)
        except ValueError:
            pass
        else:
            if value < 1:
                raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
            return text
        from tokenload.workload.errors import WorkloadError
        from tokenload.workload.lengths import parse_length_spec

        try:
            parse_length_spec(text, option)
        except WorkloadError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option}: ")) from None
        return text

    return parse


def _number(cast: Callable[[str], Any], ok: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
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


_positive_float = _number(float, lambda v: v > 0, "a positive number of seconds")
_fraction = _number(float, lambda v: 0 <= v <= 1, "a share from 0 to 1")
_factor = _number(float, lambda v: v > 1, "a factor > 1")
_count = _number(int, lambda v: v >= 1, "a positive integer")


def add_arguments(parser: Any) -> None:
    """Register the options on Locust's parser (``init_command_line_parser``)."""
    g = parser.add_argument_group("tokenload", "LLM load options")
    g.add_argument(
        "--model", default="", help="Model name; default: the first model of the target's /v1/models"
    )
    g.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="Name of the environment variable holding the API key (the key itself is never an option)",
    )
    g.add_argument(
        "--prompt-tokens",
        type=length_spec("--prompt-tokens"),
        default="128",
        help="Prompt length in the target's tokens: 512, or a distribution uniform:64-256, normal:512,128, "
        "lognormal:mean=512,sigma=0.6, empirical:FILE (exact through the server's /tokenize when it has one)",
    )
    g.add_argument(
        "--output-tokens",
        type=length_spec("--output-tokens"),
        default="64",
        help="Output length (max_tokens), a number or a distribution as --prompt-tokens",
    )
    g.add_argument(
        "--length-method",
        choices=["auto", "tokenize", "tokenizer_file", "estimate", "token_ids"],
        default="auto",
        help="How prompt lengths are made exact: auto = /tokenize when the server has it, else an estimate",
    )
    g.add_argument(
        "--workload",
        default="",
        help="A YAML run file whose 'workload:' section chooses datasets, shared prefixes, conversations, "
        "length distributions (overrides --prompt-tokens/--output-tokens)",
    )
    g.add_argument(
        "--natural-stop",
        action="store_true",
        default=False,
        help="Let the model stop on its own (no ignore_eos); output-tokens is then only a cap",
    )
    g.add_argument("--ttft-timeout", type=_positive_float, default=120.0, help="Seconds to the first token")
    g.add_argument(
        "--stall-timeout", type=_positive_float, default=30.0, help="Seconds without bytes mid-stream"
    )
    g.add_argument("--run-dir", default="", help="Run directory; default reports/<run-id>")
    g.add_argument(
        "--metrics-url",
        action="append",
        default=None,
        type=metrics_url_type,
        help="Server /metrics to scrape during the run, one per replica (repeatable or comma-separated); "
        "default: the host's /metrics",
    )
    g.add_argument("--metrics-interval", type=_positive_float, default=1.0, help="Seconds between scrapes")
    g.add_argument("--no-server-metrics", action="store_true", default=False, help="Do not scrape the server")
    g.add_argument(
        "--gpu-peaks",
        default="",
        type=gpu_peaks_type,
        help="The target GPU's peak FLOP/s and memory bytes/s, e.g. 989e12,3.35e12 (H100 SXM, bf16): "
        "lets the analysis compare the server's estimated FLOPs and bytes against them",
    )
    add_prometheus_arguments(parser)
    add_step_arguments(parser)


def _promql_type(option: str) -> Any:
    """An argparse type from :mod:`tokenload.servermetrics.promql`'s checks (empty = not set)."""

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


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0..65535 (0 = off), got {text!r}")
    return value


def add_prometheus_arguments(parser: Any) -> None:
    """A Prometheus server as the source of the server's figures, and tokenload's own /metrics."""
    p = parser.add_argument_group("tokenload and Prometheus")
    p.add_argument(
        "--prometheus-url",
        type=_promql_type("--prometheus-url"),
        default="",
        help="Take the server's figures from this Prometheus (http://prometheus:9090) with PromQL over "
        "each step, instead of scraping the servers' /metrics one by one",
    )
    p.add_argument(
        "--prometheus-selector",
        type=_promql_type("--prometheus-selector"),
        default="",
        help='Label matchers added to every PromQL series, e.g. {namespace="llm",job="vllm"}',
    )
    p.add_argument(
        "--exporter-port",
        type=_port,
        default=0,
        help="Serve tokenload's own Prometheus /metrics on this port (0: off; with the web UI it is also "
        "at the web UI's /metrics)",
    )
    p.add_argument(
        "--exporter-host", default="0.0.0.0", help="Interface of --exporter-port (default: all, as in a pod)"
    )


def gpu_peaks_type(text: str) -> str:
    """argparse type of --gpu-peaks: FLOPS,BYTES_PER_S, both positive (checked before any load)."""
    try:
        _gpu_peaks(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--gpu-peaks: ")) from None
    return text


def metrics_url_type(text: str) -> str:
    """argparse type of --metrics-url: http(s) URLs with a host, comma-separated."""
    from urllib.parse import urlsplit

    for url in (u.strip() for u in text.split(",")):
        parts = urlsplit(url)
        if url and (parts.scheme not in ("http", "https") or not parts.hostname):
            raise argparse.ArgumentTypeError(f"expected an http(s) URL, got {url!r}")
    return text


def _checked(parse: Any, option: str) -> Any:
    """An argparse type from a parser that raises ValueError with a message naming the option."""

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


def _length_list(text: str, option: str) -> None:
    items = [s.strip() for s in text.split(",")]
    if not text.strip() or not all(items):
        raise ValueError(f"{option}: expected lengths like 121,511,2041, got {text!r}")
    for item in items:
        try:
            length_spec(option)(item)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"{option}: {item!r}: {exc}") from None


def add_step_arguments(parser: Any) -> None:
    """The load-shape options (staircase, knee, rate) and the stop conditions."""
    from tokenload.loadgen.arrivals import parse_arrival
    from tokenload.loadgen.steps import parse_concurrency_list, parse_rate_list

    s = parser.add_argument_group("tokenload steps", "for the load shapes (locustfiles/staircase.py, ...)")
    s.add_argument(
        "--concurrency",
        type=_checked(parse_concurrency_list, "--concurrency"),
        default="1,2,4,8",
        help="Concurrency steps: 1,2,4,8 or start:stop:xfactor",
    )
    s.add_argument(
        "--rate",
        type=_checked(parse_rate_list, "--rate"),
        default="1,2,4",
        help="Rate steps, open loop (locustfiles/rate.py): requests/s, 0.5,1,2 or start:stop:xfactor",
    )
    s.add_argument(
        "--arrival",
        type=_checked(parse_arrival, "--arrival"),
        default="poisson",
        help="Open-loop arrivals: constant, poisson or gamma:B (burstiness B, as vLLM's bench)",
    )
    s.add_argument("--arrival-seed", type=int, default=0, help="Seed of the arrival schedule")
    s.add_argument(
        "--max-in-flight",
        type=_count,
        default=512,
        help="Open loop: users sending the arrivals (the most requests in flight, over all workers)",
    )
    s.add_argument(
        "--prompt-lengths",
        type=_checked(_length_list, "--prompt-lengths"),
        default="121,511,2041,8191",
        help="Context sweep (locustfiles/context_sweep.py): prompt lengths, one series of steps each",
    )
    s.add_argument("--step-duration", type=_positive_float, default=30.0, help="Seconds each step is held")
    s.add_argument(
        "--warmup",
        type=float,
        default=0.2,
        help="Start of each step left out of its stats: a fraction (<1) or seconds",
    )
    k = parser.add_argument_group("tokenload knee search", "for the knee shape (locustfiles/knee.py)")
    k.add_argument("--knee-start", type=_count, default=1, help="First concurrency of the search")
    k.add_argument("--knee-max", type=_count, default=1024, help="Highest concurrency the search may try")
    k.add_argument(
        "--knee-factor", type=_factor, default=4.0, help="Growth between probe steps while unsaturated"
    )
    k.add_argument(
        "--knee-resolution",
        type=_factor,
        default=1.5,
        help="Bisect until saturated / unsaturated concurrency is at most this ratio",
    )
    k.add_argument(
        "--probe-duration",
        type=_positive_float,
        default=None,
        help="Seconds each probe step (the geometric climb) is held; default: half of --step-duration",
    )
    x = parser.add_argument_group("tokenload stop conditions", "end a shape early")
    x.add_argument(
        "--stop-slo",
        type=_checked(_slo, "--stop-slo"),
        default="",
        help="Stop after --stop-slo-steps steps in a row break this SLO, e.g. ttft_p95_ms=2000",
    )
    x.add_argument("--stop-slo-steps", type=_count, default=2, help="Consecutive SLO breaches that stop")
    x.add_argument(
        "--stop-error-rate",
        type=_fraction,
        default=0.5,
        help="Stop after a step whose failed share is above this (0-1)",
    )
    x.add_argument(
        "--no-stop-oversaturated",
        action="store_true",
        default=False,
        help="Go on after a step whose server waiting queue grew throughout (over-saturation)",
    )
    x.add_argument(
        "--time-budget",
        type=_positive_float,
        default=None,
        help="Seconds of load at most: no step starts that would end past it",
    )
    x.add_argument(
        "--settle-timeout",
        type=_positive_float,
        default=60.0,
        help="Seconds a step's decision waits, after it ends, for the requests started in its "
        "measured part to end (summary.json says how many the bound cut; default 60)",
    )


@dataclass(frozen=True, slots=True)
class RunConfig:
    model: str
    api_key_env: str
    #: Length specs (``128`` or a distribution such as ``uniform:64-256``), in the target's tokens.
    prompt_tokens: str
    output_tokens: str
    length_method: str
    workload_file: str
    natural_stop: bool
    ttft_timeout_s: float
    stall_timeout_s: float
    run_dir: str
    metrics_urls: tuple[str, ...]
    metrics_interval_s: float
    server_metrics: bool
    gpu_peaks: dict[str, float] | None
    #: A Prometheus server as the source of the server's figures ('' = scrape the servers).
    prometheus_url: str = ""
    prometheus_selector: tuple[str, ...] = ()
    #: tokenload's own /metrics on a port of its own (0 = off).
    exporter_port: int = 0
    exporter_host: str = "0.0.0.0"

    @property
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def public_dict(self) -> dict[str, Any]:
        """For reports: the configuration with no secret in it (only the variable's name)."""
        d = asdict(self)
        d["api_key_set"] = self.api_key is not None
        return d


def run_config(options: Any) -> RunConfig:
    """Read the parsed options (Locust's ``environment.parsed_options``; None in library use)."""

    def opt(name: str, default: Any) -> Any:
        return getattr(options, name, default) if options is not None else default

    return RunConfig(
        model=opt("model", ""),
        api_key_env=opt("api_key_env", "OPENAI_API_KEY"),
        prompt_tokens=str(opt("prompt_tokens", "128")),
        output_tokens=str(opt("output_tokens", "64")),
        length_method=opt("length_method", "auto"),
        workload_file=opt("workload", ""),
        natural_stop=bool(opt("natural_stop", False)),
        ttft_timeout_s=float(opt("ttft_timeout", 120.0)),
        stall_timeout_s=float(opt("stall_timeout", 30.0)),
        run_dir=opt("run_dir", ""),
        metrics_urls=tuple(
            u.strip() for arg in (opt("metrics_url", None) or []) for u in arg.split(",") if u.strip()
        ),
        metrics_interval_s=float(opt("metrics_interval", 1.0)),
        server_metrics=not bool(opt("no_server_metrics", False)),
        gpu_peaks=_gpu_peaks(opt("gpu_peaks", "")),
        prometheus_url=str(opt("prometheus_url", "") or ""),
        prometheus_selector=_selector(opt("prometheus_selector", "")),
        exporter_port=int(opt("exporter_port", 0) or 0),
        exporter_host=str(opt("exporter_host", "0.0.0.0")),
    )


def _selector(text: str) -> tuple[str, ...]:
    from tokenload.servermetrics.promql import parse_selector

    return parse_selector(str(text or ""))


def _gpu_peaks(text: str) -> dict[str, float] | None:
    if not text:
        return None
    try:
        flops, bw = (float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(
            f"--gpu-peaks: expected FLOPS,BYTES_PER_S like 989e12,3.35e12, got {text!r}"
        ) from None
    if flops <= 0 or bw <= 0:
        raise ValueError(f"--gpu-peaks: expected positive numbers, got {text!r}")
    return {"flops_per_s": flops, "bytes_per_s": bw}
