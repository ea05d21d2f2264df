"""A tiny word-level tokenizer built on this machine (no model hub is reachable).

Each word the mock streams ("alpha ", "beta ", ...) is one token, so the peers' own token counts
match the server's chunk count. The files are laid out twice: as a plain folder (a path the tools
can load) and as a Hugging Face cache entry ``tokenload/bench-tok`` (``HF_HUB_CACHE``), for tools
whose offline mode only looks a name up in the cache.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

__all__ = ["CACHE_NAME", "build"]

CACHE_NAME = "tokenload/bench-tok"
_REVISION = "0" * 39 + "1"
_SPECIAL = ["[UNK]", "<s>", "</s>"]
_MOCK_WORDS = ["alpha", "beta", "gamma", "delta", "é", "omega"]
_COMMON = (
    "the of and to a in is it you that he was for on are with as I his they be at one have this from or "
    "had by word but what some we can out other were all there when up use your how said an each she "
    "which do their time if will way about many then them write would like so these her long make thing "
    "see him two has look more day could go come did number sound no most people my over know water "
    "than call first who may down side been now find"
).split()

_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "[UNK]",
    "pad_token": "</s>",
    "model_max_length": 8192,
    "clean_up_tokenization_spaces": False,
}


def _write(folder: Path) -> None:
    vocab: dict[str, int] = {}
    for t in [*_SPECIAL, *_MOCK_WORDS, *_COMMON, *(chr(c) for c in range(33, 127))]:
        vocab.setdefault(t, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(_SPECIAL)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(_CONFIG, indent=1))
    special = {k: _CONFIG[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=1))


def build(root: Path) -> tuple[Path, Path]:
    """Write the tokenizer under ``root``; returns (plain folder, HF hub cache folder)."""
    plain = root / "tokenizer"
    _write(plain)
    cache = root / "hf-hub"
    entry = cache / ("models--" + CACHE_NAME.replace("/", "--"))
    _write(entry / "snapshots" / _REVISION)
    (entry / "refs").mkdir(parents=True, exist_ok=True)
    (entry / "refs" / "main").write_text(_REVISION)
    return plain, cache
