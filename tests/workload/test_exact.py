"""Exact-length prompts: the search against the emulator's tokenizer and unlike toys; bounds, failures."""

from __future__ import annotations

import pytest

from tests.workload.toys import Counting, emulator, even_only, greedy_merge, two_per_word, whitespace
from tokenload.sim.tokenizer import VOCAB_SIZE, apply_chat_template, encode
from tokenload.workload.errors import WorkloadError
from tokenload.workload.exact import (
    DEFAULT_MAX_CALLS,
    check_context,
    estimate_prompt,
    exact_prompt,
    shuffle_words,
    token_id_prompt,
)
from tokenload.workload.frames import Chat, Completion

LENGTHS = (121, 511, 2041, 2, 3, 17, 64, 999, 4097)


@pytest.mark.parametrize("n", LENGTHS)
def test_emulator_completions(n: int) -> None:
    counter = Counting(lambda p: len(encode(p, add_bos=True)))
    got = exact_prompt(n, counter, seed=n)
    assert len(encode(got.render(), add_bos=True)) == n
    assert got.exact and got.method == "tokenize" and got.n_tokens == n
    # Overhead probe, a first guess, then interpolation lands: bytes are linear in characters.
    assert counter.calls == got.calls <= 4


@pytest.mark.parametrize("n", (121, 511, 2041, 157))
def test_emulator_chat(n: int) -> None:
    frame = Chat(system="You are a helpful assistant.")
    got = exact_prompt(n, emulator, seed=1, frame=frame)
    messages = got.render()
    assert messages[0] == {"role": "system", "content": "You are a helpful assistant."}
    assert messages[-1]["role"] == "user"
    assert len(encode(apply_chat_template(messages), add_bos=True)) == n
    assert got.calls <= 4


@pytest.mark.parametrize("counter", [whitespace, greedy_merge, two_per_word], ids=lambda f: f.__name__)
@pytest.mark.parametrize("n", (121, 511, 2041, 5, 33, 1001))
def test_other_tokenizers(counter, n: int) -> None:
    counting = Counting(counter)
    got = exact_prompt(n, counting, seed=7)
    assert counter(got.render()) == n
    assert counting.calls <= 12


def test_a_jump_over_the_target_is_fixed_with_a_short_tail() -> None:
    # Two tokens a word: character prefixes only make even counts; a "." adds one.
    got = exact_prompt(101, two_per_word, seed=3)
    assert two_per_word(got.render()) == 101
    assert got.text is not None and got.text[-1] in ".,;!"


def test_an_impossible_length_fails_clearly_within_the_call_bound() -> None:
    counting = Counting(even_only)
    with pytest.raises(WorkloadError) as e:
        exact_prompt(101, counting, seed=3)
    msg = str(e.value)
    assert msg.startswith("prompt length 101: no text of exactly 101 tokens found")
    assert "closest: 100 and 102" in msg
    assert counting.calls <= DEFAULT_MAX_CALLS


def test_the_call_bound_holds_for_a_counter_that_never_moves() -> None:
    counting = Counting(lambda p: 5)
    with pytest.raises(WorkloadError, match="after 9 token-count calls"):
        exact_prompt(100, counting, max_calls=9)
    assert counting.calls == 9


def test_length_below_the_fixed_overhead_is_refused() -> None:
    overhead = emulator(Chat(system="sys").render(""))
    with pytest.raises(WorkloadError) as e:
        exact_prompt(overhead - 1, emulator, frame=Chat(system="sys"))
    assert str(e.value) == (
        f"prompt length {overhead - 1}: expected at least {overhead} tokens, the request's fixed part "
        "(BOS, chat template, prefix) alone"
    )


def test_length_equal_to_the_overhead_is_an_empty_text() -> None:
    got = exact_prompt(1, emulator)
    assert got.text == "" and emulator(got.render()) == 1


def test_prefix_frames_count_the_whole_request() -> None:
    frame = Completion(prefix="Answer briefly.\n")
    got = exact_prompt(300, emulator, seed=2, frame=frame)
    assert got.render().startswith("Answer briefly.\n")
    assert emulator(got.render()) == 300


def test_deterministic_in_the_seed() -> None:
    a, b, c = (exact_prompt(200, greedy_merge, seed=s) for s in (1, 1, 2))
    assert a.text == b.text
    assert a.text != c.text


@pytest.mark.parametrize("exc", [ConnectionRefusedError("refused"), TimeoutError("timed out"), OSError()])
def test_an_unreachable_counter_is_one_line(exc: OSError) -> None:
    def down(prompt):
        raise exc

    with pytest.raises(WorkloadError, match=r"^prompt length 50: token counter unreachable \(.+\)$"):
        exact_prompt(50, down)


def test_a_counter_answering_garbage_is_refused() -> None:
    with pytest.raises(WorkloadError, match="expected an integer >= 0, got 'many'"):
        exact_prompt(50, lambda p: "many")


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_lengths(bad) -> None:
    with pytest.raises(WorkloadError, match="prompt length: expected an integer >= 1"):
        exact_prompt(bad, emulator)


def test_estimate_is_flagged_inexact() -> None:
    got = estimate_prompt(128, seed=4)
    assert got.exact is False and got.method == "estimate" and got.n_tokens == 128
    assert len(got.text.split()) == 128


def test_token_id_prompts() -> None:
    got = token_id_prompt(500, seed=9, vocab_size=VOCAB_SIZE, reserved_ids={256, 257, 258})
    ids = got.render()
    assert len(ids) == 500 and got.n_tokens == 500 and got.exact and got.method == "token_ids"
    assert all(0 <= i < 256 for i in ids)
    assert ids == token_id_prompt(500, seed=9, vocab_size=VOCAB_SIZE, reserved_ids={256, 257, 258}).render()
    assert ids != token_id_prompt(500, seed=10, vocab_size=VOCAB_SIZE).render()
    with pytest.raises(WorkloadError, match="vocab_size"):
        token_id_prompt(5, vocab_size=3, reserved_ids={0, 1, 2})


@pytest.mark.parametrize("counter", [emulator, whitespace, greedy_merge], ids=lambda f: f.__name__)
def test_shuffled_words_keep_the_count_for_word_splitting_tokenizers(counter) -> None:
    base = exact_prompt(700, counter, seed=1)
    variants = {shuffle_words(base.text, s) for s in range(20)}
    assert len(variants) == 20
    assert {counter(v) for v in variants} == {700}


def test_check_context() -> None:
    check_context(4000, 96, 4096)
    check_context(10**6, 10**6, None)
    with pytest.raises(
        WorkloadError, match="input: 4000 input \\+ 97 output tokens exceed the model's max_model_len of 4096"
    ):
        check_context(4000, 97, 4096)
