"""Multi-turn conversations: history grows turn by turn, replies are kept, turns are numbered."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.workload.toys import emulator
from tokenload.workload.conversation import Conversation
from tokenload.workload.datasets import iter_dataset
from tokenload.workload.errors import WorkloadError
from tokenload.workload.lengths import parse_length_spec, parse_seconds_spec
from tokenload.workload.maker import PromptMaker

DATA = Path(__file__).parent / "data"


def test_history_grows_with_each_turn_and_includes_the_replies() -> None:
    conv = Conversation(["q1", "q2", "q3"], system="sys")
    sizes = []
    for k in range(1, 4):
        turn = conv.next_turn()
        assert turn.number == k and turn.user_text == f"q{k}"
        assert turn.messages[0] == {"role": "system", "content": "sys"}
        assert turn.messages[-1] == {"role": "user", "content": f"q{k}"}
        # Every earlier reply is in this turn's request, in order.
        assert [m["content"] for m in turn.messages if m["role"] == "assistant"] == [
            f"a{i}" for i in range(1, k)
        ]
        sizes.append(len(turn.messages))
        assert not conv.done
        conv.record_reply(f"a{k}")
    assert sizes == [2, 4, 6]
    assert conv.done and conv.turns_done == 3
    assert conv.history[-1] == {"role": "assistant", "content": "a3"}


def test_turn_messages_are_copies() -> None:
    conv = Conversation(["q1", "q2"])
    turn = conv.next_turn()
    turn.messages[0]["content"] = "changed"
    turn.messages.append({"role": "user", "content": "extra"})
    conv.record_reply("a1")
    assert conv.next_turn().messages[:2] == [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
    ]


def test_misuse_is_refused() -> None:
    conv = Conversation(["q1"], conversation_id="c9")
    with pytest.raises(WorkloadError, match="conversation c9: no turn awaits a reply"):
        conv.record_reply("x")
    conv.next_turn()
    with pytest.raises(
        WorkloadError, match=r"conversation c9: turn 1 awaits its reply \(record_reply first\)"
    ):
        conv.next_turn()
    conv.record_reply("a")
    with pytest.raises(WorkloadError, match="conversation c9: all 1 turns are done"):
        conv.next_turn()
    with pytest.raises(WorkloadError, match="expected at least one user turn"):
        Conversation([])


def test_ending_early_drops_the_unanswered_turn() -> None:
    conv = Conversation(["q1", "q2"])
    conv.next_turn()
    conv.record_reply("a1")
    conv.next_turn()
    conv.end()
    assert conv.done and conv.history == [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
    ]


def test_from_a_sharegpt_conversation() -> None:
    items = list(iter_dataset(DATA / "sharegpt.json"))
    conv = Conversation.from_item(items[0])
    assert conv.user_turns == ("What is the capital of France?", "And of Italy?")
    assert conv.reference_replies == ("Paris.", "Rome.")
    t1 = conv.next_turn()
    assert t1.reference_reply == "Paris."
    conv.record_reply("It is Paris.")  # the live server's reply, not the dataset's
    t2 = conv.next_turn()
    assert t2.messages[1] == {"role": "assistant", "content": "It is Paris."} and t2.number == 2
    with_system = Conversation.from_item(items[1])
    assert with_system.next_turn().messages[0] == {"role": "system", "content": "You are terse."}
    # An answer before the first question has nothing to answer: it is not a reply.
    opens_with_gpt = Conversation.from_item(items[2])
    assert opens_with_gpt.n_turns == 1 and opens_with_gpt.reference_replies == ("Once upon a time...",)
    assert Conversation.from_item(items[0], max_turns=1).n_turns == 1


def test_from_plain_dataset_items() -> None:
    items = list(iter_dataset(DATA / "prompts.jsonl"))
    assert Conversation.from_item(items[0]).user_turns == ("Write a haiku about the sea.",)
    assert Conversation.from_item(items[2]).next_turn().messages[0]["role"] == "system"


def test_synthetic_turns_of_given_lengths() -> None:
    maker = PromptMaker(count_tokens=emulator)
    conv = Conversation.synthetic(
        5, parse_length_spec("uniform:20-60"), random.Random(4), make_text=maker.content_text
    )
    assert conv.n_turns == 5
    lengths = [emulator(t) - emulator("") for t in conv.user_turns]
    assert all(20 <= n <= 60 for n in lengths) and len(set(lengths)) > 1
    again = Conversation.synthetic(
        5, parse_length_spec("uniform:20-60"), random.Random(4), make_text=maker.content_text
    )
    assert again.user_turns == conv.user_turns
    fixed = Conversation.synthetic(3, 12, random.Random(0))
    assert [len(t.split()) for t in fixed.user_turns] == [12, 12, 12]
    with pytest.raises(WorkloadError, match=r"conversation\.turns: expected an integer >= 1, got 0"):
        Conversation.synthetic(0, 12, random.Random(0))


def test_think_time() -> None:
    rng = random.Random(0)
    assert Conversation(["q"], think_time=1.5).think_time_s(rng) == 1.5
    conv = Conversation(["q"], think_time=parse_seconds_spec("uniform:2-4"))
    waits = [conv.think_time_s(rng) for _ in range(500)]
    assert min(waits) >= 2 and max(waits) <= 4 and 2.8 < sum(waits) / 500 < 3.2
    with pytest.raises(WorkloadError, match="think_time_s: expected a number >= 0, got -1"):
        Conversation(["q"], think_time=-1)
