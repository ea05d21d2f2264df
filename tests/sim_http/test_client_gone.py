"""A client that goes away mid-stream: the emulator notices at its next write, drops the request
from the engine, and keeps serving."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

from tests.sim_http.conftest import http_json
from tokenload.client.http_stream import StreamTarget
from tokenload.client.openai_stream import StreamState, build_request_body


def test_client_gone_mid_stream(start_sim) -> None:
    sim = start_sim("--profile", "h100-llama3.1-8b", "--max-model-len", "4096")
    url = urlsplit(sim.url)
    body = json.dumps({"prompt": "hi", "max_tokens": 3000, "ignore_eos": True, "stream": True}).encode()
    with socket.create_connection((url.hostname, url.port), timeout=10) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        got = b""
        while got.count(b"data: ") < 5:
            got += s.recv(65536)
    assert http_json(sim.url + "/sim/stats")[1]["running"] == 1
    deadline = time.monotonic() + 5  # 3,000 tokens would take ~20 s
    while http_json(sim.url + "/sim/stats")[1]["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert http_json(sim.url + "/sim/stats")[1]["running"] == 0

    target = StreamTarget(sim.url)
    state = StreamState(chat=False)
    model = http_json(sim.url + "/v1/models")[1]["data"][0]["id"]
    req = build_request_body(chat=False, model=model, prompt="again", max_tokens=20, ignore_eos=True)
    out = target.stream("/v1/completions", req, state)
    target.close()
    assert out.failure_class is None and state.output_tokens == 20 and state.done
