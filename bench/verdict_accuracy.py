"""How often tokenload's verdict names what really saturated the server (issue #15).

A seeded random grid of scenarios (all built-in profiles, v0 and v1, KV caches from tight to
roomy, max_num_seqs 2..1024, token budgets, prompt lengths 32..16k, output lengths 32..2k,
prefix sharing on and off, closed-loop staircases and open-loop rate steps). Each scenario runs
as a virtual sweep (the emulator in simulated time, /metrics parsed as a real server's, the
client's records timed as a real run's); tokenload's judge decides each step from those alone;
the oracle (tokenload.sim.oracle: counterfactual runs that read the emulator's internals) gives
the truth at the top step's load, which is the step compared.

    python bench/verdict_accuracy.py --scenarios 200 --seed 1 [--json] [--jobs 2]
    python bench/verdict_accuracy.py --http 20 --seed 1     # real sweeps over HTTP vs virtual
    python bench/verdict_accuracy.py --below-top --scenarios 80 --seed 6   # the step below the top

``--cache DIR``: keep each scenario's virtual sweep (its steps before judging) and the oracle's
answer in DIR, keyed by the scenario itself; a later run with the same DIR judges them again in
seconds instead of re-running the emulator. For rule changes only: the oracle and the sweeps
are the emulator's, so a change to the emulator or to the grid needs a fresh DIR (a changed
scenario gets a new key by itself).

``--oracle-repeat``: the oracle run a second time at each scenario's top load on a fresh draw
of the same workload (``REPEAT_SEED_OFFSET``): how often the ground truth's label agrees with
itself, and the verdict's agreement where the two draws agree and where they do not.

``--below-top``: the step just below the top instead (the verdicts a knee rests on), against the
oracle at that step's load.

``--http N``: N scenarios of the grid (without prefix sharing, small enough to run in real time)
also run as real ``tokenload sweep``s against ``tokenload sim`` with the same engine settings;
prints how often the real measurement path's per-step verdicts equal the virtual sweep's.

Prints a confusion matrix (oracle label x verdict), accuracy per label and overall, and every
scenario judged wrong with the evidence its verdict quoted.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import multiprocessing
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tokenload.analysis.judge import judge_steps
from tokenload.analysis.signals import PREDICTED_GAIN_SIGNAL
from tokenload.analysis.thresholds import Thresholds
from tokenload.sim.engine import (
    EngineConfig,
    SimEngine,
)
from tokenload.sim.oracle import SATURATION_GAIN, OracleVerdict, judge_level, relaxation_label
from tokenload.sim.profile import list_profiles, load_profile
from tokenload.sim.virtual import RequestSpec, run_closed_loop
from tokenload.sim.virtual_sweep import VirtualSchedule, VirtualWorkload, virtual_sweep


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def make_scenario(rng: random.Random, index: int) -> dict[str, Any]:
    """One random scenario, as plain data (so it prints and reruns)."""
    profile = rng.choice(list_profiles())
    prof = load_profile(profile)
    preset = rng.choice(["v1", "v0"])
    prompt_mean = round(_log_uniform(rng, 32, 16384))
    output_mean = round(_log_uniform(rng, 32, 2048))
    shape = rng.choice(["fixed", "lognormal", "uniform"])
    max_len = prof.model.max_model_len
    prompt_mean = min(prompt_mean, max_len // 3)
    output_mean = min(output_mean, max_len // 3)
    if shape == "fixed":
        prompt_spec, output_spec = str(prompt_mean), str(output_mean)
    elif shape == "lognormal":
        prompt_spec = f"lognormal:mean={prompt_mean},sigma=0.5"
        output_spec = f"lognormal:mean={output_mean},sigma=0.5"
    else:
        prompt_spec = f"uniform:{max(1, prompt_mean // 2)}-{prompt_mean * 3 // 2}"
        output_spec = f"uniform:{max(1, output_mean // 2)}-{output_mean * 3 // 2}"
    need = prompt_mean * 2 + output_mean * 2 + 64  # room for the distributions' tails
    max_model_len = min(max_len, 1 << math.ceil(math.log2(need)))
    prefix = rng.random() < 0.3
    config: dict[str, Any] = {
        "preset": preset,
        "max_model_len": max_model_len,
        "max_num_seqs": rng.choice([2, 4, 8, 16, 32, 64, 128, 256, 256, 512, 1024]),
        "enable_prefix_caching": prefix,
        "seed": index,
    }
    if rng.random() < 0.6:  # a tight-to-roomy KV cache; else the profile's own size
        per_request = prompt_mean + output_mean
        config["num_gpu_blocks"] = math.ceil(
            max(max_model_len * 1.05, per_request * _log_uniform(rng, 1, 200)) / 16
        )
    if rng.random() < 0.4:
        budget = rng.choice([512, 1024, 2048, 4096, 8192, 16384])
        config["max_num_batched_tokens"] = budget if preset == "v1" else max(budget, max_model_len)
    workload = {
        "prompt_tokens": prompt_spec,
        "output_tokens": output_spec,
        "prefix_tokens": round(prompt_mean * rng.uniform(0.3, 0.9)) if prefix else 0,
        "prefix_groups": rng.choice([1, 2, 4, 8]),
        "seed": index,
    }
    open_loop = rng.random() < 0.35
    top = round(_log_uniform(rng, 2, 512))
    levels = sorted({max(1, round(top / 2**k)) for k in range(5)})
    return {
        "index": index,
        "profile": profile,
        "config": config,
        "workload": workload,
        "open_loop": open_loop,
        "levels": levels,
    }


def _unloaded_e2e_s(profile: str, config: EngineConfig, workload: VirtualWorkload) -> float:
    """One request alone, to size steps and rates."""
    from tokenload.sim.virtual_prompts import VirtualPrompts

    engine = SimEngine(profile, config)
    prompts = VirtualPrompts(workload)
    specs: list[RequestSpec] = [prompts.make(engine.max_model_len) for _ in range(3)]
    run = run_closed_loop(engine, 1, 3, lambda c, i: specs[i], record_timeline=False)
    return max(r.e2e_s for r in run.requests)


#: Where --cache keeps the sweeps and oracle answers (set in main; forked workers inherit it).
CACHE: Path | None = None
#: Part of every cache key: bump it when the virtual sweep records differently, so a kept
#: sweep from before is not judged as if it were today's. 2: steps settle and users spawn as the
#: step shapes make them, and send again a client turnaround after a response (2026-12-05).
#: 3: the turnaround drawn from its measured spread, not one value (tokenload/sim/turnaround.py).
#: 4: a request whose lengths exceed max_model_len is drawn again, as the client does
#: (workload.lengths.fitting_lengths), not cut to fit. 5: a V1 request's queue time counts from
#: the step boundary where the engine took it in, as vLLM V1's does (tokenload/sim/engine.py),
#: and a rate step's arrivals start 50 ms into it, as the master's schedule does.
SWEEP_VERSION = 5
#: --given-max-num-seqs: judge as a user who tells tokenload the server's max_num_seqs
#: (--server-max-num-seqs); vLLM's /metrics does not show it.
GIVEN_CAP = False


#: --step-overhead-ms: the step model's floor on an engine step's fixed time
#: (``Thresholds.step_overhead_ms``, 1 ms) for a sensitivity run, in ms, or "profile": each
#: scenario's own profile's ``step_overhead_s``, which /metrics does not show (the most that
#: measuring the fixed time could buy). None: the rules as they are.
STEP_OVERHEAD: str | None = None


def _step_overhead_arg(text: str) -> str:
    if text != "profile":
        try:
            ok = float(text) > 0
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(f"expected milliseconds above 0 or 'profile', got {text!r}")
    return text


@functools.cache
def _thresholds(profile: str) -> Thresholds | None:
    """The thresholds a scenario of ``profile`` is judged with: the defaults, or the floor that
    --step-overhead-ms asks for."""
    if STEP_OVERHEAD is None:
        return None
    ms = load_profile(profile).step_overhead_s * 1000 if STEP_OVERHEAD == "profile" else float(STEP_OVERHEAD)
    return Thresholds(step_overhead_ms=ms)


def _judge(steps: list[dict[str, Any]], sc: dict[str, Any]) -> list[dict[str, Any]]:
    cap = sc["config"].get("max_num_seqs") if GIVEN_CAP else None
    return judge_steps(steps, _thresholds(sc["profile"]), max_num_seqs=cap)[0]


def _cache_path(sc: dict[str, Any], from_top: int) -> Path | None:
    if CACHE is None:
        return None
    key = hashlib.sha256(json.dumps([sc, from_top, SWEEP_VERSION], sort_keys=True).encode()).hexdigest()[:20]
    return CACHE / f"{sc['index']:04d}-{from_top}-{key}.json"


def _level(sc: dict[str, Any], from_top: int) -> tuple[float, VirtualSchedule, dict[str, float]]:
    """The scenario's step length, its sweep's schedule and the load of the step ``from_top``
    below its top (0: the top), sized by one request alone with the scenario's own draw."""
    e2e1 = _unloaded_e2e_s(sc["profile"], EngineConfig(**sc["config"]), VirtualWorkload(**sc["workload"]))
    duration = min(90.0, max(20.0, 3 * e2e1))
    levels, at = sc["levels"], -1 - from_top
    if sc["open_loop"]:
        # Rates around what `levels` users would send back to back when unloaded.
        rates = tuple(round(c / e2e1, 4) for c in levels)
        schedule = VirtualSchedule(rates=rates, step_duration_s=duration, warmup=0.25, max_in_flight=4096)
        return duration, schedule, {"rate_rps": rates[at]}
    schedule = VirtualSchedule(concurrency=tuple(levels), step_duration_s=duration, warmup=0.25)
    return duration, schedule, {"concurrency": levels[at]}


