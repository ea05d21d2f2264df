"""The emulator's generated text for a tokenizer file (``sim/vocab.py``): the text each corpus
token adds to a stream, worked out once, must be what decoding the tokens gives, for a
byte-level BPE (GPT-2 style: spaces inside tokens) and a Metaspace BPE (SentencePiece style:
decode drops a leading space, which a stream inside a sequence must keep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenload.sim import tokenizer as byte_tokenizer
from tokenload.sim.vocab import FileVocabulary, load_tokenizer_file

pytestmark = pytest.mark.simulated_time

tokenizers = pytest.importorskip("tokenizers")


def _metaspace(tmp: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "</s>"], show_progress=False)
    text = byte_tokenizer.corpus_text(7)
    tok.train_from_iterator([text[i : i + 300] for i in range(0, 30000, 300)], trainer=trainer)
    tok.save(str(tmp / "tokenizer.json"))
    return tmp / "tokenizer.json"


def _byte_level(tmp: Path) -> Path:
    from tests.real_vllm.model import build_tokenizer

    build_tokenizer(tmp)
    return tmp / "tokenizer.json"


@pytest.mark.parametrize("make", [_byte_level, _metaspace], ids=["byte-level", "metaspace"])
def test_stream_pieces_are_the_decoded_text(make, tmp_path: Path) -> None:
    vocab = load_tokenizer_file(make(tmp_path))
    assert isinstance(vocab, FileVocabulary)
    corpus = vocab.output_corpus(0)
    tok = tokenizers.Tokenizer.from_file(str(vocab.path))
    whole = tok.decode(list(corpus.token_ids))
    assert "".join(corpus.pieces) == whole
    assert "\ufffd" not in whole
    n = len(corpus.token_ids)
    assert len(corpus.starts) > n // 20, (len(corpus.starts), n)
    for s in corpus.starts[1:200]:
        # A start is a word start where nothing is held back: its piece opens the word, with the
        # space before it (Metaspace's decode would drop it at a sequence's start).
        before = "".join(corpus.pieces[max(0, s - 8) : s])
        assert corpus.pieces[s] and (corpus.pieces[s][0] == " " or before.endswith(" ")), (s, before)
    # From a start, the stream re-encodes to the same tokens (but at its cut end).
    s = corpus.starts[len(corpus.starts) // 2]
    text = "".join(corpus.pieces[s : s + 200])
    again = vocab.encode(text, False)
    assert abs(len(again) - 200) <= 2, len(again)
