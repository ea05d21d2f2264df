"""Byte-level tokenizer, streaming detokenizer, chat template and generated text."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from tokenload.sim.tokenizer import (
    BOS_TOKEN_ID,
    EOS_TOKEN_ID,
    VOCAB_SIZE,
    IncrementalDetokenizer,
    apply_chat_template,
    decode,
    encode,
)
from tokenload.sim.vocab import ByteVocabulary


@given(st.text())
def test_round_trip(text: str) -> None:
    ids = encode(text)
    assert all(0 <= i < 256 for i in ids)
    assert decode(ids) == text


@given(st.text())
def test_streaming_text_concatenates_to_the_decoded_text(text: str) -> None:
    detok = IncrementalDetokenizer()
    assert "".join(detok.step(i) for i in encode(text)) == text
    assert not detok.has_pending_bytes


def test_incomplete_utf8_yields_empty_text_until_the_character_completes() -> None:
    detok = IncrementalDetokenizer()
    ids = encode("a€b")  # € is 3 bytes
    assert len(ids) == 5
    assert [detok.step(i) for i in ids] == ["a", "", "", "€", "b"]


def test_broken_sequence_becomes_replacement_character() -> None:
    detok = IncrementalDetokenizer()
    first_byte_of_euro = encode("€")[0]
    assert detok.step(first_byte_of_euro) == ""
    assert detok.step(ord("x")) == "\ufffd" + "x"
    assert detok.step(0x80) == "\ufffd"  # a continuation byte with nothing to continue


def test_special_tokens() -> None:
    assert encode("hi", add_bos=True) == [BOS_TOKEN_ID, ord("h"), ord("i")]
    assert decode([BOS_TOKEN_ID, ord("h"), EOS_TOKEN_ID]) == "h"
    assert decode([ord("h"), EOS_TOKEN_ID], skip_special_tokens=False) == "h<|eos|>"
    assert IncrementalDetokenizer().step(EOS_TOKEN_ID) == ""
    assert VOCAB_SIZE > EOS_TOKEN_ID


def test_chat_template_ends_with_the_assistant_marker() -> None:
    prompt = apply_chat_template(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    )
    assert (
        prompt
        == "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_generated_text_is_deterministic_mostly_ascii_with_multibyte_characters() -> None:
    vocab = ByteVocabulary()
    a, b = vocab.output_corpus(3), ByteVocabulary().output_corpus(3)
    assert a.token_ids == b.token_ids
    assert vocab.output_corpus(4).token_ids != a.token_ids
    text = decode(a.token_ids)
    assert "\ufffd" not in text
    letters_and_spaces = sum(c == " " or "a" <= c <= "z" for c in text)
    assert letters_and_spaces / len(text) > 0.98
    assert any(len(c.encode()) == 2 for c in text)
    assert any(len(c.encode()) == 3 for c in text)
    # A stream of generated tokens contains "" chunks, from any starting offset, and its pieces
    # are what a fresh incremental detokenizer makes of its tokens.
    offset = a.start_offset(random.Random(1))
    detok = IncrementalDetokenizer()
    n = len(a.token_ids)
    chunks = [a.pieces[(offset + k) % n] for k in range(5000)]
    assert chunks == [detok.step(a.token_at(offset, k)) for k in range(5000)]
    assert "" in chunks
    assert "\ufffd" not in "".join(chunks)
