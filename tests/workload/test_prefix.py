"""Shared prefixes: identical prefixes within a group, distinct across groups, the requested hit rate."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.workload.toys import Counting, emulator, greedy_merge
from tokenload.sim.tokenizer import apply_chat_template, encode
from tokenload.workload.errors import WorkloadError
from tokenload.workload.maker import PromptMaker
from tokenload.workload.prefix import SharedPrefixes, requested_hit_rate


def test_requested_hit_rate_formula() -> None:
    assert requested_hit_rate(512, 1024) == 0.5
    assert requested_hit_rate(500, 1000, block_size=16) == pytest.approx(496 / 1000)
    assert requested_hit_rate(2000, 1000) == 1.0
    with pytest.raises(WorkloadError, match="block_size: expected an integer >= 1"):
        requested_hit_rate(10, 100, block_size=0)
    with pytest.raises(WorkloadError, match="input_tokens: expected a positive mean length"):
        requested_hit_rate(10, 0)


def test_completions_groups_share_identical_prefix_tokens() -> None:
    maker = PromptMaker(count_tokens=emulator)
    prefixes = SharedPrefixes(maker, groups=4, prefix_tokens=300, chat=False, seed=1)
    rng = random.Random(0)
    by_group: dict[int, list[list[int]]] = {}
    for _ in range(16):
        req = prefixes.next(800, rng)
        ids = encode(req.prompt.render(), add_bos=True)
        assert len(ids) == 800
        by_group.setdefault(req.group, []).append(ids)
    heads = {g: {tuple(ids[:300]) for ids in reqs} for g, reqs in by_group.items()}
    assert all(len(h) == 1 for h in heads.values())  # one prefix per group
    assert len({next(iter(h)) for h in heads.values()}) == 4  # four different prefixes
    for g in range(4):
        assert emulator(prefixes.prefix_text(g)) == 300
        assert all(encode(prefixes.prefix_text(g), add_bos=True) == ids[:300] for ids in by_group[g])
        # Only the prefix is shared: the rest differs between requests of a group.
        assert len({tuple(ids[300:]) for ids in by_group[g]}) == len(by_group[g])


def test_chat_groups_share_the_system_prompt() -> None:
    counter = Counting(emulator)
    prefixes = SharedPrefixes(
        PromptMaker(count_tokens=counter), groups=2, prefix_tokens=200, chat=True, seed=2
    )
    rng = random.Random(1)
    reqs = [prefixes.next(500, rng) for _ in range(6)]
    for r in reqs:
        messages = r.prompt.render()
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[0]["content"] == prefixes.prefix_text(r.group)
        assert emulator(messages) == 500
    assert emulator([{"role": "system", "content": prefixes.prefix_text(0)}]) == 200
    assert prefixes.prefix_text(0) != prefixes.prefix_text(1)
    assert len({r.prompt.render()[1]["content"] for r in reqs}) == 6


def test_round_robin_and_random_selection() -> None:
    maker = PromptMaker(count_tokens=greedy_merge)
    rr = SharedPrefixes(maker, groups=3, prefix_tokens=50, chat=False, first_group=1)
    rng = random.Random(0)
    assert [rr.next(100, rng).group for _ in range(6)] == [1, 2, 0, 1, 2, 0]
    rnd = SharedPrefixes(maker, groups=3, prefix_tokens=50, chat=False, selection="random")
    counts = Counter(rnd.next(100, random.Random(s)).group for s in range(300))
    assert set(counts) == {0, 1, 2} and min(counts.values()) > 60
    again = SharedPrefixes(maker, groups=3, prefix_tokens=50, chat=False, selection="random")
    assert [again.next(100, random.Random(s)).group for s in range(30)] == [
        SharedPrefixes(maker, groups=3, prefix_tokens=50, chat=False, selection="random")
        .next(100, random.Random(s))
        .group
        for s in range(30)
    ]


def test_requested_hit_rate_tracks_the_requests_made() -> None:
    prefixes = SharedPrefixes(PromptMaker(count_tokens=emulator), groups=2, prefix_tokens=100, chat=False)
    assert prefixes.requested_hit_rate is None
    rng = random.Random(0)
    for n in (200, 400):
        req = prefixes.next(n, rng)
        assert req.shared_fraction == 100 / n and req.input_tokens == n and req.prefix_tokens == 100
    assert prefixes.requested_hit_rate == pytest.approx(200 / 600)


def test_estimated_prefixes_are_flagged_inexact() -> None:
    prefixes = SharedPrefixes(PromptMaker(), groups=2, prefix_tokens=64, chat=False)
    assert all(not p.exact for p in prefixes.prefixes)
    assert not prefixes.next(128, random.Random(0)).prompt.exact


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"groups": 0}, "prefix.groups: expected an integer >= 1, got 0"),
        ({"prefix_tokens": 0}, "prefix.tokens: expected an integer >= 1, got 0"),
        ({"selection": "lru"}, "prefix.selection: expected round_robin or random, got 'lru'"),
    ],
)
def test_bad_prefix_settings(kwargs: dict, needle: str) -> None:
    args = {"groups": 2, "prefix_tokens": 10, "chat": False, **kwargs}
    with pytest.raises(WorkloadError, match=needle):
        SharedPrefixes(PromptMaker(count_tokens=emulator), **args)


def test_requests_must_be_longer_than_the_prefix() -> None:
    prefixes = SharedPrefixes(PromptMaker(count_tokens=emulator), groups=1, prefix_tokens=100, chat=False)
    with pytest.raises(
        WorkloadError, match="input_tokens: expected more than the shared prefix's 100 tokens, got 100"
    ):
        prefixes.next(100, random.Random(0))


def test_token_ids_cannot_share_text_prefixes() -> None:
    with pytest.raises(WorkloadError, match="use a length_method other than token_ids"):
        SharedPrefixes(PromptMaker(method="token_ids", vocab_size=100), groups=1, prefix_tokens=5, chat=False)


def test_chat_template_of_the_emulator_is_what_was_counted() -> None:
    # Guard for the test above: the counter and the template agree on what a request is.
    messages = [{"role": "system", "content": "a"}, {"role": "user", "content": "b"}]
    assert emulator(messages) == len(encode(apply_chat_template(messages), add_bos=True))
