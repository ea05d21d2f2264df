"""tokenload's Locust command-line options (also shown in the web UI), validated up front.

The API key is never an option: only the *name* of the environment variable that holds it, so
the key cannot appear in the web UI, in logs or in a saved configuration.
"""

from __future__ import annotations

import argparse
import os
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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value}")
    return value


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
        help="Server /metrics to scrape during the run, one per replica (repeatable or comma-separated); "
        "default: the host's /metrics",
    )
    g.add_argument("--metrics-interval", type=_positive_float, default=1.0, help="Seconds between scrapes")
    g.add_argument("--no-server-metrics", action="store_true", default=False, help="Do not scrape the server")
    g.add_argument(
        "--gpu-peaks",
        default="",
        help="The target GPU's peak FLOP/s and memory bytes/s, e.g. 989e12,3.35e12 (H100 SXM, bf16): "
        "lets the analysis compare the server's estimated FLOPs and bytes against them",
    )
    s = parser.add_argument_group("tokenload steps", "for the step shapes (locustfiles/staircase.py)")
    s.add_argument(
        "--concurrency", default="1,2,4,8", help="Concurrency steps: 1,2,4,8 or start:stop:xfactor"
    )
    s.add_argument("--step-duration", type=_positive_float, default=30.0, help="Seconds each step is held")
    s.add_argument(
        "--warmup",
        type=float,
        default=0.2,
        help="Start of each step left out of its stats: a fraction (<1) or seconds",
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
    )


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
