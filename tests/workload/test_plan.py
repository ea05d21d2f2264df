"""The per-worker planner: a spec to requests, with the emulator's tokenizer as the server's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workload.toys import emulator
from tokenload.workload.errors import WorkloadError
from tokenload.workload.plan import RequestPlanner, merge_fit
from tokenload.workload.spec import parse_workload

DATA = Path(__file__).parent / "data"


def spec(**kw):
    return parse_workload(kw, base_dir=DATA)


def test_synthetic_completions_are_exact_distinct_and_per_worker() -> None:
    s = spec(input_tokens="uniform:100-300", output_tokens="uniform:10-20", seed=4)
    planner = RequestPlanner(s, chat=False, count_tokens=emulator, max_model_len=4096)
    reqs = [planner.next() for _ in range(20)]
    for r in reqs:
        assert emulator(r.prompt) == r.input_tokens and 100 <= r.input_tokens <= 300
        assert 10 <= r.max_tokens <= 20 and r.exact
    assert len({r.prompt for r in reqs}) == 20
    again = RequestPlanner(s, chat=False, count_tokens=emulator)
    assert [again.next().prompt for _ in range(20)] == [r.prompt for r in reqs]
    other = RequestPlanner(s, chat=False, count_tokens=emulator, worker_index=1, n_workers=2)
    assert [other.next().input_tokens for _ in range(20)] != [r.input_tokens for r in reqs]


def test_synthetic_chat() -> None:
    planner = RequestPlanner(spec(input_tokens=200), chat=True, count_tokens=emulator)
    r = planner.next()
    assert r.prompt[-1]["role"] == "user" and emulator(r.prompt) == 200


def test_without_a_counter_lengths_are_estimates() -> None:
    r = RequestPlanner(spec(input_tokens=50), chat=False).next()
    assert not r.exact and len(r.prompt.split()) == 50


def test_token_ids() -> None:
    s = spec(input_tokens=64, length_method="token_ids", vocab_size=256)
    r = RequestPlanner(s, chat=False).next()
    assert len(r.prompt) == 64 and all(isinstance(i, int) for i in r.prompt)
    with pytest.raises(WorkloadError, match="token_ids needs the completions API"):
        RequestPlanner(s, chat=True)


def test_lengths_that_never_fit_fail_up_front_and_rare_ones_are_redrawn() -> None:
    with pytest.raises(WorkloadError, match=r"4000 \+ 200 tokens exceed the model's max_model_len of 4096"):
        RequestPlanner(spec(input_tokens=4000, output_tokens=200), chat=False, max_model_len=4096)
    planner = RequestPlanner(
        spec(input_tokens="uniform:1-200", output_tokens=10),
        chat=False,
        count_tokens=emulator,
        max_model_len=110,
    )
    assert all(planner.next().input_tokens <= 100 for _ in range(30))
    assert planner.redrawn_lengths > 0
    fit = planner.fit_counts()
    assert fit["planned"] == 30 and fit["redrawn_lengths"] == planner.redrawn_lengths
    assert fit["max_model_len"] == 110


def test_dataset_requests_skip_too_long_prompts() -> None:
    s = spec(kind="dataset", dataset={"path": "prompts.jsonl"}, output_tokens=8)
    planner = RequestPlanner(s, chat=False, count_tokens=emulator, max_model_len=40)
    reqs = [planner.next() for _ in range(6)]
    # Line 2 is 50 tokens; the others fit with their 8 output tokens.
    assert {r.source.rsplit(" ", 1)[1] for r in reqs} == {"1", "4", "6"}
    assert all(emulator(r.prompt) == r.input_tokens and r.input_tokens + r.max_tokens <= 40 for r in reqs)
    assert planner.stats.skipped_too_long == 1 and planner.stats.skipped_empty == 1
    # Two workers' counts add up in summary.json's workload_fit (the largest max_model_len kept).
    other = RequestPlanner(s, chat=False, count_tokens=emulator, max_model_len=60)
    other.next()
    fit = merge_fit([planner.fit_counts(), other.fit_counts(), {}])
    assert fit == {
        "planned": 7,
        "redrawn_lengths": 0,
        "clamped_output": 0,
        "dataset_skipped_too_long": 1,
        "dataset_skipped_empty": 2,
        "max_model_len": 60,
    }
    assert merge_fit([{}]) is None


def test_dataset_shards_across_workers() -> None:
    s = spec(kind="dataset", dataset={"path": "sharegpt.json"})
    seen = [{RequestPlanner(s, chat=True, worker_index=w, n_workers=2).next().source} for w in range(2)]
    assert not seen[0] & seen[1]


def test_shared_prefix_requests() -> None:
    s = spec(kind="shared_prefix", input_tokens=400, prefix={"groups": 2, "tokens": 100})
    planner = RequestPlanner(s, chat=False, count_tokens=emulator)
    reqs = [planner.next() for _ in range(4)]
    assert [r.group for r in reqs] == [0, 1, 0, 1]
    assert all(emulator(r.prompt) == 400 for r in reqs)
    assert reqs[0].prompt[:100] == reqs[2].prompt[:100] != reqs[1].prompt[:100]
    assert planner.requested_hit_rate == pytest.approx(0.25)
    with pytest.raises(WorkloadError, match="ConversationUser"):
        RequestPlanner(spec(kind="conversation"), chat=True).next()
    # A prompt length that a draw can put at or below the prefix is drawn again, as one too long
    # for the context is (it failed the run at the first such draw).
    wide = spec(kind="shared_prefix", input_tokens="uniform:50-150", prefix={"groups": 2, "tokens": 100})
    planner = RequestPlanner(wide, chat=False, count_tokens=emulator)
    assert all(101 <= emulator(planner.next().prompt) <= 150 for _ in range(50))
    assert planner.redrawn_lengths > 0


def test_conversations() -> None:
    s = spec(kind="conversation", conversation={"turns": 3, "user_tokens": 30, "think_time_s": 2})
    planner = RequestPlanner(s, chat=True, count_tokens=emulator)
    conv = planner.new_conversation("u1")
    assert conv.n_turns == 3 and conv.think_time_s(None) == 2
    assert all(emulator(t) - emulator("") == 30 for t in conv.user_turns)
    d = spec(
        kind="conversation",
        dataset={"path": "sharegpt.json", "shuffle": False},
        conversation={"source": "dataset"},
    )
    first = RequestPlanner(d, chat=True).new_conversation()
    assert first.user_turns == ("What is the capital of France?", "And of Italy?")
