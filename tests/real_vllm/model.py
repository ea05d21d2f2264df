"""A tiny random-weight Llama model and its byte-level BPE tokenizer, built locally for vLLM.

No model hub is reachable, so the real-vLLM tier makes its own model: a Llama-architecture
checkpoint with seeded random weights (``transformers``) and a byte-level BPE tokenizer trained
on a seeded word salad (``tokenizers``), with a chat template. Same arguments, same bytes: the
weights come from one seeded generator and the training corpus is fixed.

It runs in ``.venv-vllm`` (torch, transformers and tokenizers live there, not in tokenload's
venv): ``.venv-vllm/bin/python tests/real_vllm/model.py OUT_DIR``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

#: Shapes: head_dim 32 is the smallest vLLM's CPU attention takes. Weights are bf16, as vLLM's CPU
#: build runs them, so one token's KV cache is 2 layers x 2 KV heads x 32 x (K, V) x 2 bytes.
CONFIG = {
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
KV_BYTES_PER_TOKEN = 2 * 2 * 32 * 2 * 2  # 512
SEED = 0
BOS, EOS = "<s>", "</s>"
ROLES = ("system", "user", "assistant")
SPECIAL = [BOS, EOS, *(f"<|{r}|>" for r in ROLES)]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_WORDS = (
    "the of and to in is was for on that with as by at from his it an were are which this be or has had"
    " not first one their its new after who they have her she two been other when there all during into"
    " school time may years more most only over city some world would where later up such used many can"
    " state about national out known university united then made model token server request cache load"
    " latency stream prompt engine batch queue memory"
).split()


def corpus(n_lines: int = 4000) -> list[str]:
    """Seeded English-like lines with digits and punctuation: what the tokenizer learns merges from."""
    rng = random.Random(SEED)
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))
        lines.append(" ".join(words).capitalize() + rng.choice(".,;!?"))
    return lines


def build_tokenizer(out: Path) -> None:
    """A byte-level BPE ``tokenizer.json`` (any text encodes; no unknown token) and its config."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=CONFIG["vocab_size"],
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    # Completions prompts start with BOS, as Llama's do; chat templates write it themselves.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "model_max_length": CONFIG["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "pad_token": EOS}, indent=1) + "\n"
    )


def build_model(out: Path, max_model_len: int) -> None:
    """A ``LlamaForCausalLM`` checkpoint with seeded N(0, 0.02) weights (norms at 1), bf16."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    ids = json.loads((out / "tokenizer.json").read_text())["added_tokens"]
    special = {t["content"]: t["id"] for t in ids}
    config = LlamaConfig(
        **{**CONFIG, "max_position_embeddings": max_model_len},
        bos_token_id=special[BOS],
        eos_token_id=special[EOS],
        pad_token_id=special[EOS],
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)


def build(out: Path, max_model_len: int = 4096) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    build_model(out, max_model_len)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="directory to write the model and tokenizer into")
    p.add_argument("--max-model-len", type=int, default=CONFIG["max_position_embeddings"])
    args = p.parse_args(argv)
    build(args.out, args.max_model_len)
    print(f"tiny model written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
