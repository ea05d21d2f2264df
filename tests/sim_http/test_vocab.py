"""``tokenload sim --tokenizer FILE``: text counted and streamed as a real tokenizer does.

The tokenizer is the real-vLLM tier's (a byte-level BPE of 1,024 tokens trained on this machine
from a seeded word salad, with a tokenizer_config.json naming its end-of-sequence token), so
nothing is downloaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.real_vllm.model import EOS, build_tokenizer
from tests.sim_http.conftest import http_json
from tokenload.sim.vocab import load_tokenizer_file

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bpe")
    build_tokenizer(out)
    return out


def _stream(url: str, body: dict) -> tuple[list[str], dict]:
    """The text of each streamed chunk, and the usage of the last."""
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    texts: list[str] = []
    usage: dict = {}
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"]
            texts += [c["text"] for c in event.get("choices", [])]
    return texts, usage


def test_text_is_counted_and_streamed_by_the_tokenizer_file(start_sim, tok_dir: Path) -> None:
    tok = tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    sim = start_sim("--tokenizer", str(tok_dir / "tokenizer.json"), "--max-num-seqs", "8")
    status, models = http_json(sim.url + "/v1/models")
    assert status == 200
    card = models["data"][0]["tokenizer"]
    assert card == {"text": "tokenizer.json", "file": "tokenizer.json", "vocab_size": 1024}, card

    prompt = "The latency of the server was 1234 ms; the queue was long. Über straße."
    status, counted = http_json(sim.url + "/tokenize", {"prompt": prompt})
    assert status == 200
    # The tokenizer's own count (its post-processor adds BOS), not the prompt's 72 UTF-8 bytes.
    assert counted["tokens"] == tok.encode(prompt).ids
    assert counted["count"] < len(prompt.encode()) / 2, counted["count"]
    status, plain = http_json(sim.url + "/tokenize", {"prompt": prompt, "add_special_tokens": False})
    assert plain["tokens"] == tok.encode(prompt, add_special_tokens=False).ids
    status, text = http_json(sim.url + "/detokenize", {"tokens": plain["tokens"]})
    assert status == 200 and text["prompt"] == prompt

    # Token ids of the whole vocabulary are one token each; past it, 400 (as vLLM's).
    status, _ = http_json(sim.url + "/tokenize", {"prompt": [5, 900, 1023]})
    assert status == 200
    status, err = http_json(
        sim.url + "/v1/completions", {"prompt": [5, 1024], "max_tokens": 2, "ignore_eos": True}
    )
    assert status == 400 and "token ids" in err["error"]["message"], err

    # The stream is text of this vocabulary: re-tokenized, it is as many tokens as were generated
    # (a stream cut inside a multi-byte character holds its one or two tokens back, as vLLM
    # does), and no chunk is broken UTF-8.
    for seed_prompt in ("one", "two", "three"):
        chunks, usage = _stream(sim.url, {"prompt": seed_prompt, "max_tokens": 120, "ignore_eos": True})
        assert usage["completion_tokens"] == 120 and usage["prompt_tokens"] == len(
            tok.encode(seed_prompt).ids
        )
        text = "".join(chunks)
        assert "\ufffd" not in text
        again = len(tok.encode(text, add_special_tokens=False).ids)
        assert 118 <= again <= 120, (again, text[:200])
    # The server's prompt-token histogram counts what the tokenizer counts.
    before = sim.get("vllm:request_prompt_tokens_sum")
    status, _ = http_json(sim.url + "/v1/completions", {"prompt": prompt, "max_tokens": 1})
    assert status == 200
    assert sim.get("vllm:request_prompt_tokens_sum") - before == len(tok.encode(prompt).ids)


def test_the_tokenizer_files_end_of_sequence_ends_a_natural_output(start_sim, tok_dir: Path) -> None:
    tok = tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    sim = start_sim("--tokenizer", str(tok_dir), "--output-len", "fixed:5")
    assert load_tokenizer_file(tok_dir).eos_id == tok.token_to_id(EOS)
    status, out = http_json(sim.url + "/v1/completions", {"prompt": "hello", "max_tokens": 50})
    assert status == 200, out
    assert out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 5, out


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: d / "missing.json", "no such file"),
        (lambda d: (d / "bad.json").write_text("{not json") and d / "bad.json", "expected a Hugging Face"),
    ],
)
def test_a_bad_tokenizer_file_is_one_line_and_exit_2(make, needle: str, tmp_path: Path) -> None:
    path = make(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "tokenload.sim", "--port", "0", "--tokenizer", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tokenload sim: --tokenizer") and needle in lines[0], lines
