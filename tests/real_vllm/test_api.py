"""Real vLLM, measured end to end by tokenload: streamed completions and chat, token counts equal
to the server's ``usage`` and its own counters, and prompts of exact length via ``/tokenize``."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from tests.conftest import locust_request_count, read_records, run_locust
from tests.real_vllm.server import MODEL_NAME, VllmServer, post_json
from tokenload.servermetrics.parse import parse_page

pytestmark = pytest.mark.slow

OUTPUT_TOKENS = 24
PROMPT_TOKENS = 100


def _counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return parse_page(r.read().decode()).scalars


@pytest.mark.parametrize("locustfile", ["locustfiles/completions.py", "locustfiles/chat.py"])
def test_streams_measured_with_the_servers_token_counts(
    roomy: VllmServer, tmp_path: Path, locustfile: str
) -> None:
    before = _counters(roomy.url)
    run = run_locust(
        locustfile, roomy.url, tmp_path / "run", "-u", "4", "-r", "4", "-t", "5s",
        "--prompt-tokens", str(PROMPT_TOKENS), "--output-tokens", str(OUTPUT_TOKENS),
        "--length-method", "tokenize",
    )  # fmt: skip
    after = _counters(roomy.url)
    assert run.returncode == 0, run.output[-3000:]
    records = read_records(run.run_dir)
    assert len(records) >= 8, run.output[-3000:]
    assert [r for r in records if r["status"] != "ok"] == []
    assert len(records) == locust_request_count(run.output)
    for r in records:
        # Output: exactly max_tokens (ignore_eos), counted by the server's usage, the stream agreeing.
        assert (r["output_tokens"], r["output_tokens_source"], r["token_count_diff"]) == (
            OUTPUT_TOKENS,
            "usage",
            0,
        ), r
        assert r["finish_reason"] == "length", r
        # Input: the prompt made exact through /tokenize, as the server counted it.
        assert r["input_tokens"] == r["requested_input_tokens"] == PROMPT_TOKENS, r
    # The server's own counters moved by exactly what the records say (no other traffic here;
    # /tokenize probes generate nothing).
    moved = {k: after[k] - before[k] for k in ("request_success", "generation_tokens", "prompt_tokens")}
    assert moved == {
        "request_success": len(records),
        "generation_tokens": sum(r["output_tokens"] for r in records),
        "prompt_tokens": sum(r["input_tokens"] for r in records),
    }


def test_exact_lengths_follow_a_distribution(roomy: VllmServer, tmp_path: Path) -> None:
    run = run_locust(
        "locustfiles/completions.py", roomy.url, tmp_path / "run", "-u", "2", "-r", "2", "-t", "4s",
        "--prompt-tokens", "uniform:20-400", "--output-tokens", "4", "--length-method", "tokenize",
    )  # fmt: skip
    assert run.returncode == 0, run.output[-3000:]
    records = read_records(run.run_dir)
    assert len(records) >= 8 and all(r["status"] == "ok" for r in records)
    assert all(r["input_tokens"] == r["requested_input_tokens"] for r in records), records
    assert len({r["input_tokens"] for r in records}) > 3
    assert all(20 <= r["input_tokens"] <= 400 for r in records)


def test_the_tokenizer_and_chat_template_are_the_tiny_models(roomy: VllmServer) -> None:
    """The locally built tokenizer is what the server uses: BOS first, the template's role tokens."""
    plain = post_json(roomy.url, "/tokenize", {"model": MODEL_NAME, "prompt": "the school"})
    chat = post_json(
        roomy.url,
        "/tokenize",
        {"model": MODEL_NAME, "messages": [{"role": "user", "content": "the school"}]},
    )
    assert plain["tokens"][0] == 0  # <s>
    # <s> <|user|> text </s> <|assistant|>: the template adds the role and end tokens around it.
    assert chat["tokens"][:2] == [0, 3] and chat["tokens"][-2:] == [1, 4]
    assert chat["tokens"][2:-2] == plain["tokens"][1:]
