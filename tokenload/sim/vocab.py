"""The emulator's vocabulary: how it counts a prompt, what its token ids mean, what it streams.

Two kinds. The built-in byte tokenizer (the default, no dependency: one token per UTF-8 byte,
about 4x a real tokenizer's count on English). Or a Hugging Face ``tokenizer.json``
(``tokenload sim --tokenizer FILE``, the optional ``tokenizers`` package): text prompts are
counted as that tokenizer counts them, token-id prompts are checked against its vocabulary, and
the generated text is a stream of its tokens. Either way ``/v1/models`` says which is in use.

Generated text comes from one seeded corpus per vocabulary (``OutputCorpus``): its token ids,
the text each token adds to a stream (worked out once, as vLLM's incremental detokenizer would,
so a token that completes no character adds ""), and the positions a request may start at
(word starts). Producing a token then costs two index operations.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tokenload.sim import tokenizer as byte_tokenizer

__all__ = [
    "ByteVocabulary",
    "FileVocabulary",
    "OutputCorpus",
    "Vocabulary",
    "VocabularyError",
    "load_tokenizer_file",
]


class VocabularyError(ValueError):
    """A tokenizer file that cannot be used; the message is one line naming it."""


@dataclass(frozen=True, slots=True)
class OutputCorpus:
    """The generated text of one vocabulary and seed."""

    token_ids: tuple[int, ...]
    #: The text token ``i`` adds to a stream that started at one of ``starts``.
    pieces: tuple[str, ...]
    #: Positions a request's output may start at: word starts, where no character is split.
    starts: tuple[int, ...]

    def start_offset(self, rng: random.Random) -> int:
        """A random word start."""
        return self.starts[rng.randrange(len(self.starts))]

    def token_at(self, offset: int, index: int) -> int:
        """The ``index``-th generated token of a request that starts at ``offset``."""
        return self.token_ids[(offset + index) % len(self.token_ids)]


class Vocabulary(Protocol):
    #: "bytes" or "tokenizer.json"
    kind: str
    #: Token ids are 0 .. vocab_size - 1.
    vocab_size: int
    eos_id: int

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def chat_ids(self, messages: Sequence[dict[str, str]]) -> list[int]: ...

    def output_corpus(self, seed: int) -> OutputCorpus: ...

    def card(self) -> dict[str, Any]:
        """What ``/v1/models`` says of it."""
        ...


class ByteVocabulary:
    """The built-in byte tokenizer; token-id prompts may use ids up to ``vocab_size`` (the
    emulated model's), which have no text of their own."""

    kind = "bytes"

    def __init__(self, vocab_size: int = byte_tokenizer.VOCAB_SIZE) -> None:
        self.vocab_size = max(byte_tokenizer.VOCAB_SIZE, vocab_size)
        self.eos_id = byte_tokenizer.EOS_TOKEN_ID

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return byte_tokenizer.encode(text, add_bos=add_special_tokens)

    def decode(self, ids: Sequence[int]) -> str:
        return byte_tokenizer.decode(ids, vocab_size=self.vocab_size)

    def chat_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return byte_tokenizer.encode(byte_tokenizer.apply_chat_template(messages), add_bos=True)

    def output_corpus(self, seed: int) -> OutputCorpus:
        return _byte_corpus(seed)

    def card(self) -> dict[str, Any]:
        # One token per UTF-8 byte (about 4x a real tokenizer on English).
        return {"text": "bytes", "vocab_size": self.vocab_size}


@functools.lru_cache(maxsize=8)
def _byte_corpus(seed: int) -> OutputCorpus:
    """Built once per process and seed (it is only read): an engine is cheap to make, which
    fitting a profile does hundreds of times."""
    text = byte_tokenizer.corpus_text(seed)
    ids = tuple(text.encode("utf-8"))
    detok = byte_tokenizer.IncrementalDetokenizer()
    pieces = tuple(detok.step(t) for t in ids)
    starts = (0, *(i + 1 for i, t in enumerate(ids[:-1]) if t == 0x20))
    return OutputCorpus(ids, pieces, starts)


#: End-of-sequence names of common tokenizers, tried when no tokenizer_config.json names one.
_EOS_NAMES = ("</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<eos>", "<|end_of_text|>")
#: How many already-streamed tokens are decoded with each new one at most (vLLM's incremental
#: detokenizer keeps a prefix window of this kind): a tokenizer whose decode drops a leading
#: space (Metaspace, WordPiece) then still streams it inside a word sequence.
_CONTEXT_TOKENS = 5


class FileVocabulary:
    """A Hugging Face ``tokenizer.json``, through the ``tokenizers`` package."""

    kind = "tokenizer.json"

    def __init__(self, path: Path, tok: Any, eos_id: int) -> None:
        self.path = path
        self._tok = tok
        self.vocab_size = int(tok.get_vocab_size(with_added_tokens=True))
        self.eos_id = eos_id

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int]) -> str:
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{self.vocab_size - 1})")
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def chat_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        # The emulator's ChatML layout, counted by this tokenizer (a tokenizer.json holds no
        # chat template of its own).
        return self.encode(byte_tokenizer.apply_chat_template(messages), add_special_tokens=True)

    def output_corpus(self, seed: int) -> OutputCorpus:
        return _file_corpus(self, seed)

    def card(self) -> dict[str, Any]:
        return {"text": "tokenizer.json", "file": self.path.name, "vocab_size": self.vocab_size}


