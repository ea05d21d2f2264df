"""The digital twin of a real vLLM server (issue #17), the suite's short form of
``bench/twin_vllm.py``: the roomy server measured with a context sweep at one user and a
staircase, ``tokenload calibrate`` fitted to the two runs from the tier's base profile
(``tests/real_vllm/twin.py``).

What it checks is the model's form on a real engine: vLLM's CPU build spends time per sampled
token outside the model (output processing, and the API server streaming each token on the
same core), so its decode steps grow with the batch much faster than the model's arithmetic.
The fit with ``--fit-frontend`` gives that per-token term a time; in the GPU profiles' form
(no such term) the fit misses a batched step's TPOT. How close the fitted twin comes is a measurement,
not a check: two 10 s runs on a shared 2-core machine do not pin it (seven runs of this protocol
missed the 8-user TPOT by 0.2 % to 37.5 %), so it is printed here and measured, fitted and
validated out of sample with repeats, in ``bench/twin_vllm.py`` (``bench/RESULTS.md``).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.real_vllm.server import VllmServer
from tests.real_vllm.twin import SIM_ARGS, base_profile
from tokenload import calibrate

pytestmark = pytest.mark.slow

#: A fitted step off by more than this has not followed the server: the issue's parameter
#: tolerance for the twin (10 %).
FOLLOWED = 0.10
#: A tenth of an engine step (a step's TPOT): more mean queue time than that, with nothing
#: waiting, is the wait for a running step counted as queue (a third of a step on average).
QUEUE_SLIVER = 0.1


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def _sweep(url: str, out: Path, *args: str) -> None:
    cmd = [sys.executable, "-m", "tokenload", "sweep", "--host", url, "--workers", "0", "--out", str(out),
           "--warmup", "2", "--step-duration", "10", *args]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def _calibrate(runs: list[Path], base: Path, out: Path, *extra: str) -> dict:
    buf = io.StringIO()
    argv = [
        *map(str, runs),
        "--base-profile",
        str(base),
        "--sim-args",
        SIM_ARGS,
        "-o",
        str(out),
        "--json",
        *extra,
    ]
    with contextlib.redirect_stdout(buf):
        assert calibrate.main(argv) == 0
    return json.loads(buf.getvalue())


def test_a_real_servers_batches_need_the_twins_per_token_term(roomy: VllmServer, tmp_path: Path) -> None:
    ctx, stair = tmp_path / "ctx", tmp_path / "stair"
    _sweep(roomy.url, ctx, "--shape", "context", "--concurrency", "1", "--prompt-lengths", "64,256,1024",
           "--output-tokens", "64")  # fmt: skip
    # No 1-user step: the context sweep has them.
    _sweep(roomy.url, stair, "--concurrency", "2,4,8", "--prompt-tokens", "256", "--output-tokens", "64")
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(base_profile(), sort_keys=False))
    with_terms = _calibrate([ctx, stair], base, tmp_path / "twin.yaml", "--fit-frontend")
    plain = _calibrate([ctx, stair], base, tmp_path / "plain.yaml", "--fit-batched")

    def tpot_errors(fit: dict) -> dict[int, float]:
        return {
            s["concurrency"]: s["tpot_ms_p50"]["fitted"] / s["tpot_ms_p50"]["measured"] - 1
            for s in fit["steps"]
            if s["concurrency"] > 1 and s["tpot_ms_p50"]["measured"]
        }

    followed, control = tpot_errors(with_terms), tpot_errors(plain)
    print("TPOT errors with the frontend terms", followed, "without", control)
    print(json.dumps(with_terms["parameters"], default=str)[:2000])
    # The form needs the per-token term: the fit gives it a time (0.48 and 0.76 ms on two clean
    # CI runs of 2026-12-02). How tightly two 10 s runs pin it depends on the CPU's noise, so its
    # stated uncertainty is printed above, not asserted.
    assert with_terms["parameters"]["output_token_overhead_s"]["fitted"] > 0, with_terms["parameters"]
    # Without the term the fit misses a batched step's TPOT by more than FOLLOWED: in seven runs
    # of this protocol on the first host the 8-user step alone by -23 %, -41 %, -37 %, -40 %,
    # -14.4 % and -26.1 % (one run's not kept); on a faster host (a clean CI run of 2026-12-03)
    # the miss moved to the smaller batches (2/4/8 users: -16.9 %, -25.0 %, -5.7 %), so the
    # worst batched step is checked, not the 8-user one. With the term the first host's runs
    # missed the 8-user step by 0.2 %, 6.5 %, -12.9 %, 13.4 %, 16.2 %, 37.5 % and 28.5 % (the last
    # with the term's uncertainty at 3.5 %, "determined"): no bound on that held on every run, so
    # none is asserted; bench/twin_vllm.py measures it with repeats.
    assert max(abs(e) for e in control.values()) > FOLLOWED, control
    term = with_terms["parameters"]["output_token_overhead_s"]
    print(
        f"8-user TPOT miss with the term {followed[8]:+.3f}, without {control[8]:+.3f}; "
        f"term {term['fitted'] * 1e3:.3f} ms, uncertainty {term['uncertainty']:.3f}"
    )
    # The fitted profile runs in the emulator, here the staircase's 2-user step.
    twin = f"--profile {tmp_path / 'twin.yaml'} {SIM_ARGS}"
    sim = subprocess.run(
        [sys.executable, "-m", "tokenload", "plan", "--sim-args", twin, "--concurrency", "2",
         "--prompt-tokens", "256", "--output-tokens", "64", "--step-duration", "5", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stderr
    # Both count queue time as vLLM V1 does, from when the engine core takes a request in
    # (between steps): a request that came during a step waited for it outside the queue. So
    # with nothing waiting the queue time is a sliver of a step, on the real server and on its
    # twin. Counted from the arrival, the twin showed a third of a step here (0.82 ms against a
    # 2.6 ms TPOT, bench/twin_vllm.py's run C of 2026-12-07); the real server 0.006 ms.
    (predicted,) = json.loads(sim.stdout)["steps"]
    for name, step in (("real", _summary(stair)["steps"][0]), ("twin", predicted)):
        assert step["concurrency"] == 2
        queue, tpot = step["server"]["queue_time_ms"]["mean"], step["tpot_ms"]["p50"]
        assert queue < QUEUE_SLIVER * tpot, (name, queue, tpot)