def _oracle(sc: dict[str, Any], duration: float, load: dict[str, float], seed: int) -> OracleVerdict:
    """The oracle at one load of the scenario, its workload and engine drawn with ``seed``."""
    return judge_level(
        sc["profile"],
        EngineConfig(**{**sc["config"], "seed": seed}),
        VirtualWorkload(**{**sc["workload"], "seed": seed}),
        duration_s=max(40.0, 1.5 * duration),
        warmup_s=max(10.0, 0.5 * duration),
        **load,
    )


def _judged_sweep(sc: dict[str, Any], from_top: int) -> tuple[dict[str, Any], Any]:
    """The scenario's virtual sweep, judged; the verdict of the step ``from_top`` below its top
    step (0: the top) and the oracle at that step's load."""
    at = -1 - from_top
    cached = _cache_path(sc, from_top)
    if cached is not None and cached.exists():
        kept = json.loads(cached.read_text())
        steps = _judge(kept["steps"], sc)
        return steps[at]["verdict"], OracleVerdict(**kept["truth"])
    duration, schedule, load = _level(sc, from_top)
    sweep = virtual_sweep(
        sc["profile"], EngineConfig(**sc["config"]), VirtualWorkload(**sc["workload"]), schedule
    )
    unjudged = json.dumps(sweep.steps) if cached is not None else None
    steps = _judge(sweep.steps, sc)
    truth = _oracle(sc, duration, load, sc["config"]["seed"])
    if cached is not None:
        cached.write_text(f'{{"steps": {unjudged}, "truth": {json.dumps(dataclasses.asdict(truth))}}}')
    return steps[at]["verdict"], truth


