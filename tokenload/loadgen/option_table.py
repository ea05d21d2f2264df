"""Every tokenload run option, declared once.

The Locust plugin (``locust -f ...``), ``tokenload sweep`` and the Kubernetes pods are built from
this table: each option has its flag, type (the check that refuses a bad value before any load),
default, help and environment variable (``TOKENLOAD_<NAME>``, read by Locust and by the sweep;
the flag wins over the variable). ``python -m tokenload.loadgen.option_table`` prints the table
as Markdown (``k8s/README.md`` holds that list; a test keeps the two equal).

Pure: argparse and the checks in :mod:`tokenload.loadgen.option_types` only.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tokenload.loadgen import option_types as t

__all__ = [
    "GROUPS",
    "OPTIONS",
    "Option",
    "add_option",
    "add_options",
    "env_var_names",
    "forwarded_argv",
    "group_flags",
    "markdown",
    "run_defaults",
]

#: A run option is the Locust plugin's (and the sweep forwards it to its Locust processes);
#: a sweep option is the sweep's own (the target, the shape's locustfile, the processes).
Scope = Literal["run", "sweep"]
Kind = Literal["value", "switch", "append"]

_SAME = object()


@dataclass(frozen=True, slots=True)
class Option:
    flag: str
    group: str
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    kind: Kind = "value"
    scope: Scope = "run"
    #: The sweep's default where it differs (its staircase goes further than a plain run's).
    sweep_default: Any = _SAME
    #: False: the sweep has an option of its own for it (``--out`` for ``--run-dir``).
    in_sweep: bool = True
    #: The environment variable, when not ``TOKENLOAD_`` + the flag's name.
    env: str = ""
    #: Set by tokenload itself (sweep -> Locust), not by users: left out of --help and the
    #: Kubernetes table.
    internal: bool = False

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def env_var(self) -> str:
        return self.env or "TOKENLOAD_" + self.dest.upper()

    def default_for(self, scope: Scope) -> Any:
        return self.default if scope == "run" or self.sweep_default is _SAME else self.sweep_default


#: Argument groups in the order of ``--help``: name -> (title, description).
GROUPS: dict[str, tuple[str, str | None]] = {
    "target": ("tokenload sweep", "the target and the Locust processes (tokenload sweep only)"),
    "load": ("tokenload", "LLM load options"),
    "server": ("tokenload server metrics", "the server's figures and tokenload's own /metrics"),
    "steps": ("tokenload steps", "for the load shapes (locustfiles/staircase.py, ...)"),
    "knee": ("tokenload knee search", "for the knee shape (locustfiles/knee.py)"),
    "trace": (
        "tokenload trace replay",
        "for the trace shape (locustfiles/trace.py): replay a timestamped trace",
    ),
    "slo": (
        "tokenload SLO search",
        "for the slo shape (locustfiles/slo.py): the highest rate that meets an SLO",
    ),
    "stop": ("tokenload stop conditions", "end a shape early"),
}

OPTIONS: tuple[Option, ...] = (
    # --- the sweep's own ---------------------------------------------------------------------
    Option("--host", "target", "Target base URL; default: start the built-in emulator", scope="sweep"),
    Option(
        "--shape",
        "target",
        "staircase: --concurrency steps; knee: adaptive search for the saturation concurrency; "
        "rate: open-loop --rate steps; context: one step per --prompt-lengths length at each --concurrency; "
        "slo: open-loop search for the highest request rate that meets --slo; trace: replay --trace",
        default="staircase",
        choices=("context", "knee", "rate", "slo", "staircase", "trace"),
        scope="sweep",
    ),
    Option(
        "--endpoint",
        "target",
        "OpenAI endpoint the users call",
        default="completions",
        choices=("chat", "completions"),
        scope="sweep",
    ),
    Option(
        "--workers",
        "target",
        "Worker processes; 0 runs one local process",
        default=1,
        type=t.number(int, lambda v: v >= 0, "0 or more worker processes"),
        scope="sweep",
    ),
    Option(
        "--out",
        "target",
        "Run directory, a new one: a directory that holds a run is refused (default reports/<run-id>)",
        scope="sweep",
    ),
    Option(
        "--wait-ready",
        "target",
        "Seconds to wait, before any load, while the target's /health answers 503 (a model still "
        "loading); 0: do not wait",
        default=600.0,
        type=t.number(float, lambda v: v >= 0, "seconds >= 0"),
        scope="sweep",
    ),
    Option(
        "--sim-args",
        "target",
        "Extra arguments for the built-in emulator, when it is the target",
        default="",
        scope="sweep",
    ),
    # --- what each user sends ----------------------------------------------------------------
    Option("--model", "load", "Model name; default: the first model of the target's /v1/models", default=""),
    Option(
        "--api-key-env",
        "load",
        "Name of the environment variable holding the API key (the key itself is never an option)",
        default="OPENAI_API_KEY",
    ),
    Option(
        "--prompt-tokens",
        "load",
        "Prompt length in the target's tokens: 512, or a distribution uniform:64-256, normal:512,128, "
        "lognormal:mean=512,sigma=0.6, empirical:FILE (exact through the server's /tokenize when it has one)",
        default="128",
        type=t.length_spec("--prompt-tokens"),
    ),
    Option(
        "--output-tokens",
        "load",
        "Output length (max_tokens), a number or a distribution as --prompt-tokens",
        default="64",
        type=t.length_spec("--output-tokens"),
    ),
    Option(
        "--length-method",
        "load",
        "How prompt lengths are made exact: auto = /tokenize when the server has it, else an estimate",
        default="auto",
        choices=("auto", "tokenize", "tokenizer_file", "estimate", "token_ids"),
    ),
    Option(
        "--workload",
        "load",
        "A YAML run file whose 'workload:' section chooses datasets, shared prefixes, conversations, "
        "length distributions (overrides --prompt-tokens/--output-tokens)",
        default="",
    ),
    Option(
        "--natural-stop",
        "load",
        "Let the model stop on its own (no ignore_eos); output-tokens is then only a cap",
        default=False,
        kind="switch",
    ),
    Option("--ttft-timeout", "load", "Seconds to the first token", default=120.0, type=t.positive_seconds),
    Option(
        "--stall-timeout", "load", "Seconds without bytes mid-stream", default=30.0, type=t.positive_seconds
    ),
    Option("--run-dir", "load", "Run directory; default reports/<run-id>", default="", in_sweep=False),
    Option(
        "--no-gc-freeze",
        "load",
        "Leave Python's garbage collector alone in the processes that send requests (default: at "
        "the test's start they freeze what exists and collect fully less often, so the collector's "
        "pauses do not delay scheduled sends; bench/gc_freeze.py measures it)",
        default=False,
        kind="switch",
    ),
    # --- the server's side -------------------------------------------------------------------
    Option(
        "--metrics-url",
        "server",
        "Server /metrics to scrape during the run, one per replica (repeatable or comma-separated); "
        "default: the host's /metrics",
        type=t.metrics_url_type,
        kind="append",
        env="TOKENLOAD_METRICS_URLS",
    ),
    Option("--metrics-interval", "server", "Seconds between scrapes", default=1.0, type=t.positive_seconds),
    Option(
        "--metrics-discover",
        "server",
        "Find the replicas to scrape, again during the run: HOST:PORT[/PATH] of a headless Service "
        "(one /metrics per address its name resolves to) or file:PATH (a file of /metrics URLs, one "
        "per line); scraped besides --metrics-url, instead of the host's /metrics",
        default="",
        type=t.discover_type,
    ),
    Option(
        "--metrics-discover-every",
        "server",
        "Seconds between --metrics-discover lookups: replicas that appear or vanish are marked in "
        "server_metrics.jsonl and the report",
        default=5.0,
        type=t.positive_seconds,
    ),
    Option("--no-server-metrics", "server", "Do not scrape the server", default=False, kind="switch"),
    Option(
        "--gpu-peaks",
        "server",
        "The target GPU's peak FLOP/s and memory bytes/s, e.g. 989e12,3.35e12 (H100 SXM, bf16): "
        "lets the analysis compare the server's estimated FLOPs and bytes against them (none by "
        "default: the analysis then decides from the server's step times)",
        default="",
        type=t.gpu_peaks_type,
    ),
    Option(
        "--target-emulator",
        "server",
        "Set by tokenload sweep when it started the built-in emulator as the target: the "
        "emulator's command line, kept in summary.json so the report's command reruns the "
        "emulator, not its temporary port ('' = another server)",
        default="",
        in_sweep=False,
        internal=True,
    ),
    Option(
        "--server-max-num-seqs",
        "server",
        "The server's max_num_seqs (vLLM's cap on running requests), when you know it: vLLM's "
        "/metrics does not show it, so without it the analysis sees a cap only as running requests "
        "that stop growing across steps. With several engines (data parallel) or replicas scraped, "
        "their sum: it is compared with the running requests their /metrics add up to (0: not given)",
        default=0,
        type=t.count_or_zero,
    ),
    Option(
        "--prometheus-url",
        "server",
        "Take the server's figures from this Prometheus (http://prometheus:9090) with PromQL over "
        "each step, instead of scraping the servers' /metrics one by one",
        default="",
        type=t.promql_type("--prometheus-url"),
    ),
    Option(
        "--prometheus-selector",
        "server",
        'Label matchers added to every PromQL series, e.g. {namespace="llm",job="vllm"}',
        default="",
        type=t.promql_type("--prometheus-selector"),
    ),
    Option(
        "--prometheus-replica-label",
        "server",
        "The label that tells replicas apart in Prometheus' series (each one's figures and "
        "verdict, and an imbalance named); empty: the fleet as one server",
        default="instance",
        type=t.label_name,
    ),
    Option(
        "--exporter-port",
        "server",
        "Serve tokenload's own Prometheus /metrics on this port (0: off; with the web UI it is also "
        "at the web UI's /metrics)",
        default=0,
        type=t.port,
    ),
    Option(
        "--exporter-host",
        "server",
        "Interface of --exporter-port (default: all, as in a pod)",
        default="0.0.0.0",
    ),
    # --- the load shapes ---------------------------------------------------------------------
    Option(
        "--concurrency",
        "steps",
        "Concurrency steps: 1,2,4,8 or start:stop:xfactor",
        default="1,2,4,8",
        type=t.spec_type(lambda text, o: _steps().parse_concurrency_list(text, o), "--concurrency"),
        sweep_default="1,2,4,8,16,32,64",
    ),
    Option(
        "--rate",
        "steps",
        "Rate steps, open loop (locustfiles/rate.py): requests/s, 0.5,1,2 or start:stop:xfactor",
        default="1,2,4",
        type=t.spec_type(lambda text, o: _steps().parse_rate_list(text, o), "--rate"),
        sweep_default="1,2,4,8",
    ),
    Option(
        "--arrival",
        "steps",
        "Open-loop arrivals: constant, poisson or gamma:B (burstiness B, as vLLM's bench)",
        default="poisson",
        type=t.spec_type(lambda text, o: _arrivals().parse_arrival(text, o), "--arrival"),
    ),
    Option("--arrival-seed", "steps", "Seed of the arrival schedule", default=0, type=t.integer),
    Option(
        "--max-in-flight",
        "steps",
        "Open loop: users sending the arrivals (the most requests in flight, over all workers)",
        default=512,
        type=t.count,
    ),
    Option(
        "--prompt-lengths",
        "steps",
        "Context sweep (locustfiles/context_sweep.py): prompt lengths, one series of steps each (the "
        "default: the published A40 table's lengths, which tokenload demo compares with)",
        default="121,511,2041,8191",
        type=t.length_list("--prompt-lengths"),
    ),
    Option("--step-duration", "steps", "Seconds each step is held", default=30.0, type=t.positive_seconds),
    Option(
        "--warmup",
        "steps",
        "Start of each step left out of its stats: a fraction (<1) or seconds (0.2 of an 8 s step: "
        "measured from 1.6 s)",
        default=0.2,
        type=t.seconds_or_fraction,
    ),
    Option(
        "--drain",
        "steps",
        "Between steps, start no request until every request in flight has ended (at most "
        "--settle-timeout): each step starts from an idle server, at the cost of the longest "
        "request's time per step",
        default=False,
        kind="switch",
    ),
    Option("--knee-start", "knee", "First concurrency of the search", default=1, type=t.count),
    Option("--knee-max", "knee", "Highest concurrency the search may try", default=1024, type=t.count),
    Option(
        "--knee-factor", "knee", "Growth between probe steps while unsaturated", default=4.0, type=t.factor
    ),
    Option(
        "--knee-resolution",
        "knee",
        "Bisect until saturated / unsaturated concurrency is at most this ratio",
        default=1.5,
        type=t.factor,
    ),
    Option(
        "--probe-duration",
        "knee",
        "Seconds each probe step (the geometric climb) is held; default: half of --step-duration",
        type=t.positive_seconds,
    ),
    # --- trace replay ------------------------------------------------------------------------
    Option(
        "--trace",
        "trace",
        "A request trace to replay (Mooncake JSONL, BurstGPT CSV, Azure LLM inference CSV, or "
        "tokenload's JSONL/CSV: timestamp_s or gap_s, input_tokens, output_tokens, session_id, "
        "hash_ids, prompt); each row is sent at its time with its lengths",
        default="",
        type=t.trace_file,
    ),
    Option(
        "--trace-format",
        "trace",
        "The trace's format; auto: by its extension and header",
        default="auto",
        choices=("auto", "mooncake", "burstgpt", "azure", "jsonl", "csv"),
    ),
    Option(
        "--trace-speed", "trace", "Play the trace this many times faster", default=1.0, type=t.positive_number
    ),
    Option(
        "--trace-window",
        "trace",
        "Replay only START:END seconds of the trace (from its first row; either side may be empty)",
        default="",
        type=t.trace_window,
    ),
    Option(
        "--trace-scale-rate",
        "trace",
        "Rescale the trace's times to this mean request rate (req/s), keeping its burst shape",
        type=t.positive_number,
    ),
    Option(
        "--trace-block-size",
        "trace",
        "Tokens per hash id of the trace's hash_ids (512 in the Mooncake traces)",
        default=512,
        type=t.count,
    ),
    Option(
        "--trace-steps",
        "trace",
        "Replay the trace as this many steps: consecutive windows of equal duration, each judged "
        "with its own verdict",
        default=1,
        type=t.count,
    ),
    # --- the SLO search ----------------------------------------------------------------------
    Option(
        "--slo",
        "slo",
        "The SLO every probe must meet, e.g. ttft_p95_ms=500,tpot_p95_ms=50 (any of ttft, tpot, "
        "itl, e2e at p50, p90, p95 or p99), judged on each percentile's 95 %% interval",
        default="",
        type=t.slo_type("--slo"),
    ),
    Option(
        "--slo-attainment",
        "slo",
        "Also require this share of a probe's requests to meet every per-request limit of --slo "
        "(ttft, tpot, e2e), judged on the share's 95 %% interval, e.g. 0.99",
        type=t.number(float, lambda v: 0 < v <= 1, "a share in (0, 1]"),
    ),
    Option(
        "--slo-start", "slo", "First request rate of the search (req/s)", default=1.0, type=t.positive_number
    ),
    Option(
        "--slo-factor", "slo", "Each climbing probe's rate over the last one's", default=2.0, type=t.factor
    ),
    Option(
        "--slo-max",
        "slo",
        "Highest request rate the search may try (req/s)",
        default=1000.0,
        type=t.positive_number,
    ),
    Option(
        "--slo-resolution",
        "slo",
        "Bisect until the failing rate is within this share above the passing one (0.1 = 10 %%)",
        default=0.1,
        type=t.number(float, lambda v: 0 < v <= 1, "a share in (0, 1]"),
    ),
    Option(
        "--slo-repeats",
        "slo",
        "Times a probe whose interval straddles a limit is repeated (each twice as long) before it "
        "is reported indeterminate and decided on its point estimates (default 0: a third less "
        "load time; 1 lands within the resolution of the truth a little more often, see "
        "docs/sweep.md)",
        default=0,
        type=t.number(int, lambda v: v >= 0, "0 or more repeats"),
    ),
    # --- stop conditions ---------------------------------------------------------------------
    Option(
        "--stop-slo",
        "stop",
        "Stop after --stop-slo-steps steps in a row break this SLO, e.g. ttft_p95_ms=2000",
        default="",
        type=t.slo_type("--stop-slo"),
    ),
    Option("--stop-slo-steps", "stop", "Consecutive SLO breaches that stop", default=2, type=t.count),
    Option(
        "--stop-error-rate",
        "stop",
        "Stop after a step whose failed share is above this (0-1)",
        default=0.5,
        type=t.fraction,
    ),
    Option(
        "--no-stop-oversaturated",
        "stop",
        "Go on after a step whose server waiting queue grew throughout (over-saturation)",
        default=False,
        kind="switch",
    ),
    Option(
        "--time-budget",
        "stop",
        "Seconds of load at most: no step starts that would end past it",
        type=t.positive_seconds,
    ),
    Option(
        "--target-moe",
        "stop",
        "End a step early once every figure named is known to this margin of error (the 95 %% "
        "interval's wider side over the figure), e.g. ttft_p95=0.05,tpot_p50=0.02; --step-duration "
        "is then the longest a step runs, and a step that ends without it is flagged imprecise",
        default="",
        type=t.target_moe_type("--target-moe"),
    ),
    Option(
        "--settle-timeout",
        "stop",
        "Seconds a step's decision waits, after it ends, for the requests started in its measured "
        "part to end (summary.json says how many the bound cut; default 60)",
        default=60.0,
        type=t.positive_seconds,
    ),
)


def _steps() -> Any:
    from tokenload.loadgen import steps

    return steps


def _arrivals() -> Any:
    from tokenload.loadgen import arrivals

    return arrivals


def _selected(scope: Scope) -> list[Option]:
    if scope == "run":
        return [o for o in OPTIONS if o.scope == "run"]
    return [o for o in OPTIONS if o.scope == "sweep" or o.in_sweep]


def add_options(parser: Any, scope: Scope, env_vars: bool) -> None:
    """Add the ``scope``'s options to ``parser`` (Locust's parser for "run", the sweep's for
    "sweep"), grouped as ``GROUPS``. ``env_vars``: the parser is configargparse's (Locust's is),
    which then reads each option's ``TOKENLOAD_*`` variable when the flag is not given."""
    chosen = _selected(scope)
    for name, (title, description) in GROUPS.items():
        members = [o for o in chosen if o.group == name]
        if not members:
            continue
        group = parser.add_argument_group(title, description)
        for o in members:
            group.add_argument(o.flag, **_argparse_kwargs(o, scope, env_vars))


