"""Out-of-sample validation of the built-in emulator profiles against public vLLM measurements at
concurrency > 1 (issue #17). Prints one JSON object: per point the published and the predicted
figures and their error, per profile the median and worst error.

None of these numbers was used to fit a profile: the A40 profile was fitted to a concurrency-1
table (bench/RESULTS.md); the H100 and H200 profiles take public specifications only. So every
point here is held out. The emulator runs in simulated time (tokenload.sim.virtual_sweep), the
load as the source describes it; what the source does not state is an assumption, written next
to the point. The GolfRider/llm-inference-lab batch table is deliberately not used (kept out of
the project as an independent check).

    .venv/bin/python bench/validate_profiles.py [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tokenload.sim.engine import EngineConfig
from tokenload.sim.virtual_sweep import VirtualSchedule, VirtualWorkload, virtual_sweep

SOURCES = {
    "S1": "haitwang-cloud/haitwang-cloud.github.io, content/llm/llm-benchmark-en.md @ 317392960f10 "
    "(2025-07-17): vLLM 0.9.0 V1, 1x H100 80GB, Llama-3.1-8B-Instruct, evalscope --parallel N --number N "
    "(one wave of N requests), LongAlpaca prompts of 5,000-10,000 characters, 2,000 output tokens",
    "S3": "an unnamed public repository's 'Phase 0 Baseline Benchmark Report - ShareGPT' (search index file "
    "36889049441): vLLM 0.14.1 V1, 1x H200, Llama-3.1-70B-Instruct ModelOpt FP8, fp8 KV cache, TP1, "
    "max_num_batched_tokens 8192, vllm bench serve, ShareGPT, 300 prompts per Poisson rate, "
    "avg 207 input and ~198 output tokens",
    "S4": "Database Mart, 'A40 vLLM Benchmark: 7B to 14B LLMs Under 50 & 100 Concurrent Requests' "
    "(databasemart.com/blog/vllm-gpu-benchmark-a40): A40 48GB, Qwen2.5-7B-Instruct 16-bit, "
    "50 requests at once, 100 input tokens, up to 600 output (25,703 generated: 514 on average)",
}


@dataclass(frozen=True)
class Point:
    source: str
    profile: str
    config: dict[str, Any]
    #: "wave": N requests at once, one each (S1, S4); "rate": Poisson arrivals for n_prompts.
    load: str
    level: float
    prompt: str
    output: str
    published: dict[str, float]
    assumed: str = ""
    n_prompts: int = 300
    extra: dict[str, Any] = field(default_factory=dict)


# S1, vLLM V1 table. Published TPOT is printed at 1 ms resolution; the finer one is
# (avg latency - avg TTFT) / 1999, derived from the same row. Level 40 sent only ~36 requests
# (317 requests in all for 555 asked: the length filter left ~36 prompts), so it is a wave of 36.
_S1 = [
    (5, 634.87, 276, 15.747),
    (10, 1169.81, 181, 17.082),
    (20, 2067.71, 366, 19.303),
    (30, 2726.02, 459, 21.902),
    (36, 3143.68, 397, 22.797),
]
_S1_ASSUMED = (
    "prompts uniform 1,200-2,500 tokens (5-10k characters of English at ~4 characters a token); "
    "vLLM 0.9 V1 defaults on an 80 GB GPU: max_num_batched_tokens 8192, max_num_seqs 256"
)
# S3: rate -> (TTFT p50, TPOT p50) ms.
_S3 = {
    0.5: (66.5, 20.4),
    0.75: (57.4, 20.3),
    1.0: (56.5, 20.4),
    1.25: (58.9, 20.4),
    1.5: (59.7, 20.5),
    2.0: (60.2, 20.8),
    2.5: (63.7, 21.2),
    3.0: (64.2, 21.5),
}
_S3_ASSUMED = "ShareGPT lengths as lognormal (mean 207 in, 198 out, sigma 0.8)"

POINTS = [
    *(
        Point(
            "S1", "h100-llama3.1-8b", {"max_num_batched_tokens": 8192, "max_num_seqs": 256},
            "wave", n, "uniform:1200-2500", "2000",
            {"output_tokens_per_s": tput, "ttft_ms_mean": ttft, "tpot_ms_mean": (lat * 1000 - ttft) / 1999},
            _S1_ASSUMED,
        )
        for n, tput, ttft, lat in _S1
    ),
    *(
        Point(
            "S3", "h200-llama3.1-70b-fp8",
            {"max_num_batched_tokens": 8192, "max_num_seqs": 1024, "enable_prefix_caching": True},
            "rate", rate, "lognormal:mean=207,sigma=0.8", "lognormal:mean=198,sigma=0.8",
            {"ttft_ms_p50": ttft, "tpot_ms_p50": tpot}, _S3_ASSUMED,
        )
        for rate, (ttft, tpot) in _S3.items()
    ),
    Point(
        "S4", "a40-qwen2.5-7b", {}, "wave", 50, "100", "514",
        {"output_tokens_per_s": 25703 / 23.48, "ttft_ms_p50": 761.11},
        "514 output tokens each (the published average; the source let requests stop on their own); "
        "vLLM V1 defaults (version not stated)",
    ),
]  # fmt: skip


def _predict(p: Point) -> dict[str, float]:
    workload = VirtualWorkload(p.prompt, p.output, seed=1)
    cfg = EngineConfig(**p.config)
    if p.load == "wave":
        # Every user sends one request at t=0; the step is too short for a second one.
        sched = VirtualSchedule(concurrency=(int(p.level),), step_duration_s=0.01, warmup=0.0, drain_s=600)
    else:
        sched = VirtualSchedule(
            rates=(p.level,), step_duration_s=p.n_prompts / p.level, warmup=0.0, drain_s=600
        )
    sweep = virtual_sweep(p.profile, cfg, workload, sched)
    recs = [r for r in sweep.records if r["failure_class"] is None]
    reqs = [r for r in sweep.requests if r.finished]
    ttft = sorted(r["ttft_ms"] for r in recs)
    tpot = sorted(r["tpot_ms"] for r in recs if r["tpot_ms"] is not None)
    start = min(r.arrival_s for r in reqs)
    end = max(r.token_times_s[-1] for r in reqs)
    return {
        "output_tokens_per_s": sum(r.num_output_tokens for r in reqs) / (end - start),
        "ttft_ms_mean": statistics.fmean(ttft),
        "ttft_ms_p50": statistics.median(ttft),
        "tpot_ms_mean": statistics.fmean(tpot),
        "tpot_ms_p50": statistics.median(tpot),
        "requests": len(recs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="only the JSON object")
    args = ap.parse_args(argv)
    rows = []
    for p in POINTS:
        pred = _predict(p)
        for metric, pub in p.published.items():
            err = pred[metric] / pub - 1.0
            rows.append(
                {
                    "source": p.source,
                    "profile": p.profile,
                    "load": f"{p.load} {p.level:g}",
                    "metric": metric,
                    "published": round(pub, 2),
                    "predicted": round(pred[metric], 2),
                    "error": round(err, 3),
                }
            )
    by_profile: dict[str, dict[str, Any]] = {}
    for prof in sorted({r["profile"] for r in rows}):
        for metric in sorted({r["metric"] for r in rows if r["profile"] == prof}):
            errs = [abs(r["error"]) for r in rows if r["profile"] == prof and r["metric"] == metric]
            by_profile.setdefault(prof, {})[metric] = {
                "points": len(errs),
                "median_abs_error": round(statistics.median(errs), 3),
                "worst_abs_error": round(max(errs), 3),
            }
    out = {"sources": SOURCES, "assumptions": {p.source: p.assumed for p in POINTS}, "by_profile": by_profile}
    out["points"] = rows
    if not args.json:
        for r in rows:
            head = f"{r['source']} {r['profile']:<24} {r['load']:<10} {r['metric']:<20}"
            print(
                f"{head} published {r['published']:>9} predicted {r['predicted']:>9} error {r['error']:+.1%}"
            )
    print(json.dumps(out, indent=1 if not args.json else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