def _truth_fields(truth: OracleVerdict, prefix: str = "") -> dict[str, Any]:
    """The oracle's answer as a result's fields (``oracle``, ``oracle_secondary``, ...), named
    with ``prefix``."""
    return {
        f"{prefix}oracle": truth.label,
        f"{prefix}oracle_secondary": truth.secondary,
        f"{prefix}oracle_gains": {k: round(v, 3) for k, v in truth.gains.items()},
        f"{prefix}oracle_doubling_gain": round(truth.doubled_throughput / truth.throughput - 1, 3)
        if truth.throughput
        else None,
    }


def run_scenario(sc: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    verdict, truth = _judged_sweep(sc, 0)
    return {
        "index": sc["index"],
        "scenario": sc,
        **_truth_fields(truth),
        "verdict": verdict["bottleneck"],
        "verdict_secondary": verdict.get("secondary"),
        "decided_by": verdict.get("decided_by"),
        "evidence": verdict["evidence"],
        "close_call": bool(verdict.get("close_call")),
        "verdict_saturated": bool(verdict.get("saturated")),
        "seconds": round(time.perf_counter() - t0, 2),
    }


#: --oracle-repeat: added to a scenario's seed for a fresh draw of the same workload and engine
#: (other prompt and output lengths from the same distributions, other arrivals).
REPEAT_SEED_OFFSET = 100_000


def run_repeat(sc: dict[str, Any]) -> dict[str, Any]:
    """The top step's verdict and oracle (as ``run_scenario``), and the oracle again at the same
    load on a fresh draw of the same workload: how far the ground truth agrees with itself."""
    first = run_scenario(sc)
    cached = None
    if CACHE is not None:
        key = json.dumps([sc, "oracle-repeat", REPEAT_SEED_OFFSET, SWEEP_VERSION], sort_keys=True)
        cached = CACHE / f"{sc['index']:04d}-repeat-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
    if cached is not None and cached.exists():
        again = OracleVerdict(**json.loads(cached.read_text()))
    else:
        duration, _, load = _level(sc, 0)
        again = _oracle(sc, duration, load, sc["config"]["seed"] + REPEAT_SEED_OFFSET)
        if cached is not None:
            cached.write_text(json.dumps(dataclasses.asdict(again)))
    return {**first, **_truth_fields(again, "repeat_")}


def summarize_repeat(results: list[dict[str, Any]]) -> dict[str, Any]:
    """How often the oracle's label on a fresh draw equals its first one, and the verdict's
    agreement with each, overall and where the two draws agree. A judge as good as the oracle
    itself, reading another draw, would agree with the first draw's label about as often as the
    repeat does."""
    n = len(results)
    same = [r for r in results if r["oracle"] == r["repeat_oracle"]]
    differ = [r for r in results if r["oracle"] != r["repeat_oracle"]]
    spread: dict[str, list[float]] = {}
    for r in results:
        for k, g in r["oracle_gains"].items():
            h = r["repeat_oracle_gains"].get(k)
            if h is not None and g > -1 and h > -1:
                spread.setdefault(k, []).append(abs(math.log((1 + g) / (1 + h))))

    def share(k: int, m: int) -> float | None:
        return round(k / m, 3) if m else None

    agree = len(same)
    mean_right = sum(r["verdict"] == _two_draw_label(r) for r in results)
    return {
        "scenarios": n,
        "oracle_agrees_with_itself": {
            "count": agree,
            "share": share(agree, n),
            "ci95": [round(x, 3) for x in wilson(agree, n)] if n else None,
        },
        "oracle_saturated_agrees_with_itself": share(
            sum((r["oracle"] == "none") == (r["repeat_oracle"] == "none") for r in results), n
        ),
        "verdict_vs_first_draw": share(sum(r["verdict"] == r["oracle"] for r in results), n),
        "verdict_vs_fresh_draw": share(sum(r["verdict"] == r["repeat_oracle"] for r in results), n),
        # Against the label of the two draws' mean gains (geometric): a truth with less noise.
        "verdict_vs_two_draw_mean": share(mean_right, n),
        # Of the oracle_agrees_with_itself.count scenarios whose draws agree.
        "verdict_right_where_the_draws_agree": sum(r["verdict"] == r["oracle"] for r in same),
        "where_the_draws_differ": {
            "count": len(differ),
            "verdict_is_first": sum(r["verdict"] == r["oracle"] for r in differ),
            "verdict_is_fresh": sum(r["verdict"] == r["repeat_oracle"] for r in differ),
            "pairs": sorted(f"{r['oracle']} / {r['repeat_oracle']}" for r in differ),
        },
        # Median |log(1 + gain)| between the two draws, per relaxation: the truth's own noise.
        "gain_spread_median": {k: round(sorted(v)[len(v) // 2], 3) for k, v in sorted(spread.items()) if v},
    }


def _two_draw_label(r: dict[str, Any]) -> str:
    """The oracle's label from the mean of the two draws (geometric, of 1 + gain), by the oracle's
    own definitions (tokenload.sim.oracle); where only one draw ran its relaxations (the other's
    doubling gain was past the line), that one's label."""

    def mean(a: float, b: float) -> float:
        return math.sqrt((1 + a) * (1 + b)) - 1

    first, again = r["oracle_doubling_gain"], r["repeat_oracle_doubling_gain"]
    if first is not None and again is not None and mean(first, again) >= SATURATION_GAIN:
        return "none"
    gains, other = r["oracle_gains"], r["repeat_oracle_gains"]
    if not (gains and other):
        return r["oracle"] if gains else r["repeat_oracle"]
    return relaxation_label({k: mean(g, other[k]) for k, g in gains.items() if k in other})[0]


def main_repeat(n: int, seed: int, jobs: int) -> int:
    rng = random.Random(seed)
    scenarios = [make_scenario(rng, i) for i in range(n)]
    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = pool.map(run_repeat, scenarios, chunksize=1)
    else:
        results = [run_repeat(s) for s in scenarios]
    out = {"seed": seed, "given_max_num_seqs": GIVEN_CAP, **summarize_repeat(results)}
    print(json.dumps(out))
    return 0


def run_below_top(sc: dict[str, Any]) -> dict[str, Any] | None:
    """The step just below the top, judged in the sweep as it ran, against the oracle at that
    step's load: the verdicts a knee rests on (the top step's are compared by ``run_scenario``).
    None for a one-step sweep."""
    if len(sc["levels"]) < 2:
        return None
    t0 = time.perf_counter()
    verdict, truth = _judged_sweep(sc, 1)
    return {
        "index": sc["index"],
        "oracle": truth.label,
        "oracle_saturated": truth.saturated,
        "verdict": verdict["bottleneck"],
        "saturated": verdict["saturated"],
        "decided_by": verdict["decided_by"],
        "seconds": round(time.perf_counter() - t0, 2),
    }


def main_below_top(n: int, seed: int, jobs: int) -> int:
    rng = random.Random(seed)
    scenarios = [make_scenario(rng, i) for i in range(n)]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        results = [r for r in pool.map(run_below_top, scenarios, chunksize=1) if r is not None]
    judged = [r for r in results if r["oracle"] != "unexplained"]
    out = {
        "seed": seed,
        "scenarios": n,
        "steps_compared": len(judged),
        "label_accuracy": round(sum(r["verdict"] == r["oracle"] for r in judged) / len(judged), 3)
        if judged
        else None,
        "saturated_accuracy": round(
            sum(r["saturated"] == r["oracle_saturated"] for r in judged) / len(judged), 3
        )
        if judged
        else None,
        "wrong": [r for r in judged if r["verdict"] != r["oracle"]],
    }
    print(json.dumps(out, indent=1))
    return 0


def _sim_args(sc: dict[str, Any]) -> str:
    cfg = sc["config"]
    words = ["--profile", sc["profile"], "--preset", cfg["preset"], "--seed", str(cfg["seed"])]
    for key in ("max_model_len", "max_num_seqs", "num_gpu_blocks", "max_num_batched_tokens"):
        if cfg.get(key) is not None:
            words += ["--" + key.replace("_", "-"), str(cfg[key])]
    if cfg.get("enable_prefix_caching"):
        words.append("--enable-prefix-caching")
    return " ".join(words)


def run_http(sc: dict[str, Any], duration: float) -> dict[str, Any]:
    """The scenario as a real sweep over HTTP and as a virtual sweep, step by step."""
    import subprocess
    import tempfile

    config = EngineConfig(**sc["config"])
    workload = VirtualWorkload(**sc["workload"])
    levels = sc["levels"][-3:]
    e2e1 = _unloaded_e2e_s(sc["profile"], config, workload)
    load_args: list[str]
    if sc["open_loop"]:
        rates = tuple(round(c / e2e1, 4) for c in levels)
        schedule = VirtualSchedule(rates=rates, step_duration_s=duration, warmup=0.25)
        load_args = ["--shape", "rate", "--rate", ",".join(str(r) for r in rates)]
    else:
        schedule = VirtualSchedule(concurrency=tuple(levels), step_duration_s=duration, warmup=0.25)
        load_args = ["--concurrency", ",".join(str(c) for c in levels)]
    virtual = _judge(virtual_sweep(sc["profile"], config, workload, schedule).steps, sc)
    if GIVEN_CAP:
        load_args += ["--server-max-num-seqs", str(sc["config"]["max_num_seqs"])]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "tokenload", "sweep", *load_args, "--step-duration", str(duration),
               "--warmup", "0.25", "--prompt-tokens", sc["workload"]["prompt_tokens"],
               "--output-tokens", sc["workload"]["output_tokens"], "--workers", "0",
               "--metrics-interval", "1", "--out", str(run_dir), "--sim-args", _sim_args(sc)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * len(levels) + 600)
        # A run whose requests failed (a timeout past the knee) exits 1, as Locust does, and is
        # still a run with verdicts; only a run that wrote no summary is an error.
        summary = run_dir / "summary.json"
        if not summary.exists():
            return {"index": sc["index"], "error": (proc.stderr or proc.stdout)[-400:]}
        real = json.loads(summary.read_text())["steps"]
    return {
        "index": sc["index"],
        "virtual": [s["verdict"]["bottleneck"] for s in virtual],
        "http": [s["verdict"]["bottleneck"] for s in real],
        "http_flags": [s["flags"] for s in real],
    }


def main_http(n: int, seed: int, duration: float, as_json: bool) -> int:
    rng = random.Random(seed)
    picked = []
    i = 0
    while len(picked) < n and i < 20 * n:
        sc = make_scenario(rng, i)
        i += 1
        small = max(sc["levels"]) <= 128 and not sc["workload"]["prefix_tokens"]
        e2e1 = _unloaded_e2e_s(sc["profile"], EngineConfig(**sc["config"]), VirtualWorkload(**sc["workload"]))
        if small and e2e1 * 3 < duration:
            picked.append(sc)
    results = [run_http(sc, duration) for sc in picked]
    steps = [(v, h) for r in results if "http" in r for v, h in zip(r["virtual"], r["http"], strict=False)]
    same = sum(v == h for v, h in steps)
    out = {
        "scenarios": len(picked),
        "failed_runs": [r for r in results if "error" in r],
        "steps": len(steps),
        "steps_agreeing": same,
        "agreement": round(same / len(steps), 3) if steps else None,
        # On every step both ran: a real rate shape stops after an oversaturated step, the
        # virtual sweep runs them all.
        "scenarios_agreeing": sum(
            bool(r["http"]) and all(v == h for v, h in zip(r["virtual"], r["http"], strict=False))
            for r in results
            if "http" in r
        ),
        "given_max_num_seqs": GIVEN_CAP,
        "results": results,
    }
    if as_json:
        print(json.dumps(out))
    else:
        agreeing = out["scenarios_agreeing"]
        print(f"over HTTP vs virtual: {same}/{len(steps)} steps agree ({out['agreement']}); "
              f"{agreeing}/{len(picked)} scenarios agree on every step both ran")  # fmt: skip
        for r in results:
            print(f"  #{r['index']}: virtual {r.get('virtual')} http {r.get('http')} {r.get('error', '')}")
    return 0


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials (95 % with z = 1.96)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


#: Bands of a predicted gain's distance from the saturation line (Thresholds.saturation_gain)
#: that saturation_by_distance counts in: the first is the default close-call margin.
DISTANCE_BANDS = (0.0, 0.05, 0.1, 0.2, math.inf)


def predicted_gain(r: dict[str, Any]) -> float | None:
    """The predicted gain from 2x load that decided a verdict's saturation, or None (another
    signal decided it)."""
    return next((e["value"] for e in r["evidence"] if e["metric"] == PREDICTED_GAIN_SIGNAL), None)


def saturation_by_distance(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of the verdicts whose saturation a predicted gain decided, per band of the gain's distance
    from the line: how many, and how often their saturated-or-not call agreed with the oracle's
    (its own doubling gain against the same line). What Thresholds.saturation_margin was
    measured by (bench/RESULTS.md, "Close calls")."""
    line = Thresholds().saturation_gain
    out = []
    for lo, hi in itertools.pairwise(DISTANCE_BANDS):
        agreed = count = 0
        for r in results:
            gain, truth = predicted_gain(r), r["oracle_doubling_gain"]
            if gain is None or truth is None or not lo <= abs(gain - line) < hi:
                continue
            count += 1
            agreed += (gain < line) == (truth < line)
        out.append({"distance": [lo, None if math.isinf(hi) else hi], "count": count, "agreed": agreed})
    return out


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    labels = sorted({r["oracle"] for r in results} | {r["verdict"] for r in results})
    confusion = {a: {b: 0 for b in labels} for a in labels}
    for r in results:
        confusion[r["oracle"]][r["verdict"]] += 1
    per_label = {}
    for a in sorted({r["oracle"] for r in results}):
        mine = [r for r in results if r["oracle"] == a]
        per_label[a] = {
            "count": len(mine),
            "accuracy": round(sum(r["verdict"] == a for r in mine) / len(mine), 3),
        }
    per_profile = {}
    for p in sorted({r["scenario"]["profile"] for r in results}):
        mine = [r for r in results if r["scenario"]["profile"] == p]
        per_profile[p] = {
            "count": len(mine),
            "accuracy": round(sum(r["verdict"] == r["oracle"] for r in mine) / len(mine), 3),
        }
    right = sum(r["verdict"] == r["oracle"] for r in results)
    secondary = sum(r["verdict"] != r["oracle"] and r["verdict"] == r["oracle_secondary"] for r in results)
    # Not the accuracy: how often the oracle's label is at least named, as the verdict or as its
    # secondary (a predicted gain within 80 % of the best one's).
    named = sum(r["oracle"] in (r["verdict"], r.get("verdict_secondary")) for r in results)
    # Verdicts whose predicted gain from 2x load fell within Thresholds.saturation_margin of the
    # line (close calls) against the rest: how often each gets the label, and saturated-or-not.
    calls = {}
    for name, mine in (
        ("close_calls", [r for r in results if r.get("close_call")]),
        ("the_rest", [r for r in results if not r.get("close_call")]),
    ):
        calls[name] = {
            "count": len(mine),
            "right": sum(r["verdict"] == r["oracle"] for r in mine),
            "saturated_agrees": sum(r.get("verdict_saturated") == (r["oracle"] != "none") for r in mine),
        }
    return {
        "scenarios": len(results),
        "overall_accuracy": round(right / len(results), 3) if results else None,
        "saturation_by_distance": saturation_by_distance(results),
        # 95 % Wilson interval of the overall accuracy: what 200 scenarios can tell apart.
        "overall_accuracy_ci95": [round(x, 3) for x in wilson(right, len(results))] if results else None,
        "oracle_label_named": round(named / len(results), 3) if results else None,
        "verdict_is_oracle_secondary": secondary,
        "close_calls": calls,
        "per_label": per_label,
        "per_profile": per_profile,
        "confusion": confusion,
        "wrong": [
            {
                k: r[k]
                for k in (
                    "index",
                    "oracle",
                    "oracle_secondary",
                    "verdict",
                    "verdict_secondary",
                    "decided_by",
                    "oracle_gains",
                    "oracle_doubling_gain",
                    "evidence",
                    "scenario",
                )
            }
            for r in results
            if r["verdict"] != r["oracle"]
        ],
        "seconds": round(sum(r["seconds"] for r in results), 1),
    }


def _print(summary: dict[str, Any], seed: int) -> None:
    print(f"verdict accuracy: seed {seed}, {summary['scenarios']} scenarios, "
          f"overall {summary['overall_accuracy']:.1%} (95 % interval "
          f"{summary['overall_accuracy_ci95'][0]:.1%}-{summary['overall_accuracy_ci95'][1]:.1%}; "
          f"{summary['seconds']} s of simulation)")  # fmt: skip
    labels = list(summary["confusion"])
    width = max(len(x) for x in labels) + 2
    print("\noracle \\ verdict".ljust(width + 1) + "".join(x[:10].rjust(11) for x in labels))
    for a in labels:
        print(a.ljust(width) + "".join(str(summary["confusion"][a][b]).rjust(11) for b in labels))
    print(
        "\nper oracle label: "
        + ", ".join(f"{a} {v['accuracy']:.0%} of {v['count']}" for a, v in summary["per_label"].items())
    )
    print(
        "per profile: "
        + ", ".join(f"{p} {v['accuracy']:.0%} of {v['count']}" for p, v in summary["per_profile"].items())
    )
    named = summary["oracle_label_named"]
    print(f"verdict named the oracle's secondary: {summary['verdict_is_oracle_secondary']}; "
          f"the oracle's label named as the verdict or its secondary: {named:.1%}")  # fmt: skip
    for name, c in summary["close_calls"].items():
        print(f"{name.replace('_', ' ')}: {c['count']}, label right {c['right']}, "
              f"saturated-or-not right {c['saturated_agrees']}")  # fmt: skip
    print("saturated-or-not by the predicted gain's distance from the line: " + ", ".join(
        f"{b['distance'][0]:g}-{'' if b['distance'][1] is None else format(b['distance'][1], 'g')} "
        f"{b['agreed']} of {b['count']}" for b in summary["saturation_by_distance"]))  # fmt: skip
    print(f"\nwrong ({len(summary['wrong'])}):")
    for w in summary["wrong"]:
        sc = w["scenario"]
        gain = w["oracle_doubling_gain"] or 0.0
        print(f"  #{w['index']} oracle {w['oracle']} (2x load {gain:+.0%}; relax {w['oracle_gains']}) "
              f"verdict {w['verdict']} by {w['decided_by']}: {sc['profile']} {sc['config']} {sc['workload']} "
              f"{'rates' if sc['open_loop'] else 'users'} {sc['levels']}")  # fmt: skip
        for e in w["evidence"][:4]:
            print(f"      {e['metric']} = {e['value']} ({e['rule']})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenarios", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--http", type=int, default=0, help="run N scenarios over HTTP too (real sweeps)")
    ap.add_argument("--http-step-duration", type=float, default=20.0)
    ap.add_argument("--cache", type=Path, help="keep sweeps and oracle answers here; judge kept ones again")
    ap.add_argument(
        "--given-max-num-seqs",
        action="store_true",
        help="judge as a user who gives the server's max_num_seqs (--server-max-num-seqs)",
    )
    ap.add_argument(
        "--below-top",
        action="store_true",
        help="judge the step below the top, with and without the top's measured gain",
    )
    ap.add_argument(
        "--oracle-repeat",
        action="store_true",
        help="run the oracle again on a fresh draw of each workload: how often the truth agrees with itself",
    )
    ap.add_argument(
        "--step-overhead-ms",
        type=_step_overhead_arg,
        help="sensitivity: the step model's floor on a step's fixed time, ms, or 'profile' (each "
        "scenario's profile's own, which /metrics does not show)",
    )
    args = ap.parse_args(argv)
    global CACHE, GIVEN_CAP, STEP_OVERHEAD
    GIVEN_CAP = args.given_max_num_seqs
    STEP_OVERHEAD = args.step_overhead_ms
    if args.cache is not None:
        args.cache.mkdir(parents=True, exist_ok=True)
        CACHE = args.cache
    if args.oracle_repeat:
        return main_repeat(args.scenarios, args.seed, args.jobs)
    if args.below_top:
        return main_below_top(args.scenarios, args.seed, args.jobs)
    if args.http:
        return main_http(args.http, args.seed, args.http_step_duration, args.json)
    rng = random.Random(args.seed)
    scenarios = [make_scenario(rng, i) for i in range(args.scenarios)]
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.map(run_scenario, scenarios, chunksize=1)
    else:
        results = [run_scenario(s) for s in scenarios]
    summary = summarize(results)
    summary["seed"] = args.seed
    summary["given_max_num_seqs"] = args.given_max_num_seqs
    if args.json:
        print(json.dumps(summary))
    else:
        _print(summary, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