def add_option(container: Any, flag: str, scope: Scope = "sweep") -> None:
    """Add one declared option to an argparse parser or group (another command that takes it
    as the sweep does: ``tokenload plan --trace``), with its one declaration's help, type and
    default."""
    option = next((o for o in OPTIONS if o.flag == flag), None)
    if option is None:
        raise KeyError(f"no option {flag} is declared")
    container.add_argument(option.flag, **_argparse_kwargs(option, scope, False))


def group_flags(group: str) -> list[str]:
    """The flags of one of ``GROUPS``, in declaration order."""
    return [o.flag for o in OPTIONS if o.group == group]


def _argparse_kwargs(o: Option, scope: Scope, env_vars: bool) -> dict[str, Any]:
    default = o.default_for(scope)
    shown = o.kind not in ("switch", "append") and default not in (None, "") and "default" not in o.help
    kwargs: dict[str, Any] = {
        "default": default,
        "help": f"{o.help} (default {str(default).replace('%', '%%')})" if shown else o.help,
    }
    if o.internal:
        kwargs["help"] = argparse.SUPPRESS
    if env_vars:
        kwargs["env_var"] = o.env_var
    if o.kind == "switch":
        kwargs["action"] = "store_true"
    else:
        if o.kind == "append":
            kwargs["action"] = "append"
        if o.type is not None:
            kwargs["type"] = o.type
        if o.choices is not None:
            kwargs["choices"] = list(o.choices)
    return kwargs


