"""A step's output tokens/s, three ways, against the truth (summary.json version 3).

Virtual (simulated time, the emulator's own token times as ground truth): for staircases whose
requests are short, long, or outlive their steps, each step's

* ``arrived``: tokens whose time fell in the measured part (the truth),
* ``reported``: summary.json's ``output_tokens_per_s`` (the client's count by arrival),
* ``at_completion``: all of a request's tokens in the step it ended in (what summary.json
  reported before version 3),
* ``server``: the ``vllm:generation_tokens_total`` counter's rate over the part.

``--real`` also runs ``tokenload sweep`` against ``tokenload sim`` (loopback, one local
process) and prints each step's ``output_tokens_per_s`` next to the server counter's rate.

    python bench/step_rates.py [--real] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tokenload.sim.virtual_sweep import VirtualSchedule, VirtualWorkload, virtual_sweep

SCENARIOS = (
    ("4096", "64", (1, 2, 4, 8), 10.0),
    ("256", "lognormal:mean=512,sigma=0.8", (4, 16, 64), 20.0),
    ("1024", "lognormal:mean=1024,sigma=1.0", (8, 32, 128), 15.0),
)
REAL = (
    *("--concurrency", "1,2,4,8", "--step-duration", "10"),
    *("--prompt-tokens", "4096", "--output-tokens", "64"),
)


def _err(x: float, truth: float) -> float | None:
    return round(100 * (x / truth - 1), 1) if truth else None


def virtual() -> list[dict]:
    out = []
    for prompt, output, levels, step_s in SCENARIOS:
        vs = virtual_sweep(
            "a40-qwen2.5-7b",
            None,
            VirtualWorkload(prompt, output, seed=3),
            VirtualSchedule(concurrency=levels, step_duration_s=step_s, warmup=0.25),
        )
        done = [r for r in vs.requests if r.finished]
        for step, w in zip(vs.steps, vs.windows, strict=True):
            a, b = w.measure_start, w.end
            arrived = sum(1 for r in done for t in r.token_times_s if a <= t < b) / (b - a)
            ended = sum(r.num_output_tokens for r in done if a <= r.token_times_s[-1] < b) / (b - a)
            server = step["server"]["generation_tokens"]["rate_per_s"]
            reported = step["output_tokens_per_s"]
            out.append(
                {
                    "workload": f"{prompt} in / {output} out, {step_s:g} s steps",
                    "users": step["concurrency"],
                    "arrived": round(arrived, 1),
                    "reported": round(reported, 1),
                    "reported_error_percent": _err(reported, arrived),
                    "at_completion": round(ended, 1),
                    "at_completion_error_percent": _err(ended, arrived),
                    "server": round(server, 1),
                    "server_error_percent": _err(server, arrived),
                }
            )
    return out


def real() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "tokenload", "sweep", "--workers", "0", "--out", str(run), *REAL]
        subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        steps = json.loads((run / "summary.json").read_text())["steps"]
    rows = []
    for s in steps:
        server = s["server"]["generation_tokens"]["rate_per_s"]
        rows.append(
            {
                "users": s["concurrency"],
                "output_tokens_per_s": round(s["output_tokens_per_s"], 1),
                "server": round(server, 1),
                "difference_percent": _err(s["output_tokens_per_s"], server),
                "scraped_s": round(s["server"].get("scraped_s") or 0.0, 3),
                "measured_s": round(s["measured_s"], 3),
            }
        )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--real", action="store_true", help="also run tokenload sweep against tokenload sim")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = {"virtual": virtual(), "real": real() if args.real else None}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for r in result["virtual"]:
        print(
            f"{r['workload']:<48} {r['users']:>4} users  arrived {r['arrived']:>8}  "
            f"reported {r['reported_error_percent']:+6.1f} %  "
            f"at completion {r['at_completion_error_percent']:+6.1f} %  "
            f"server {r['server_error_percent']:+6.1f} %"
        )
    for r in result["real"] or []:
        print(
            f"real sweep {r['users']:>3} users: client {r['output_tokens_per_s']} tok/s, "
            f"server {r['server']} ({r['difference_percent']:+.1f} %), "
            f"scraped {r['scraped_s']} of {r['measured_s']} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
