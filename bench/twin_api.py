"""The digital twin's API server cost against the emulator: how well ``tokenload calibrate
--fit-api-server`` recovers a hidden server's ``api_request_cpu_s``, and how well the fitted
profile predicts a staircase it was not fitted to. Prints JSON (one object per case).

Each case: the base profile's six fitted constants moved by 15-35 % (``perturbed_values``, the
seed) plus an API cost per request; ``tokenload plan`` (simulated time) records a context sweep
at one user (128, 512, 2048, 8192 in, 128 out) and a staircase that loads the API server
(4, 16, 64 users, 128 in, 16 out); calibrate fits them (with the flag, or without it as the
control); the hidden and the fitted profile each predict another staircase (8, 32, 128 users,
256 in, 32 out).

    python bench/twin_api.py [--case 1:0.01 --case 2:0.004 ...] [--without-flag] [--http]

With ``--http`` the two fitting runs are real ``tokenload sweep``s against ``tokenload sim`` with
the hidden profile (about 3 minutes a case).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import yaml  # noqa: E402
from twin_sim import _plan, _quiet  # noqa: E402  (the same plan and calibrate calls)

from tokenload import calibrate  # noqa: E402
from tokenload.sim.calibrate import perturbed_values, with_values  # noqa: E402
from tokenload.sim.profile import load_profile  # noqa: E402

BASE = "h100-llama3.1-8b"
FIT_RUNS = [("1", n, 128) for n in (128, 512, 2048, 8192)] + [("4,16,64", 128, 16)]
OTHER = ("8,32,128", 256, 32)
CASES = ["1:0.01", "2:0.004", "4:0.002", "2:0"]


def one(seed: int, cost: float, flag: bool, tmp: Path, http: bool = False, step_s: float = 10.0) -> dict:
    truth = {**perturbed_values(load_profile(BASE), seed), "api_request_cpu_s": cost}
    hidden = tmp / "hidden.yaml"
    hidden.write_text(yaml.safe_dump(with_values(load_profile(BASE), truth).model_dump(mode="json")))
    runs = []
    if http:
        # Both fitting runs as real `tokenload sweep`s over HTTP against `tokenload sim` with the
        # hidden profile: client timing, the API path's own latency, sampling noise.
        lengths = ",".join(str(n) for c, n, _ in FIT_RUNS if c == "1")
        common = ["--step-duration", str(step_s), "--warmup", "2", "--workers", "0"]
        common += ["--sim-args", f"--profile {hidden}"]
        conc, n_in, n_out = FIT_RUNS[-1]
        for name, args in (
            ("context", ["--shape", "context", "--concurrency", "1", "--prompt-lengths", lengths,
                         "--output-tokens", "128"]),
            ("staircase", ["--concurrency", conc, "--prompt-tokens", str(n_in),
                           "--output-tokens", str(n_out)]),
        ):  # fmt: skip
            cmd = [sys.executable, "-m", "tokenload", "sweep", *args, *common, "--out", str(tmp / name)]
            subprocess.run(cmd, check=True, capture_output=True, timeout=900)
            runs.append(str(tmp / name))
    else:
        for i, (conc, n_in, n_out) in enumerate(FIT_RUNS):
            _plan(hidden, conc, n_in, n_out, tmp / f"run{i}")
            runs.append(str(tmp / f"run{i}"))
    fitted = tmp / "fitted.yaml"
    t0 = time.perf_counter()
    argv = [*runs, "--base-profile", BASE, "-o", str(fitted), "--json"]
    result = json.loads(_quiet(calibrate.main, argv + (["--fit-api-server"] if flag else [])))
    wall = time.perf_counter() - t0
    params = {
        name: {
            "truth": truth[name],
            "fitted": p["fitted"],
            "error": (p["fitted"] / truth[name] - 1) if truth[name] else None,
            "determined": p["determined"],
            "uncertainty": p["uncertainty"],
        }
        for name, p in result["parameters"].items()
    }
    actual = _plan(hidden, *OTHER, None)
    predicted = _plan(fitted, *OTHER, None)
    held_out = [
        {
            "concurrency": a["concurrency"],
            "throughput_error": p["output_tokens_per_s"] / a["output_tokens_per_s"] - 1,
            "ttft_p50_error": p["ttft_ms"]["p50"] / a["ttft_ms"]["p50"] - 1,
        }
        for a, p in zip(actual, predicted, strict=True)
    ]
    top = FIT_RUNS[-1][0].split(",")[-1]
    return {
        "seed": seed,
        "api_request_cpu_s": cost,
        "fit_api_server": flag,
        "fitted_on": f"context sweep + staircase, {'over HTTP' if http else 'simulated'}",
        "cap_req_per_s": (1 / cost) if cost else None,
        "staircase_top_req_per_s": result["steps"][-1]["output_tokens_per_s"]["measured"] / FIT_RUNS[-1][2],
        "staircase_top_users": int(top),
        "calibrate_wall_s": round(wall, 1),
        "parameters": params,
        "held_out": held_out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", action="append", metavar="SEED:COST_S", help=f"default: {' '.join(CASES)}")
    ap.add_argument("--without-flag", action="store_true", help="calibrate without --fit-api-server")
    ap.add_argument("--http", action="store_true", help="the fitting runs over HTTP (tokenload sweep)")
    ap.add_argument("--step-duration", type=float, default=10.0, help="of the runs over HTTP (s)")
    args = ap.parse_args()
    cases = args.case or CASES
    for case in cases:
        seed, _, cost = case.partition(":")
        with tempfile.TemporaryDirectory() as tmp:
            flag = not args.without_flag
            result = one(int(seed), float(cost), flag, Path(tmp), args.http, args.step_duration)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
