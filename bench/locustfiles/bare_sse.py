"""The reference client of bench/client_accuracy.py: a bare Locust FastHttpUser that streams a
completion and reads the SSE body line by line (what a Locust user would write by hand), timing
the first content line and every later one. It keeps no histograms and writes no records: each
process dumps its raw timings to ``$BARE_SSE_OUT.<pid>.jsonl`` at the end."""

from locust import constant, events, task
from locust.contrib.fasthttp import FastHttpUser

import json
import os
import time

_TIMINGS: list[dict] = []
BODY = json.dumps(
    {"model": "mock", "prompt": "hello", "max_tokens": int(os.environ.get("BARE_SSE_TOKENS", "128")),
     "stream": True}
).encode()  # fmt: skip


class BareSSE(FastHttpUser):
    wait_time = constant(0)

    @task
    def stream(self) -> None:
        t0 = time.perf_counter()
        chunks: list[float] = []
        rid = None
        with self.client.post("/v1/completions", data=BODY, stream=True, catch_response=True) as resp:
            body = resp.stream
            while True:
                line = body.readline(b"\n")
                if not line:
                    break
                if not line.startswith(b"data: "):
                    continue
                now = time.perf_counter()
                if line.startswith(b"data: [DONE]"):
                    break
                if rid is None:
                    rid = json.loads(line[6:])["id"]
                chunks.append(now)
            t_end = time.perf_counter()
            resp.success()
        _TIMINGS.append({"id": rid, "t0": t0, "chunks": chunks, "end": t_end})


@events.quitting.add_listener
def _dump(environment, **_kw) -> None:
    out = os.environ.get("BARE_SSE_OUT")
    if out:
        with open(f"{out}.{os.getpid()}.jsonl", "w") as fh:
            for t in _TIMINGS:
                fh.write(json.dumps(t) + "\n")