@functools.lru_cache(maxsize=8)
def _file_corpus(vocab: FileVocabulary, seed: int) -> OutputCorpus:
    text = byte_tokenizer.corpus_text(seed)
    ids = tuple(vocab.encode(text, add_special_tokens=False))
    decode = vocab._tok.decode
    pieces: list[str] = []
    starts: list[int] = []
    prefix_offset = read_offset = 0
    emitted_ends_with_space = True
    for i in range(len(ids)):
        clean = read_offset == i  # everything before token i has been streamed
        prefix_text = decode(list(ids[prefix_offset:read_offset]), skip_special_tokens=True)
        new_text = decode(list(ids[prefix_offset : i + 1]), skip_special_tokens=True)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            piece = new_text[len(prefix_text) :]
            prefix_offset = max(read_offset, i + 1 - _CONTEXT_TOKENS)
            read_offset = i + 1
        else:
            piece = ""
        if clean and piece and (emitted_ends_with_space or piece[0] == " "):
            starts.append(i)
        if piece:
            emitted_ends_with_space = piece[-1] == " "
        pieces.append(piece)
    if not starts:
        raise VocabularyError(f"--tokenizer {vocab.path}: its tokens of plain text never start a word")
    return OutputCorpus(ids, tuple(pieces), tuple(starts))


def _eos_id(path: Path, tok: Any) -> int:
    config = path.parent / "tokenizer_config.json"
    name: Any = None
    if config.is_file():
        try:
            name = json.loads(config.read_text()).get("eos_token")
        except (OSError, ValueError, AttributeError):
            name = None
        if isinstance(name, dict):
            name = name.get("content")
    for candidate in ([name] if isinstance(name, str) else []) + list(_EOS_NAMES):
        token_id = tok.token_to_id(candidate)
        if token_id is not None:
            return int(token_id)
    raise VocabularyError(
        f"--tokenizer {path}: no end-of-sequence token found (name it as eos_token in a "
        "tokenizer_config.json next to it)"
    )


def load_tokenizer_file(path: str | Path) -> FileVocabulary:
    """The vocabulary of a ``tokenizer.json`` (or a folder holding one); VocabularyError with
    one line when it cannot be used."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    from tokenload.tokenizer_file import read_tokenizer_json

    try:
        tok = read_tokenizer_json(p)
    except ValueError as exc:
        raise VocabularyError(f"--tokenizer {p}: {exc}") from None
    return FileVocabulary(p, tok, _eos_id(p, tok))
