"""A deterministic byte-level tokenizer for the emulator, its streaming detokenizer, a chat
template, and the seeded text generated outputs read from (``vocab`` turns it into tokens).

Token ids 0..255 are the UTF-8 bytes themselves, so one character can span several tokens:
exactly the case where a real server's stream carries chunks with empty text.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

__all__ = [
    "ASCII_TEXT",
    "BOS_TOKEN_ID",
    "EOS_TOKEN_ID",
    "PAD_TOKEN_ID",
    "VOCAB_SIZE",
    "IncrementalDetokenizer",
    "apply_chat_template",
    "corpus_text",
    "decode",
    "encode",
]

BOS_TOKEN_ID = 256
EOS_TOKEN_ID = 257
PAD_TOKEN_ID = 258
VOCAB_SIZE = 259

_SPECIAL_TEXT = {BOS_TOKEN_ID: "<|bos|>", EOS_TOKEN_ID: "<|eos|>", PAD_TOKEN_ID: "<|pad|>"}
# A table lookup is the cheapest way to turn an ASCII token into text on the hot path.
ASCII_TEXT = tuple(chr(i) for i in range(128))


def encode(text: str, add_bos: bool = False) -> list[int]:
    """Token ids of ``text``: its UTF-8 bytes (plus a BOS id first when ``add_bos``)."""
    ids = list(text.encode("utf-8"))
    return [BOS_TOKEN_ID, *ids] if add_bos else ids


def decode(ids: Iterable[int], skip_special_tokens: bool = True, vocab_size: int = VOCAB_SIZE) -> str:
    """Text of ``ids``; bytes that form no valid UTF-8 become U+FFFD, as a real tokenizer's decode.
    Ids past the byte tokenizer's, up to ``vocab_size`` (a token-id prompt in the emulated
    model's vocabulary), have no text of their own: each reads ``<|id|>``."""
    out: list[str] = []
    buf = bytearray()
    for i in ids:
        if 0 <= i < 256:
            buf.append(i)
            continue
        if VOCAB_SIZE <= i < vocab_size:
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
            out.append(f"<|{i}|>")
            continue
        if i not in _SPECIAL_TEXT:
            raise ValueError(f"token id {i} is outside the vocabulary (0..{vocab_size - 1})")
        if not skip_special_tokens:
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
            out.append(_SPECIAL_TEXT[i])
    out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)


def _utf8_sequence_len(lead: int) -> int:
    """Bytes in the UTF-8 sequence that starts with ``lead``; 0 for a byte that cannot start one."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


class IncrementalDetokenizer:
    """Text for one token at a time, as vLLM streams it.

    A token that leaves a multi-byte character incomplete yields "" (vLLM holds text back while
    it would end in U+FFFD); the token that completes it yields the whole character. Special
    tokens yield "" (``skip_special_tokens``).
    """

    __slots__ = ("_need", "pending")

    def __init__(self) -> None:
        self.pending = bytearray()  # bytes of a character not complete yet
        self._need = 0

    def step(self, token_id: int) -> str:
        """The text this token adds to the stream."""
        if 0 <= token_id < 128 and not self.pending:
            return ASCII_TEXT[token_id]
        if token_id >= 256 or token_id < 0:
            return ""
        if not self.pending:
            need = _utf8_sequence_len(token_id)
            if need == 0:
                return "\ufffd"
            self.pending.append(token_id)
            self._need = need
            return ""
        if 0x80 <= token_id <= 0xBF:
            self.pending.append(token_id)
            if len(self.pending) < self._need:
                return ""
            text = self.pending.decode("utf-8", errors="replace")
            self.pending.clear()
            return text
        # A new sequence starts before the previous one completed: the broken bytes become U+FFFD.
        broken = self.pending.decode("utf-8", errors="replace")
        self.pending.clear()
        return broken + self.step(token_id)

    @property
    def has_pending_bytes(self) -> bool:
        """Whether bytes of an incomplete character are held back."""
        return bool(self.pending)


def apply_chat_template(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """A ChatML-style prompt (the Qwen2.5 layout): role markers around each message, then the
    assistant marker so the model answers."""
    parts: list[str] = []
    for i, message in enumerate(messages):
        try:
            role, content = message["role"], message["content"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"messages[{i}]: expected an object with 'role' and 'content'") from exc
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}].content: expected a string")
        parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


# Mostly-ASCII text with a few 2- and 3-byte characters, so generated streams really contain
# tokens that complete no character.
_WORD_LETTERS = "etaoinshrdlucmfwypvbgkjqxz"
_WIDE_CHARS = ("é", "ñ", "ü", "ß", "ø", "€", "→", "中", "✓", "…")


def corpus_text(seed: int = 0, corpus_chars: int = 1 << 16) -> str:
    """The seeded text generated outputs read from (each request from its own word start):
    mostly-ASCII words with a few 2- and 3-byte characters. It ends with a space, so wrapping
    around it never splits a character."""
    rng = random.Random(seed)
    words: list[str] = []
    length = 0
    while length < corpus_chars:
        word_len = rng.randint(1, 9)
        chars = [_WORD_LETTERS[min(int(rng.expovariate(0.18)), 25)] for _ in range(word_len)]
        if rng.random() < 0.04:
            chars[rng.randrange(word_len)] = rng.choice(_WIDE_CHARS)
        word = "".join(chars)
        words.append(word)
        length += len(word) + 1
    return " ".join(words) + " "
