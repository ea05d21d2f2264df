"""The A40 profile against the published reference table over HTTP: the emulator's server-side
TTFT and TPOT (what it exports on /metrics, as the reference was read from vLLM's /metrics)
within 10 % on each row, and tokenload's client a few milliseconds above them.

Reference: vLLM 0.6.6.post1, Qwen2.5-7B-Instruct bf16, one A40, concurrency 1, output 64 tokens
(the llm-inference-lab write-up this project started from; copied from its reference notes).
"""

from __future__ import annotations

import statistics

import pytest

from tests.sim_http.conftest import http_json
from tokenload.client.http_stream import StreamTarget
from tokenload.client.openai_stream import StreamState, build_request_body
from tokenload.metrics.definitions import compute_timing

REFERENCE = [  # input tokens, TTFT ms, TPOT ms
    (121, 37.3, 29.07),
    (511, 73.6, 28.86),
    (2041, 261.8, 28.96),
    (8191, 1736.0, 30.70),
]


@pytest.mark.parametrize(("n_in", "ttft_ms", "tpot_ms"), REFERENCE)
def test_reference_row(start_sim, n_in: int, ttft_ms: float, tpot_ms: float) -> None:
    sim = start_sim("--profile", "a40-qwen2.5-7b", "--preset", "v0", "--max-model-len", "32768")
    target = StreamTarget(sim.url)
    # The emulator's tokenizer is byte-level with a BOS token: N-1 ASCII bytes are N tokens.
    prompt = "a" * (n_in - 1)
    model = http_json(sim.url + "/v1/models")[1]["data"][0]["id"]
    body = build_request_body(chat=False, model=model, prompt=prompt, max_tokens=64, ignore_eos=True)
    client = []
    # One request at a time, as the reference; the first warms the server's code paths.
    for _ in range(4):
        state = StreamState(chat=False)
        out = target.stream("/v1/completions", body, state)
        assert out.failure_class is None, out.detail
        assert state.prompt_tokens == n_in and state.output_tokens == 64
        t = compute_timing(
            out.t_start, state.content_times, state.content_tokens, out.t_end, state.output_tokens
        )
        client.append((t.ttft_ms, t.tpot_ms))
    target.close()
    # The reference numbers are vLLM's own /metrics histograms (server side): compare the
    # emulator's server-side times (its trace: what it exports as vllm:time_to_first_token_seconds
    # and vllm:request_time_per_output_token_seconds) with them ...
    traces = sim.traces()[1:]
    server_ttft = statistics.median((t["first_token_s"] - t["arrival_s"]) * 1000 for t in traces)
    server_tpot = statistics.median((t["last_token_s"] - t["first_token_s"]) * 1000 / 63 for t in traces)
    assert server_ttft == pytest.approx(ttft_ms, rel=0.10)
    assert server_tpot == pytest.approx(tpot_ms, rel=0.10)
    # ... and the client's end-to-end view stays close to them: the HTTP path adds milliseconds.
    assert 0 < statistics.median(c[0] for c in client[1:]) - server_ttft < 10.0 + 0.01 * server_ttft
    assert statistics.median(c[1] for c in client[1:]) == pytest.approx(server_tpot, abs=1.0)
