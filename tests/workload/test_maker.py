"""The prompt maker: method choice, the cache, distinct per-request variants, message contents."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from tests.workload.toys import Counting, emulator, greedy_merge
from tokenload.sim.tokenizer import apply_chat_template
from tokenload.workload.errors import WorkloadError
from tokenload.workload.frames import Chat, Completion
from tokenload.workload.maker import PromptMaker


def test_auto_prefers_a_tokenizer_file_then_the_server_then_an_estimate(monkeypatch, tmp_path: Path) -> None:
    assert PromptMaker().method == "estimate"
    assert PromptMaker(count_tokens=emulator).method == "tokenize"
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if the package were not installed
    with pytest.raises(WorkloadError, match="needs the optional 'tokenizers' package"):
        PromptMaker(count_tokens=emulator, tokenizer_file=tmp_path / "tokenizer.json")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"method": "tokenize"}, "length_method: 'tokenize' needs a token counter"),
        ({"method": "tokenizer_file"}, "length_method: 'tokenizer_file' needs tokenizer_file"),
        ({"method": "token_ids"}, "length_method: 'token_ids' needs vocab_size"),
        ({"method": "exact"}, "length_method: expected one of auto, tokenize"),
    ],
)
def test_method_needs(kwargs: dict, needle: str) -> None:
    with pytest.raises(WorkloadError, match=needle):
        PromptMaker(**kwargs)


def test_missing_tokenizers_library_is_one_line(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(WorkloadError) as e:
        PromptMaker(method="tokenizer_file", tokenizer_file=tmp_path / "tok.json")
    assert str(e.value) == (
        f"tokenizer_file {tmp_path / 'tok.json'}: reading it needs the optional 'tokenizers' package "
        "(pip install tokenizers)"
    )


def test_cache_serves_a_length_once_per_model_seed_and_frame() -> None:
    counter = Counting(emulator)
    maker = PromptMaker(model="m", count_tokens=counter)
    a = maker.make(300, seed=1)
    calls = counter.calls
    assert maker.make(300, seed=1) is a
    assert counter.calls == calls and maker.cache.hits == 1
    maker.make(300, seed=2)
    maker.make(300, seed=1, frame=Chat())
    maker.make(301, seed=1)
    assert maker.cache.misses == 4 and len(maker.cache) == 4
    assert maker.calls == counter.calls


def test_cache_is_bounded() -> None:
    maker = PromptMaker(count_tokens=emulator, cache_size=3)
    for n in range(10, 20):
        maker.make(n)
    assert len(maker.cache) == 3


def test_a_failed_search_is_not_cached() -> None:
    maker = PromptMaker(count_tokens=emulator)
    frame = Chat(system="x" * 50)
    for _ in range(2):
        with pytest.raises(WorkloadError, match="expected at least"):
            maker.make(5, frame=frame)
    assert maker.cache.misses == 2


@pytest.mark.parametrize("counter", [emulator, greedy_merge], ids=lambda f: f.__name__)
def test_variants_are_distinct_exact_and_cost_one_call(counter) -> None:
    counting = Counting(counter)
    maker = PromptMaker(count_tokens=counting)
    maker.make(512)
    before = counting.calls
    texts = set()
    for seed in range(30):
        v = maker.variant(512, seed)
        assert counter(v.render()) == 512 and v.exact
        texts.add(v.text)
    assert len(texts) == 30
    assert counting.calls - before == 30


def test_a_variant_that_misses_falls_back_to_a_search() -> None:
    # Order matters to this tokenizer (a repeated word costs one more), so a reshuffle usually
    # changes the count: the check catches it and a fresh search takes over.
    def order_dependent(prompt: str) -> int:
        words = prompt.split()
        return len(words) + sum(a == b for a, b in itertools.pairwise(words))

    counting = Counting(order_dependent)
    maker = PromptMaker(count_tokens=counting)
    maker.make(400)
    searched = 0
    for seed in range(10):
        before = counting.calls
        v = maker.variant(400, seed)
        assert order_dependent(v.render()) == 400
        searched += counting.calls - before > 1
    assert searched >= 1


def test_content_counts_the_text_alone() -> None:
    maker = PromptMaker(count_tokens=emulator)
    got = maker.content(40, seed=3)
    assert got.n_tokens == 40
    assert emulator(got.text) - emulator("") == 40
    assert maker.content_text(40, seed=3) == got.text


def test_estimate_and_token_id_methods() -> None:
    est = PromptMaker()
    assert not est.exact
    assert est.make(50).exact is False and est.variant(50, 1).text != est.variant(50, 2).text
    assert est.content(20).exact is False
    ids = PromptMaker(method="token_ids", vocab_size=1000)
    p = ids.variant(64, 3)
    assert len(p.render()) == 64 and p.method == "token_ids"
    with pytest.raises(WorkloadError, match="token_ids: chat message contents need text"):
        ids.content(10)


def test_an_unreachable_server_is_one_line() -> None:
    def down(prompt):
        raise ConnectionResetError("connection reset by peer")

    maker = PromptMaker(count_tokens=down)
    with pytest.raises(WorkloadError, match=r"^token counter unreachable \(connection reset by peer\)$"):
        maker.make(10)


def test_tokenizer_file_counts_with_the_tokenizers_library(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    vocab = {"[UNK]": 0, "[BOS]": 1, "the": 2, "of": 3, "and": 4}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    maker = PromptMaker(tokenizer_file=path, render_chat=apply_chat_template)
    assert maker.method == "tokenizer_file"
    got = maker.make(333, seed=1)
    assert len(tok.encode(got.render()).ids) == 333 and got.method == "tokenizer_file"
    chat = maker.make(100, frame=Chat())
    assert len(tok.encode(apply_chat_template(chat.render())).ids) == 100
    plain = PromptMaker(tokenizer_file=path)
    with pytest.raises(WorkloadError, match="holds no chat template"):
        plain.make(100, frame=Chat())
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(WorkloadError, match=r"expected a Hugging Face tokenizer\.json"):
        PromptMaker(tokenizer_file=bad)
    with pytest.raises(WorkloadError, match="no such file"):
        PromptMaker(tokenizer_file=tmp_path / "none.json")


def test_frames_render_fresh_lists() -> None:
    maker = PromptMaker(count_tokens=emulator)
    p = maker.make(200, frame=Chat(system="s"))
    first = p.render()
    first.append({"role": "user", "content": "mutated"})
    assert len(p.render()) == 2
    assert Completion(prefix="a", suffix="b").render("x") == "axb"
