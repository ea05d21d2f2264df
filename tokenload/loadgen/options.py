"""tokenload's Locust command-line options (also shown in the web UI), validated up front, and
the run's configuration read from them.

The API key is never an option: only the *name* of the environment variable that holds it, so
the key cannot appear in the web UI, in logs or in a saved configuration.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from tokenload.loadgen.option_table import add_options, run_defaults
from tokenload.loadgen.option_types import gpu_peaks

__all__ = [
    "INCIDENTAL_CONFIG",
    "WORKLOAD_CONFIG",
    "RunConfig",
    "add_arguments",
    "config_differences",
    "run_config",
    "workload_differences",
]


def add_arguments(parser: Any) -> None:
    """Register the run options on Locust's parser (``init_command_line_parser``), each also read
    from its ``TOKENLOAD_*`` variable (:mod:`tokenload.loadgen.option_table`)."""
    add_options(parser, "run", env_vars=True)


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
    #: The engine's cap on running requests, when the user gave it (0 = not given).
    server_max_num_seqs: int = 0
    #: Replicas looked up during the run (servermetrics/discovery.py; '' = none) and how often.
    metrics_discover: str = ""
    metrics_discover_every_s: float = 5.0
    #: A Prometheus server as the source of the server's figures ('' = scrape the servers).
    prometheus_url: str = ""
    prometheus_selector: tuple[str, ...] = ()
    prometheus_replica_label: str = "instance"
    #: tokenload's own /metrics on a port of its own (0 = off).
    exporter_port: int = 0
    exporter_host: str = "0.0.0.0"
    #: The processes that send requests freeze the GC's long-lived objects (--no-gc-freeze: no).
    gc_freeze: bool = True
    #: The built-in emulator's command line when tokenload sweep started it as the target
    #: (``tokenload sim --profile ...``; '' = another server).
    target_emulator: str = ""

    @property
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def public_dict(self) -> dict[str, Any]:
        """For reports: the configuration with no secret in it (only the key's variable name, and
        URLs without their credentials: ``--metrics-url http://user:pass@host/metrics``)."""
        from tokenload.report.redact import redact

        d = redact(asdict(self))
        d["api_key_set"] = self.api_key is not None
        return d


def run_config(options: Any) -> RunConfig:
    """Read the parsed options (Locust's ``environment.parsed_options``; None in library use)."""

    defaults = run_defaults()

    def opt(name: str) -> Any:
        return getattr(options, name, defaults[name]) if options is not None else defaults[name]

    return RunConfig(
        model=opt("model"),
        api_key_env=opt("api_key_env"),
        prompt_tokens=str(opt("prompt_tokens")),
        output_tokens=str(opt("output_tokens")),
        length_method=opt("length_method"),
        workload_file=opt("workload"),
        natural_stop=bool(opt("natural_stop")),
        ttft_timeout_s=float(opt("ttft_timeout")),
        stall_timeout_s=float(opt("stall_timeout")),
        run_dir=opt("run_dir"),
        metrics_urls=tuple(
            u.strip() for arg in (opt("metrics_url") or []) for u in arg.split(",") if u.strip()
        ),
        metrics_interval_s=float(opt("metrics_interval")),
        metrics_discover=str(opt("metrics_discover") or ""),
        metrics_discover_every_s=float(opt("metrics_discover_every")),
        server_metrics=not bool(opt("no_server_metrics")),
        gpu_peaks=gpu_peaks(opt("gpu_peaks")),
        server_max_num_seqs=int(opt("server_max_num_seqs") or 0),
        prometheus_url=str(opt("prometheus_url") or ""),
        prometheus_selector=_selector(opt("prometheus_selector")),
        prometheus_replica_label=str(opt("prometheus_replica_label") or ""),
        exporter_port=int(opt("exporter_port") or 0),
        exporter_host=str(opt("exporter_host")),
        gc_freeze=not bool(opt("no_gc_freeze")),
        target_emulator=str(opt("target_emulator") or ""),
    )


def _selector(text: str) -> tuple[str, ...]:
    from tokenload.servermetrics.promql import parse_selector

    return parse_selector(str(text or ""))


#: Config entries that differ between any two runs and say nothing about the workload.
INCIDENTAL_CONFIG = frozenset({"run_dir"})

#: Config entries that define the requests sent: two runs that differ in one sent other requests,
#: and a change between their steps is the workload's, not the server's.
WORKLOAD_CONFIG = frozenset(
    {"prompt_tokens", "output_tokens", "length_method", "workload_file", "natural_stop"}
)


def config_differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """What differs between two runs' ``config`` (summary.json): key -> (a's, b's), leaving out
    what differs between any two runs (the run directory) and, for two runs against the emulator
    tokenload sweep started, its /metrics URLs (the ports it happened to get: its arguments,
    ``target_emulator``, say what was served). A key a run made before it existed has its
    default."""
    incidental = INCIDENTAL_CONFIG | (
        {"metrics_urls"} if a.get("target_emulator") and b.get("target_emulator") else set()
    )
    # As summary.json holds them (JSON: a tuple is a list).
    defaults = {
        f.name: list(f.default) if isinstance(f.default, tuple) else f.default
        for f in fields(RunConfig)
        if f.default is not MISSING
    }
    out = {}
    for key in sorted((set(a) | set(b)) - incidental):
        va, vb = a.get(key, defaults.get(key)), b.get(key, defaults.get(key))
        if va != vb:
            out[key] = (va, vb)
    return out


def workload_differences(
    a: dict[str, Any], b: dict[str, Any], prompts_per_step: bool = False
) -> dict[str, tuple[Any, Any]]:
    """Of two runs' ``config``, the differences in what requests were sent (:data:`WORKLOAD_CONFIG`),
    length specs compared as parsed (``128`` is ``fixed:128``); ``prompts_per_step``: a context
    sweep, whose steps carry their own prompt length. Empty for a prediction (no config)."""
    if not a or not b:
        return {}
    from tokenload.workload.errors import WorkloadError
    from tokenload.workload.lengths import parse_length_spec

    def norm(key: str, value: Any) -> Any:
        if key in ("prompt_tokens", "output_tokens") and value is not None:
            try:
                return parse_length_spec(value, key).spec
            except (WorkloadError, ValueError):
                return value
        return value

    out = {}
    for key, (va, vb) in config_differences(a, b).items():
        per_step = key == "prompt_tokens" and prompts_per_step
        if key in WORKLOAD_CONFIG and not per_step and norm(key, va) != norm(key, vb):
            out[key] = (va, vb)
    return out
