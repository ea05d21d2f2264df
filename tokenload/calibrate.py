"""``tokenload calibrate``: fit an emulator profile to runs measured against your server.

    tokenload calibrate reports/ctx-sweep reports/staircase --base-profile h100-llama3.1-8b \\
        -o my-server.yaml
    tokenload sim --profile my-server.yaml          # the calibrated twin
    tokenload plan --sim-args "--profile my-server.yaml" --concurrency 1,8,32

It reads each run's summary.json and requests.jsonl (what any run records: the steps' figures
and the requests' lengths; nothing of the emulator's insides) and fits the cost model's unknowns
(``tokenload.sim.calibrate.PARAMETERS``) within physical bounds, keeping the GPU's peaks, the
model's shape and the engine's settings of the base profile and ``--sim-args``. A context sweep at
one user (several prompt lengths) pins the cost model; a staircase checks it on batches. The fit
error of every step is printed: in-sample figures. Validate the profile on a run it was not
fitted to (``tokenload plan`` that run's steps and compare) before planning with it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from tokenload.cli_args import OneLineParser

__all__ = ["build_parser", "main", "observations_from_run"]

PROG = "tokenload calibrate"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (summary.json)")
    p.add_argument(
        "--base-profile",
        default=None,
        help="the profile whose GPU, model and starting values are kept (default: --sim-args's, else a40)",
    )
    p.add_argument(
        "--sim-args",
        default="",
        help='the server\'s engine settings, as tokenload sim takes them: "--max-num-batched-tokens 8192"',
    )
    p.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="hold a parameter at a value instead of fitting it (repeatable), e.g. step_overhead_s=0.002",
    )
    p.add_argument(
        "--fit-batched",
        action="store_true",
        help="fit the batched steps' TPOT too, not only check them (see tokenload.sim.calibrate)",
    )
    p.add_argument(
        "--fit-frontend",
        action="store_true",
        help="also fit the serving software's costs outside the model (per sampled token, per "
        "request before the engine; tokenload.sim.calibrate.FRONTEND_PARAMETERS); implies --fit-batched",
    )
    p.add_argument(
        "--fit-api-server",
        action="store_true",
        help="also fit the API server's CPU time per request (api_request_cpu_s), to the batched "
        "steps' throughput: it shows only where the API server's queue caps them (short requests, "
        'many users); its process count is an engine setting (--sim-args "--api-server-count N")',
    )
    p.add_argument(
        "--api-shares-engine-cpu",
        action="store_true",
        help="the server's API server runs on the engine's CPU core (vLLM's CPU build on one core): "
        "the profile says so (api_shares_engine_cpu), and its time per prompt token "
        "(api_prompt_token_cpu_s) is read from the one-user steps' server TTFT outside queue and "
        "prefill (tokenload.sim.api_split)",
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the profile (YAML)")
    p.add_argument("--max-evals", type=int, default=600, help="profile evaluations at most (default 600)")
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    return p


def _fail(message: str) -> NoReturn:
    print(f"{PROG}: {message}", file=sys.stderr)
    raise SystemExit(2)


def _read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's summary.json. Raises ValueError (one line)."""
    try:
        return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except OSError as exc:
        what = (
            "no such directory"
            if not run_dir.exists()
            else "not a directory"
            if not run_dir.is_dir()
            else f"no summary.json ({exc.strerror or exc})"
        )
        raise ValueError(f"{run_dir}: {what}") from None
    except ValueError:
        raise ValueError(f"{run_dir}/summary.json: not JSON") from None


