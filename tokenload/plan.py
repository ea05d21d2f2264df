r"""``tokenload plan``: predict a sweep in simulated time -- the emulator's engine driven as
``tokenload sweep`` would drive it, its ``/metrics`` parsed as a real server's, every step judged
by the same function as a real run. Seconds instead of minutes, no network; a prediction from an
emulator profile, labelled as such.

    tokenload plan --concurrency 1,8,32,128 --prompt-tokens 700 --output-tokens 50
    tokenload plan --rate 1:16:x2 --sim-args "--profile h100-llama3.1-8b --max-num-seqs 64" --json
    tokenload plan --concurrency 4,16,64 --out reports/plan-1 && tokenload report reports/plan-1
    tokenload plan --concurrency 8:256:x2 --slo ttft_p95_ms=2000 --target-rps 40 \
        --set max_num_seqs=512 --set kv_cache_dtype=fp8 --set gpu=h100-llama3.1-8b
    tokenload plan --trace mooncake.jsonl --trace-steps 4 --trace-window 0:600 --set max_num_seqs=512

--trace FILE replays a trace as `tokenload sweep --shape trace` does (each row at its time with
its lengths and its prefix blocks; --trace-steps N: N windows, each a judged step): the
--prompt-tokens/--output-tokens/--prefix-* options are then unused.

--set KEY=VALUE[,KEY=VALUE] (repeatable; each is one what-if): an engine argument (max_num_seqs,
num_gpu_blocks, gpu_memory_utilization, max_num_batched_tokens, ...), kv_cache_dtype=fp8, or
gpu=PROFILE (that profile's GPU figures, this profile's fitted efficiencies). Each what-if runs
the same load steps and workload and is judged the same way.

--draws N runs the plan N times (seeds --seed, --seed+1, ...: other lengths, arrivals and
client turnarounds) and shows each figure's range over the draws: what a real sweep of these
steps could measure, since it is one draw too. Default 5 for --rate (Poisson arrivals), 1 for
--concurrency. The steps, knee, capacity and what-ifs are the --seed draw's.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from tokenload.cli_args import OneLineParser
from tokenload.loadgen.option_table import run_defaults
from tokenload.loadgen.option_types import positive_seconds
from tokenload.report.capacity import add_capacity_options

__all__ = ["build_parser", "main"]

PROG = "tokenload plan"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", help="closed-loop users per step: 1,2,4 or 1:64:x2")
    load.add_argument("--rate", help="open-loop Poisson requests/s per step: 0.5,1,2 or 1:16:x2")
    # A trace replayed as `tokenload sweep --shape trace` replays it: its options are the sweep's.
    from tokenload.loadgen.option_table import add_option, group_flags

    add_option(load, "--trace")
    for flag in group_flags("trace"):
        if flag != "--trace":
            add_option(p, flag)
    p.add_argument(
        "--sim-args", default="", help='the emulated server, as tokenload sim takes it: "--profile ..."'
    )
    # The lengths and steps default as tokenload sweep's do (one declaration: the option table),
    # so that a plan without them predicts the sweep without them.
    run = run_defaults()
    p.add_argument(
        "--prompt-tokens",
        default=run["prompt_tokens"],
        help=f"prompt length spec (default {run['prompt_tokens']})",
    )
    p.add_argument(
        "--output-tokens",
        default=run["output_tokens"],
        help=f"output length spec (default {run['output_tokens']})",
    )
    p.add_argument("--prefix-tokens", type=int, default=0, help="a shared prompt prefix of N tokens")
    p.add_argument("--prefix-groups", type=int, default=1, help="distinct shared prefixes (default 1)")
    p.add_argument(
        "--step-duration",
        type=positive_seconds,
        default=run["step_duration"],
        help=f"seconds per step (default {run['step_duration']:g})",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=run["warmup"],
        help=f"fraction (< 1) or seconds left out per step (default {run['warmup']:g})",
    )
    p.add_argument("--max-in-flight", type=int, default=512, help="open loop: most requests in flight")
    p.add_argument("--seed", type=int, default=0, help="the workload's and arrivals' random seed (default 0)")
    p.add_argument(
        "--client-turnaround-ms",
        default=None,
        metavar="MS[,MS...]",
        help="closed loop: from a response's last token to the user's next request reaching the "
        "server, as quantiles from min to max (one value: always that); default the spread "
        "measured over loopback (tokenload/sim/turnaround.py). Add your network's round trip",
    )
    p.add_argument(
        "--draws",
        type=int,
        default=None,
        help="run the plan this many times with seeds --seed, --seed+1, ... and show each figure's "
        "range: what a real sweep of these steps could measure (default 5 for --rate, whose "
        "Poisson arrivals move short steps' figures most; 1 for --concurrency)",
    )
    add_capacity_options(p)
    p.add_argument(
        "--set",
        dest="what_if",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="a what-if: the same sweep with these settings changed (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the prediction as one JSON object")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write a new run directory (summary.json, records); not an existing run's",
    )
    return p


def _fail(message: str) -> NoReturn:
    print(f"{PROG}: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    from tokenload.analysis.judge import judge_steps
    from tokenload.loadgen.steps import (
        StepSpecError,
        parse_concurrency_list,
        parse_rate_list,
        rate_staircase,
        staircase,
    )
    from tokenload.results.planned_run import write_planned_run
    from tokenload.results.rundir import check_new_run_dir, make_run_dir
    from tokenload.sim import main as sim_main
    from tokenload.sim.profile import DEFAULT_PROFILE
    from tokenload.sim.virtual_sweep import VirtualSchedule, VirtualWorkload, virtual_sweep
    from tokenload.workload.errors import WorkloadError
    from tokenload.workload.lengths import parse_length_spec

    try:
        levels = parse_concurrency_list(args.concurrency) if args.concurrency else None
        rates = parse_rate_list(args.rate) if args.rate else None
        trace = None
        if args.trace:
            from tokenload.workload.trace import replay_trace

            trace = replay_trace(
                args.trace,
                args.trace_format,
                args.trace_block_size,
                args.trace_window,
                args.trace_speed,
                args.trace_scale_rate,
            )
        parse_length_spec(args.prompt_tokens, "--prompt-tokens")
        parse_length_spec(args.output_tokens, "--output-tokens")
        # The steps as tokenload sweep checks them (warm-up, duration, pool), one rule for both.
        if rates:
            rate_staircase(rates, args.step_duration, args.warmup, args.max_in_flight)
        elif trace is not None:
            if args.trace_steps > 1:
                trace.windows(args.trace_steps)  # each window must hold two rows (one line if not)
        else:
            staircase(levels or [1], args.step_duration, args.warmup)
        if args.client_turnaround_ms is not None and not levels:
            raise ValueError(
                "--client-turnaround-ms: a closed loop's (--concurrency); an open loop sends by the clock"
            )
        if args.out is not None:
            check_new_run_dir(args.out, "--out")
        schedule = VirtualSchedule(
            concurrency=tuple(levels or ()),
            rates=tuple(rates or ()),
            trace=trace,
            trace_steps=args.trace_steps,
            step_duration_s=args.step_duration,
            warmup=args.warmup,
            max_in_flight=args.max_in_flight,
            **(
                {"client_turnaround_s": _turnaround(args.client_turnaround_ms)}
                if args.client_turnaround_ms is not None
                else {}
            ),
        )
    except (StepSpecError, WorkloadError, ValueError) as exc:
        _fail(str(exc))
    from tokenload.report.capacity import SLOError, capacity_options

    try:
        slo, target, headroom = capacity_options(args)
    except (SLOError, ValueError) as exc:
        _fail(str(exc))
    if args.draws is not None and not 1 <= args.draws <= 100:
        _fail(f"--draws: expected 1 to 100 draws, got {args.draws}")
    if args.prefix_tokens < 0 or args.prefix_groups < 1:
        _fail("--prefix-tokens: expected >= 0 tokens, --prefix-groups >= 1")
    if args.prefix_tokens:
        from tokenload.workload.lengths import parse_length_spec, prefix_misfit

        why = prefix_misfit(parse_length_spec(args.prompt_tokens, "--prompt-tokens"), args.prefix_tokens)
        if why is not None:  # as a workload file's shared prefix is checked (workload.spec)
            _fail(
                f"--prompt-tokens: every prompt starts with the shared prefix (--prefix-tokens "
                f"{args.prefix_tokens}) and needs a part of its own, but {why}"
            )
    try:
        profile, config = sim_main.engine_from_text(args.sim_args, offline=True)
    except ValueError as exc:
        _fail(f"--sim-args: {exc}")
    from tokenload.sim.whatif import WhatIfError, apply_change, parse_change

    try:
        variants = []
        for text in args.what_if:
            change = parse_change(text)
            variants.append((change, *apply_change(profile, config, change)))
    except WhatIfError as exc:
        _fail(str(exc))
    workload = VirtualWorkload(
        args.prompt_tokens, args.output_tokens, args.prefix_tokens, args.prefix_groups, args.seed
    )
    t0 = time.perf_counter()
    try:
        sweep = virtual_sweep(profile, config, workload, schedule)
    except ValueError as exc:
        _fail(str(exc))
    # Judged as a run whose user gives the server's max_num_seqs (--server-max-num-seqs): the
    # emulated engine's is the user's own setting (--sim-args, or the default), not an internal.
    steps, knee = judge_steps(sweep.steps, max_num_seqs=config.max_num_seqs)
    # A trace's arrivals and lengths are the trace's own: other draws change only prompt ids.
    draws = args.draws if args.draws is not None else (5 if rates else 1)
    others = []
    for seed in range(args.seed + 1, args.seed + draws):
        try:
            other = virtual_sweep(profile, config, replace(workload, seed=seed), schedule)
        except ValueError as exc:
            _fail(f"--draws: seed {seed}: {exc}")
        others.append((seed, *judge_steps(other.steps, max_num_seqs=config.max_num_seqs), other.records))
    label = f"prediction: tokenload sim {args.sim_args or '--profile ' + DEFAULT_PROFILE} in simulated time"
    # The capacity, goodput and replicas exactly as `tokenload report` computes them.
    from tokenload.report.model import build_model

    def judged(
        steps: list[dict[str, Any]],
        knee: dict[str, Any] | None,
        records: list[dict[str, Any]],
        max_num_seqs: int = config.max_num_seqs,
    ) -> Any:
        # As the --out directory's summary.json says it (its report judges with the same cap).
        summary = {
            "steps": steps,
            "knee": knee,
            "prediction": {"label": label},
            "server_max_num_seqs": max_num_seqs,
        }
        return build_model(summary, records, [], slo=slo, target=target, headroom=headroom)

    capacity_model = None
    if args.slo is not None or target is not None:
        capacity_model = judged(steps, knee, sweep.records)
    spread = None
    if others:
        from tokenload.sim.draws import capacity_spread, draw_spread

        spread = draw_spread([(args.seed, steps, knee), *(o[:3] for o in others)])
        if capacity_model is not None:
            # Each draw's capacity and replicas as the --seed draw's: the single figure is one draw.
            models = [capacity_model, *(judged(o[1], o[2], o[3]) for o in others)]
            spread["capacity"] = capacity_spread([(_capacity_json(m), _replicas_json(m)) for m in models])
            spread["capacity"]["judged_with"] = _report_args(args)
    what_if: list[dict[str, Any]] = []
    if variants:
        as_is = capacity_model or judged(steps, knee, sweep.records)
        what_if.append(_outcome("(as is)", {}, steps, knee, as_is))
    for change, v_profile, v_config in variants:
        try:
            v_sweep = virtual_sweep(v_profile, v_config, workload, schedule)
        except ValueError as exc:
            _fail(f"--set {change.text}: {exc}")
        v_steps, v_knee = judge_steps(v_sweep.steps, max_num_seqs=v_config.max_num_seqs)
        v_model = judged(v_steps, v_knee, v_sweep.records, v_config.max_num_seqs)
        what_if.append(_outcome(change.text, change.to_dict(), v_steps, v_knee, v_model))
    out: dict[str, Any] = {
        "prediction": {
            "label": label,
            "profile": profile.name,
            "sim_args": args.sim_args,
            "engine": config.model_dump(mode="json"),
            "workload": (
                {
                    "trace": args.trace,
                    "rows": len(trace.rows),
                    "duration_s": trace.duration_s,
                    "seed": args.seed,
                }
                if trace is not None
                else {
                    "prompt_tokens": args.prompt_tokens,
                    "output_tokens": args.output_tokens,
                    "prefix_tokens": args.prefix_tokens,
                    "prefix_groups": args.prefix_groups,
                    "seed": args.seed,
                }
            ),
            "client_turnaround_ms": [round(x * 1000.0, 3) for x in schedule.client_turnaround_s],
            # What the capacity and replicas were judged by (tokenload report takes them again).
            "report_args": _report_args(args),
            "wall_s": round(time.perf_counter() - t0, 3),
        },
        "steps": steps,
        "knee": knee,
    }
    if spread is not None:
        out["draws"] = spread
    if capacity_model is not None:
        out["slo_capacity"] = _capacity_json(capacity_model)
        out["replicas"] = _replicas_json(capacity_model)
    if what_if:
        out["what_if"] = what_if
    if trace is not None:
        # As a replay's summary.json keeps it (loadgen/trace_replay.TraceShape), its windows (the
        # plan's only copy of them) with it: the report's "Trace replay" section reads it.
        from tokenload.workload.trace import replay_stats

        out["trace"] = replay_stats(trace, schedule.trace_windows)
    if args.out is not None:
        try:
            write_planned_run(make_run_dir(args.out, "--out"), out, sweep)
        except ValueError as exc:
            _fail(str(exc))
    if args.json:
        print(json.dumps(out, default=str))
        return 0
    print(label)
    print(
        f"{'step':>4} {'load':>10} {'out tok/s':>10} {'TTFT p50':>10} {'TPOT p50':>9}  verdict (decided by)"
    )
    from tokenload.report.tables import load_label, verdict_label

    for s in steps:
        load = load_label(s)
        v = s["verdict"]
        ttft, tpot = s["ttft_ms"]["p50"], s["tpot_ms"]["p50"]
        print(
            f"{s['index']:>4} {load:>10} {s['output_tokens_per_s']:>10.1f} "
            f"{'-' if ttft is None else f'{ttft:.1f}':>10} {'-' if tpot is None else f'{tpot:.2f}':>9}  "
            f"{verdict_label(s)} ({v['decided_by']})"
        )
    if spread is not None:
        _print_spread(spread, steps)
    from tokenload.report.model import knee_sentence

    print(f"predicted: {knee_sentence({'steps': steps, 'knee': knee})}")  # the reports' headline
    if capacity_model is not None:
        from tokenload.report.markdown import capacity_lines

        for line in capacity_lines(capacity_model):
            print(f"predicted: {line}")
        if spread is not None:
            from tokenload.report.draws import draws_lines

            for line in draws_lines(spread)[1:]:
                print(f"predicted: {line}")
    if what_if:
        _print_what_if(what_if)
    times = f" x {spread['count']} draws" if spread is not None else ""
    plural = "s" if len(steps) != 1 else ""
    print(f"({len(steps)} step{plural}{times} predicted in {out['prediction']['wall_s']:.2f} s)")
    if args.out is not None:
        again = shlex.join(["tokenload", "report", str(args.out), *_report_args(args)])
        print(f"run directory: {args.out} (its report: {again})")
    return 0


def _outcome(
    label: str, settings: dict[str, str], steps: list[dict[str, Any]], knee: dict[str, Any] | None, model: Any
) -> dict[str, Any]:
    """One what-if's answer: its knee, capacity (under the SLO, if given), replicas, and per step
    the throughput, latencies and verdict."""
    return {
        "set": label,
        "settings": settings,
        "knee": knee,
        "slo_capacity": _capacity_json(model),
        "replicas": _replicas_json(model),
        "steps": [
            {
                "index": s["index"],
                "concurrency": s["concurrency"],
                "target_rate_rps": s["target_rate_rps"],
                "output_tokens_per_s": s["output_tokens_per_s"],
                "ttft_ms_p50": s["ttft_ms"]["p50"],
                "tpot_ms_p50": s["tpot_ms"]["p50"],
                "bottleneck": s["verdict"]["bottleneck"],
            }
            for s in steps
        ],
    }


def _print_spread(spread: dict[str, Any], steps: list[dict[str, Any]]) -> None:
    from tokenload.report.draws import draws_heading, draws_lines, draws_table
    from tokenload.report.tables import text_table

    print(draws_heading(spread))
    print(text_table(*draws_table(spread, steps), left=2))
    print(draws_lines(spread)[0])


def _print_what_if(what_if: list[dict[str, Any]]) -> None:
    from tokenload.report.tables import text_table, what_if_table

    print("what if (the same load steps and workload, predicted):")
    header, rows = what_if_table(what_if)
    print(text_table(header, rows, left=1))


def _turnaround(text: str) -> tuple[float, ...]:
    from tokenload.sim.turnaround import check_quantiles

    field = "--client-turnaround-ms"
    try:
        ms = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"{field}: expected MS or MS,MS,... (milliseconds), got {text!r}") from None
    return tuple(x / 1000.0 for x in check_quantiles(ms, field, "milliseconds, min to max"))


def _report_args(args: argparse.Namespace) -> list[str]:
    """The options of ``tokenload report`` that judge the planned run as plan judged it (the SLO,
    the target, the headroom): a run directory keeps what was measured, not how it was judged."""
    out = []
    for flag, value in (
        ("--slo", args.slo),
        ("--target-rps", args.target_rps),
        ("--target-users", args.target_users),
        ("--headroom", args.headroom),
    ):
        if value is not None:
            out += [flag, f"{value:.15g}" if isinstance(value, float) else str(value)]
    return out


def _capacity_json(model: Any) -> dict[str, Any] | None:
    return None if model.capacity is None else model.capacity.to_dict()


def _replicas_json(model: Any) -> dict[str, Any] | None:
    if model.plan is None:
        return None if model.plan_error is None else {"error": model.plan_error}
    return model.plan.to_dict()
