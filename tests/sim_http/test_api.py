"""The emulator's HTTP surface, shaped like vLLM's OpenAI server."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.sim_http.conftest import http_json
from tokenload.client.http_stream import StreamTarget
from tokenload.client.openai_stream import StreamState, build_request_body


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory) -> str:
    from tokenload.serving.process import ServerProcess

    trace = tmp_path_factory.mktemp("sim") / "trace.jsonl"
    srv = ServerProcess(
        [
            "-m",
            "tokenload.sim",
            "--port",
            "0",
            "--profile",
            "h100-llama3.1-8b",
            "--max-model-len",
            "4096",
            "--trace",
            str(trace),
        ]
    )
    url = srv.start()
    yield url
    srv.stop()


def test_models_version_health(sim_url: str) -> None:
    status, body = http_json(sim_url + "/v1/models")
    assert status == 200 and body["object"] == "list"
    card = body["data"][0]
    assert card["object"] == "model" and card["max_model_len"] == 4096
    assert http_json(sim_url + "/version")[1]["version"].startswith("0.")
    with urllib.request.urlopen(sim_url + "/health") as r:
        assert r.status == 200


def test_tokenize_matches_the_engine(sim_url: str) -> None:
    model = http_json(sim_url + "/v1/models")[1]["data"][0]["id"]
    prompt = "Hello, wörld ✓"
    status, tok = http_json(sim_url + "/tokenize", {"model": model, "prompt": prompt})
    assert status == 200 and tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 4096
    status, out = http_json(sim_url + "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 5})
    assert status == 200 and out["usage"]["prompt_tokens"] == tok["count"]
    assert out["usage"]["completion_tokens"] == 5 and out["choices"][0]["finish_reason"] == "length"
    status, detok = http_json(sim_url + "/detokenize", {"model": model, "tokens": tok["tokens"]})
    assert status == 200 and prompt in detok["prompt"]
    messages = [{"role": "user", "content": prompt}]
    chat_count = http_json(sim_url + "/tokenize", {"model": model, "messages": messages})[1]["count"]
    chat = http_json(
        sim_url + "/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": 3}
    )[1]
    assert chat["usage"]["prompt_tokens"] == chat_count
    assert chat["choices"][0]["message"]["role"] == "assistant"


def test_prompt_forms(sim_url: str) -> None:
    status, out = http_json(sim_url + "/v1/completions", {"prompt": [65, 66, 67], "max_tokens": 2})
    assert status == 200 and out["usage"]["prompt_tokens"] == 3
    status, out = http_json(sim_url + "/v1/completions", {"prompt": ["a", "bb"], "max_tokens": 2})
    assert status == 200 and [c["index"] for c in out["choices"]] == [0, 1]
    assert out["usage"]["completion_tokens"] == 4


def test_token_id_prompts_use_the_models_whole_vocabulary(sim_url: str) -> None:
    # vllm bench serve's random dataset sends ids drawn from the model's vocabulary (Llama 3.1:
    # 128,256 ids), not the byte tokenizer's 259: each is one token.
    card = http_json(sim_url + "/v1/models")[1]["data"][0]
    assert card["tokenizer"] == {"text": "bytes", "vocab_size": 128256}
    ids = [1000, 50_000, 128_255, 65]
    status, out = http_json(sim_url + "/v1/completions", {"prompt": ids, "max_tokens": 2})
    assert status == 200 and out["usage"]["prompt_tokens"] == 4
    status, detok = http_json(sim_url + "/detokenize", {"tokens": ids})
    assert status == 200 and detok["prompt"] == "<|1000|><|50000|><|128255|>A"
    status, err = http_json(sim_url + "/v1/completions", {"prompt": [128_256], "max_tokens": 2})
    assert status == 400 and "[0, 128256)" in err["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (
            {"prompt": "x" * 5000, "max_tokens": 4},
            400,
            "maximum context length is 4096 tokens. However, your request has",
        ),
        ({"prompt": "x" * 4000, "max_tokens": 200}, 400, "you requested 200 output tokens"),
        ({"model": "nope", "prompt": "x"}, 404, "The model `nope` does not exist."),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream=True"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": 7}, 400, "prompt"),
    ],
)
def test_errors_are_shaped_like_vllm(sim_url: str, body: dict, status: int, needle: str) -> None:
    got, err = http_json(sim_url + "/v1/completions", body)
    assert got == status
    assert needle in err["error"]["message"] and err["error"]["code"] == status


def test_streaming_chat_and_completions(sim_url: str) -> None:
    target = StreamTarget(sim_url)
    model = http_json(sim_url + "/v1/models")[1]["data"][0]["id"]
    for chat in (True, False):
        state = StreamState(chat=chat)
        body = build_request_body(chat=chat, model=model, prompt="tell me", max_tokens=40, ignore_eos=True)
        out = target.stream("/v1/chat/completions" if chat else "/v1/completions", body, state)
        assert out.failure_class is None, out.detail
        assert state.output_tokens == 40 and state.chunk_tokens == 40  # continuous usage: exact per chunk
        assert state.finish_reason == "length" and state.done
    # Without ignore_eos, the natural length is drawn from the seeded distribution and ends in "stop".
    state = StreamState(chat=False)
    out = target.stream(
        "/v1/completions", build_request_body(chat=False, model=model, prompt="x", max_tokens=3000), state
    )
    assert out.failure_class is None and state.finish_reason in ("stop", "length")
    target.close()


def test_metrics_endpoint_has_vllm_families(sim_url: str) -> None:
    with urllib.request.urlopen(sim_url + "/metrics") as r:
        text = r.read().decode()
    for name in (
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket",
    ):
        assert name in text


def run_sim_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tokenload.sim", *args], capture_output=True, text=True, timeout=60
    )


def test_list_profiles() -> None:
    out = run_sim_cli("--list-profiles")
    assert out.returncode == 0
    assert {"a40-qwen2.5-7b", "h100-llama3.1-8b", "h200-llama3.1-70b-fp8"} <= set(out.stdout.split())


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--profile", "no-such-profile"], "unknown profile 'no-such-profile'"),
        (["--output-len", "weird"], "--output-len"),
        (["--http-500-rate", "2"], "--http-500-rate"),
    ],
)
def test_bad_flags_are_one_line(args: list[str], needle: str, tmp_path) -> None:
    out = run_sim_cli("--port", "0", *args)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_bad_profile_file_names_the_field(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ngpu: {name: x, memory_bandwidth_bytes_per_s: abc}\n")
    out = run_sim_cli("--port", "0", "--profile", str(bad))
    assert out.returncode == 2 and "bad.yaml" in out.stderr and "Traceback" not in out.stderr


def test_slow_startup_health_503(tmp_path) -> None:
    from tokenload.serving.process import ServerProcess

    with ServerProcess(["-m", "tokenload.sim", "--port", "0", "--startup-delay-s", "30"]) as srv:
        try:
            urllib.request.urlopen(srv.url + "/health", timeout=5)
            raise AssertionError("health should be 503 while loading")
        except urllib.error.HTTPError as e:
            assert e.code == 503
        status, err = http_json(srv.url + "/v1/completions", {"prompt": "x"})
        assert status == 503 and json.dumps(err)