def observations_from_run(
    run_dir: Path, summary: dict[str, Any] | None = None
) -> tuple[list[Any], list[str], str | None]:
    """The closed-loop steps of one run as observations, a note per step left out, and what
    predicted the run if it is a prediction (``tokenload plan --out``), else None. ``summary``:
    its summary.json where the caller has read it (else it is read here)."""
    from tokenload.results.prediction import prediction_label
    from tokenload.sim.calibrate import Observation

    if summary is None:
        summary = _read_summary(run_dir)
    lengths: dict[int, tuple[list[int], list[int]]] = {}
    try:
        with open(run_dir / "requests.jsonl", encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                if r.get("status") != "ok" or r.get("phase") != "measure" or r.get("step") is None:
                    continue
                if r.get("input_tokens") and r.get("output_tokens"):
                    ins, outs = lengths.setdefault(int(r["step"]), ([], []))
                    ins.append(int(r["input_tokens"]))
                    outs.append(int(r["output_tokens"]))
    except OSError as exc:
        raise ValueError(f"{run_dir}: no requests.jsonl ({exc.strerror or exc})") from None
    except ValueError:
        raise ValueError(f"{run_dir}/requests.jsonl: a line is not JSON") from None
    out, notes = [], []
    for s in summary.get("steps") or []:
        label = f"{run_dir.name}#{s['index']}"
        if s.get("target_rate_rps") is not None:
            notes.append(f"{label}: a rate step (only closed-loop steps are fitted)")
            continue
        ins, outs = lengths.get(int(s["index"]), ([], []))
        if not ins or not s.get("concurrency"):
            notes.append(f"{label}: no successful measured request with its lengths")
            continue
        out.append(
            Observation(
                label,
                int(s["concurrency"]),
                round(statistics.median(ins)),
                round(statistics.median(outs)),
                (s.get("ttft_ms") or {}).get("p50"),
                (s.get("tpot_ms") or {}).get("p50"),
                s.get("output_tokens_per_s"),
            )
        )
    return out, notes, prediction_label(summary)


def _shared_api(
    profile: Any, summaries: list[tuple[Path, dict[str, Any]]], prompts: dict[str, int]
) -> tuple[Any, dict[str, Any]]:
    """The base profile with its API server on the engine's core, at the time per prompt token
    the runs' one-user steps show (tokenload.sim.api_split), each step's prompt length its
    requests' median (``prompts``, by step label); one line naming what is missing.
    ``summaries``: each run directory with its summary.json, as :func:`main` read it."""
    from tokenload.sim.api_split import api_prompt_token_s

    steps = [
        {**s, "prompt_tokens": prompts.get(f"{run.name}#{s['index']}")}
        for run, summary in summaries
        for s in summary.get("steps") or []
    ]
    read = api_prompt_token_s(steps)
    if read is None:
        _fail(
            "--api-shares-engine-cpu: reading the API server's time per prompt token takes one-user "
            "steps at two prompt lengths (a context sweep) with the server's TTFT, queue and prefill"
        )
    per_token, points = read
    update = {"api_shares_engine_cpu": True, "api_prompt_token_cpu_s": per_token}
    split = {
        "api_prompt_token_cpu_s": per_token,
        "read_from": [{"prompt_tokens": n, "outside_ms": t} for n, t in points],
    }
    return profile.model_copy(update=update), split


def _fixed(items: list[str]) -> dict[str, float]:
    """``--fix NAME=VALUE`` items as values, each checked against its parameter's bounds."""
    import difflib

    from tokenload.sim.calibrate import ALL_PARAMETERS as PARAMETERS

    bounds = {p.name: p for p in PARAMETERS}
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            _fail(f"--fix: expected NAME=VALUE; got {item!r}")
        p = bounds.get(name)
        if p is None:
            close = difflib.get_close_matches(name, bounds, n=1, cutoff=0.8)
            hint = f"did you mean {close[0]}?" if close else "expected one of " + ", ".join(bounds)
            _fail(f"--fix {item}: unknown parameter {name!r}; {hint}")
        try:
            v = float(value)
        except ValueError:
            v = float("nan")
        if not p.low <= v <= p.high:
            _fail(f"--fix {item}: expected a number in [{p.low:g}, {p.high:g}] for {name}")
        out[p.name] = v
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import yaml

    from tokenload.sim import main as sim_main
    from tokenload.sim.calibrate import (
        ALL_PARAMETERS,
        API_PARAMETERS,
        FIGURE_NOISE,
        FRONTEND_PARAMETERS,
        PARAMETERS,
        fit_errors,
        fit_profile,
        pinned_figures,
        values_of,
        with_values,
    )
    from tokenload.sim.profile import ProfileError, load_profile

    fixed = _fixed(args.fix)
    if args.max_evals < 20:
        _fail("--max-evals: expected at least 20")
    try:
        profile, config = sim_main.engine_from_text(args.sim_args, offline=True)
    except ValueError as exc:
        _fail(f"--sim-args: {exc}")
    if args.base_profile:
        try:
            profile = load_profile(args.base_profile)
        except ProfileError as exc:
            _fail(f"--base-profile: {exc}")
    observations, notes, warnings = [], [], []
    summaries: list[tuple[Path, dict[str, Any]]] = []  # read once: the API split reads their steps too
    for run in args.runs:
        try:
            summary = _read_summary(run)
            obs, left, predicted_by = observations_from_run(run, summary)
        except ValueError as exc:
            _fail(str(exc))
        summaries.append((run, summary))
        observations += obs
        notes += left
        if predicted_by is not None:
            warnings.append(
                f"{run} is a prediction ({predicted_by}), not a measurement: the fit reproduces "
                "the profile that predicted it; it does not twin a server"
            )
    if not observations:
        _fail("no closed-loop step with successful requests in " + ", ".join(map(str, args.runs)))
    api_split = None
    if args.api_shares_engine_cpu:
        profile, api_split = _shared_api(profile, summaries, {o.label: o.prompt_tokens for o in observations})
    single = any(o.concurrency <= 1 for o in observations)
    if not single:
        notes.append(
            "no single-user step: only batched TPOT constrains the fit (add a context sweep at 1 user)"
        )
    t0 = time.perf_counter()
    batched = args.fit_batched or args.fit_frontend
    fit = fit_profile(
        profile,
        config,
        observations,
        fixed=fixed,
        max_evals=args.max_evals,
        fit_batched=batched,
        fit_frontend=args.fit_frontend,
        fit_api=args.fit_api_server,
    )
    frontend = {p.name for p in FRONTEND_PARAMETERS}
    shown = [
        p
        for p in ALL_PARAMETERS
        if p in PARAMETERS
        or (p.name in frontend and (args.fit_frontend or p.name in fixed))
        or (p in API_PARAMETERS and (args.fit_api_server or p.name in fixed))
    ]
    wall = time.perf_counter() - t0
    fitted_names = [p.name for p in shown if p.name not in fixed]
    if fitted_names and set(fitted_names) <= set(fit.undetermined):
        warnings.append(
            "no fitted parameter is determined by these runs: the profile is the base's, moved "
            "within the noise (add a context sweep at 1 user)"
        )
    runs = ", ".join(str(r) for r in args.runs)
    weak = f"; not determined by them: {', '.join(fit.undetermined)}" if fit.undetermined else ""
    description = (
        f"{profile.model.name} on {profile.gpu.name}: fitted by tokenload calibrate to "
        f"{len(observations)} steps of {runs} (base {profile.name or 'profile'}{weak}); not yet validated"
    )
    fitted = with_values(fit.profile, fit.values, description)
    steps = []
    for o, p in zip(observations, fit.predictions, strict=True):
        errs = fit_errors(o, p, args.fit_api_server)
        steps.append(
            {
                "step": o.label,
                "concurrency": o.concurrency,
                "prompt_tokens": o.prompt_tokens,
                "output_tokens": o.output_tokens,
                "ttft_ms_p50": {"measured": o.ttft_ms_p50, "fitted": p.ttft_ms_p50},
                "tpot_ms_p50": {"measured": o.tpot_ms_p50, "fitted": p.tpot_ms_p50},
                "output_tokens_per_s": {"measured": o.output_tokens_per_s, "fitted": p.output_tokens_per_s},
                # What the fit used of this step (empty: only checked against the fit).
                "fitted_on": pinned_figures(o, args.fit_api_server, batched or not single),
                # The worst relative error of the figures the step pins (``error_of``); the others
                # are shown, not fitted (a batched step's TTFT p50 depends on how its users line up).
                "worst_error": max((abs(e) for e in errs), default=None),
                "error_of": pinned_figures(o, args.fit_api_server),
            }
        )
    base_values = values_of(profile)
    result = {
        "profile": str(args.output),
        "description": description,
        "parameters": {
            p.name: {
                "fitted": fit.values[p.name] if p.name not in fixed else None,
                # Its relative standard error were every figure 1 % off (FIGURE_NOISE), and
                # whether that leaves it undetermined by these runs (above UNDETERMINED).
                "uncertainty": fit.uncertainty[p.name],
                "determined": p.name not in fit.undetermined,
                "fixed": fixed.get(p.name),
                "base": base_values[p.name],
                "bounds": [p.low, p.high],
                "why": p.why,
            }
            for p in shown
        },
        "steps": steps,
        # Weight streaming plus per-step overhead: what decode steps pin even where its two
        # parts are undetermined.
        "decode_fixed_s": {"fitted": fit.decode_fixed_s, "uncertainty": fit.uncertainty["decode_fixed_s"]},
        "figure_noise": FIGURE_NOISE,
        "undetermined": fit.undetermined,
        "loss": fit.loss,
        "evaluations": fit.evaluations,
        "wall_s": round(wall, 2),
        "left_out": notes,
        "warnings": warnings,
        # --api-shares-engine-cpu: the API server's time per prompt token, read, not fitted.
        "api_server_on_engine_core": api_split,
    }
    header = [
        f"# Fitted by tokenload calibrate on {datetime.date.today().isoformat()} from: {runs}",
        f"# base profile: {profile.name or '-'}; engine settings: {args.sim_args or '(defaults)'}",
        "# Fitted (in sample): " + ", ".join(f"{k}={v:.4g}" for k, v in fit.values.items()),
        "# Per-step fit errors are in-sample; validate on another run before planning with it.",
    ]
    body = yaml.safe_dump(fitted.model_dump(mode="json"), sort_keys=False)
    try:
        args.output.write_text("\n".join(header) + "\n" + body, encoding="utf-8")
    except OSError as exc:
        _fail(f"--output: cannot write {args.output}: {exc.strerror or exc}")
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"fitted {len(observations)} steps in {wall:.1f} s ({fit.evaluations} evaluations)")
    for w in warnings:
        print(f"warning: {w}")
    for p in shown:
        d = result["parameters"][p.name]
        value = d["fixed"] if d["fixed"] is not None else d["fitted"]
        if d["fixed"] is not None:
            how = "fixed"
        else:
            how = f"fitted +-{100 * d['uncertainty']:.1f} %"
            how += "" if d["determined"] else " (not determined by these runs)"
            # A value on its bound: the runs asked for more than physics allows, a sign of the
            # model's form (or a run's noise), not a fit to trust as it stands.
            span = p.high - p.low
            if abs(value - p.high) <= 1e-3 * span or abs(value - p.low) <= 1e-3 * span:
                how += f" (at its {'upper' if abs(value - p.high) <= 1e-3 * span else 'lower'} bound)"
        print(f"  {p.name:<24} {value:10.4g}  {how}  (base {d['base']:.4g}, bounds {p.low:g}-{p.high:g})")
    if api_split is not None:
        read = ", ".join(f"{p['outside_ms']:.1f} ms at {p['prompt_tokens']}" for p in api_split["read_from"])
        print(
            f"  {'api_prompt_token_cpu_s':<24} {api_split['api_prompt_token_cpu_s']:10.4g}  read from the "
            f"one-user steps' server TTFT outside queue and prefill ({read} prompt tokens); "
            "on the engine's core"
        )
    fixed_u = fit.uncertainty["decode_fixed_s"]
    spread = "" if fixed_u is None else f" +-{100 * fixed_u:.1f} %"
    print(
        f"  {'decode step fixed time':<24} {1000 * fit.decode_fixed_s:10.4g}  ms{spread} (weights + overhead)"
    )
    print(f"  (+-: relative standard error were every figure {100 * FIGURE_NOISE:g} % off)")
    cols = f"{'TTFT p50 ms':>19} {'TPOT p50 ms':>17} {'output tok/s':>21}"
    print(f"{'step':<28} {'users':>5} {'prompt':>6} {cols}  worst error of what it pins")
    starred = False
    for s in steps:
        t, q, r = s["ttft_ms_p50"], s["tpot_ms_p50"], s["output_tokens_per_s"]
        # A batched step's TTFT the fit does not pin: the replay's line-up, not the profile's error.
        star = "*" if s["concurrency"] > 1 and "ttft_ms_p50" not in s["error_of"] else ""
        starred = starred or bool(star)
        ttft = f"{_num(t['measured'])} -> {_num(t['fitted'])}{star}"
        tpot = f"{_num(q['measured'])} -> {_num(q['fitted'])}"
        rate = f"{_num(r['measured'])} -> {_num(r['fitted'])}"
        worst = "-" if s["worst_error"] is None else f"{100 * s['worst_error']:.1f} %"
        worst += f" ({', '.join(_SHORT[n] for n in s['error_of'])})" if s["error_of"] else ""
        worst += "" if s["fitted_on"] else " (checked, not fitted)"
        cols = f"{ttft:>19} {tpot:>17} {rate:>21}"
        print(f"{s['step']:<28} {s['concurrency']:>5} {s['prompt_tokens']:>6} {cols}  {worst}")
    if starred:
        print(
            "* a batched step's TTFT p50 as a replay of its users, started together and sending again at "
            "once, gives it: 20-30 % off even with the true profile, not an error of the fit; `tokenload "
            "plan` (the client's turnaround drawn) is the prediction to compare it with"
        )
    for note in notes:
        print(f"left out: {note}")
    print(f"profile: {args.output} (tokenload sim --profile {args.output})")
    return 0


#: The step table's names of the figures a step pins.
_SHORT = {"ttft_ms_p50": "TTFT", "tpot_ms_p50": "TPOT", "output_tokens_per_s": "tok/s"}


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"
