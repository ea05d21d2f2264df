"""How long preparing prompts takes: 10,000 prompts of mixed lengths (uniform 64-2048 tokens),
exact through a live emulator's /tokenize, and estimated without it. Prints JSON.

Run: ``.venv/bin/python bench/prompt_build.py [--quick]`` (loopback only: it starts its own
``tokenload sim``)."""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tokenload.client.http_stream import StreamTarget  # noqa: E402
from tokenload.serving.process import ServerProcess  # noqa: E402
from tokenload.workload.plan import RequestPlanner  # noqa: E402
from tokenload.workload.spec import parse_workload  # noqa: E402
from tokenload.workload.tokenize_api import TokenizeClient  # noqa: E402


def build(n: int, method: str, counter) -> dict:
    spec = parse_workload({"input_tokens": "uniform:64-2048", "output_tokens": 64, "length_method": method})
    planner = RequestPlanner(spec, chat=False, count_tokens=counter, max_model_len=8192, model="m")
    calls0 = counter.calls if counter is not None else 0
    t0 = time.perf_counter()
    exact = 0
    for _ in range(n):
        exact += planner.next().exact
    dt = time.perf_counter() - t0
    return {
        "method": method,
        "prompts": n,
        "seconds": round(dt, 3),
        "prompts_per_s": round(n / dt),
        "exact_share": exact / n,
        "tokenize_calls": (counter.calls - calls0) if counter is not None else 0,
    }


def main() -> None:
    n = 1000 if "--quick" in sys.argv else 10_000
    with ServerProcess(["-m", "tokenload.sim", "--port", "0", "--max-model-len", "8192"]) as srv:
        target = StreamTarget(srv.url, pool_size=1)
        client = TokenizeClient(lambda payload: target.post("/tokenize", json.dumps(payload).encode()), "")
        result = [build(n, "tokenize", client), build(n, "estimate", None)]
    print(json.dumps({"results": result}, indent=2))


if __name__ == "__main__":
    main()