def forwarded_argv(
    values: Mapping[str, Any] | argparse.Namespace,
    groups: Iterable[str] | None = None,
    sweep_defaults: bool = False,
) -> list[str]:
    """The run options among ``values`` (a sweep's parsed arguments) as the Locust command line
    takes them: each one whose value is not the plugin's own default (``sweep_defaults``: the
    sweep's, for a ``tokenload sweep`` line), switches as bare flags, repeatable options once per
    value; only those of ``groups`` when given."""
    given = dict(values) if isinstance(values, Mapping) else vars(values)
    wanted = None if groups is None else set(groups)
    out: list[str] = []
    for o in _selected("run"):
        if not o.in_sweep or o.dest not in given or (wanted is not None and o.group not in wanted):
            continue
        value = given[o.dest]
        default = o.sweep_default if sweep_defaults and o.sweep_default is not _SAME else o.default
        if value is None or value == default:
            continue
        if o.kind == "switch":
            out += [o.flag] if value else []
        elif o.kind == "append":
            for item in value:
                out += [o.flag, str(item)]
        else:
            out += [o.flag, str(value)]
    return out


@functools.cache
def _run_defaults() -> dict[str, Any]:
    return {o.dest: o.default for o in _selected("run")}


def run_defaults() -> dict[str, Any]:
    """Each run option's default by its ``dest`` (library use, with no parsed options)."""
    return dict(_run_defaults())


def option_value(opts: Any, dest: str) -> Any:
    """A run option's value from parsed options, or its default when the options lack it (a
    library user's Environment, no parsing)."""
    value = getattr(opts, dest, None)
    return _run_defaults()[dest] if value is None else value


def env_var_names() -> dict[str, str]:
    """``TOKENLOAD_*`` variable -> flag, for every run option."""
    return {o.env_var: o.flag for o in _selected("run")}


def _default_text(o: Option) -> str:
    if o.kind == "switch":
        return "off (`true` turns it on)"
    if o.default is None or o.default == "":
        return "(none)"
    return f"`{o.default}`"


def markdown(options: Iterable[Option] | None = None) -> str:
    """The run options as a Markdown table: variable, flag, default, meaning."""
    rows = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for o in options if options is not None else [o for o in _selected("run") if not o.internal]:
        meaning = o.help.replace("%%", "%").replace("|", "\\|")
        rows.append(f"| `{o.env_var}` | `{o.flag}` | {_default_text(o)} | {meaning} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
