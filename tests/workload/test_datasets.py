"""Datasets: each format, malformed files as one-line errors, sharding, shuffling, too-long prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workload.toys import emulator
from tokenload.workload.datasets import (
    DatasetItem,
    DatasetStats,
    PromptPool,
    iter_dataset,
    load_dataset,
    shard,
)
from tokenload.workload.errors import WorkloadError

DATA = Path(__file__).parent / "data"


def test_sharegpt() -> None:
    stats = DatasetStats()
    items = list(iter_dataset(DATA / "sharegpt.json", stats=stats))
    assert len(items) == 4 and stats.read == 4 and stats.skipped_empty == 1  # c3 has no turns
    first = items[0]
    assert first.as_messages() == [{"role": "user", "content": "What is the capital of France?"}]
    assert first.reference_output == "Paris."
    assert [r for r, _ in first.conversation] == ["user", "assistant", "user", "assistant"]
    assert first.source.endswith("sharegpt.json item 0")
    # A system turn is kept; an answer before the first question is dropped from the request.
    assert items[1].as_messages()[0] == {"role": "system", "content": "You are terse."}
    assert [m["role"] for m in items[2].as_messages()] == ["user"]
    assert items[2].as_prompt().startswith("Tell me a long story")


def test_jsonl_prompts_and_messages() -> None:
    stats = DatasetStats()
    items = list(iter_dataset(DATA / "prompts.jsonl", stats=stats))
    assert [i.source.rsplit(" ", 1)[1] for i in items] == ["1", "2", "4", "6"]
    assert (
        items[0].prompt == "Write a haiku about the sea." and items[0].request(chat=False) == items[0].prompt
    )
    assert items[0].request(chat=True) == [{"role": "user", "content": "Write a haiku about the sea."}]
    assert (
        items[2].as_messages()[0]["content"] == "Be brief." and items[2].as_prompt() == "Why is the sky blue?"
    )
    assert items[3].reference_output.startswith("Holding paper")
    assert stats.skipped_empty == 1  # the blank prompt on line 5


def test_csv_with_a_named_column() -> None:
    stats = DatasetStats()
    items = list(iter_dataset(DATA / "prompts.csv", column="text", stats=stats))
    assert [i.prompt for i in items] == [
        "Summarise the plot of Hamlet, briefly.",
        "What is 17 times 23?",
        'Describe a "perfect" Sunday.',
    ]
    assert items[2].source.endswith("prompts.csv line 5") and stats.skipped_empty == 1


def test_formats_can_be_forced(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_text('{"prompt": "hi"}\n')
    with pytest.raises(WorkloadError, match="cannot tell the dataset format from the name"):
        list(iter_dataset(path))
    assert [i.prompt for i in iter_dataset(path, format="jsonl")] == ["hi"]


@pytest.mark.parametrize(
    ("name", "content", "kwargs", "message"),
    [
        ("a.json", None, {}, "{d}/a.json: no such dataset file"),
        ("a.jsonl", "", {}, "{d}/a.jsonl: empty file, expected one JSON object a line"),
        ("a.csv", "", {}, "{d}/a.csv: empty file, expected a header row and one prompt a row"),
        ("a.jsonl", "\n\n", {}, "{d}/a.jsonl: no rows, expected one JSON object a line"),
        ("a.json", "[]", {}, "{d}/a.json: no rows, expected a JSON list of"),
        ("a.json", '[{"conversations": [}', {}, "{d}/a.json line 1: invalid JSON (Expecting value)"),
        ("a.json", '{"conversations": []}', {}, "{d}/a.json: expected a JSON list of"),
        ("a.json", '[{"conv": []}]', {}, "{d}/a.json item 0: expected an object with a 'conversations' list"),
        (
            "a.json",
            '[{"conversations": [{"from": "human", "value": 3}]}]',
            {},
            "{d}/a.json item 0: conversations[0].value: expected a string, got 3",
        ),
        (
            "a.json",
            '[{"conversations": [{"from": "robot", "value": "x"}]}]',
            {},
            "{d}/a.json item 0: conversations[0].from: expected human, gpt or system, got 'robot'",
        ),
        ("a.jsonl", '{"prompt": "ok"}\n{"prompt": "bad"\n', {}, "{d}/a.jsonl line 2: invalid JSON"),
        ("a.jsonl", '["x"]\n', {}, "{d}/a.jsonl line 1: expected a JSON object, got ['x']"),
        ("a.jsonl", '{"prompt": 5}\n', {}, "{d}/a.jsonl line 1: prompt: expected a string, got 5"),
        (
            "a.jsonl",
            '{"text": "x"}\n',
            {},
            "{d}/a.jsonl line 1: expected a 'prompt' string or a 'messages' list, got keys ['text']",
        ),
        (
            "a.jsonl",
            '{"messages": []}\n',
            {},
            "{d}/a.jsonl line 1: messages: expected a non-empty list, got []",
        ),
        (
            "a.jsonl",
            '{"messages": [{"role": "user", "content": 1}]}\n',
            {},
            "{d}/a.jsonl line 1: messages[0]: expected {{'role': system|user|assistant, 'content': a "
            "string}}",
        ),
        ("a.jsonl", b'{"prompt": "\xff"}\n', {}, "{d}/a.jsonl line 1: expected UTF-8 text"),
        (
            "a.csv",
            "id,text\n1,hello\n",
            {},
            "{d}/a.csv line 1: no column 'prompt' (columns: id, text); set dataset.column",
        ),
        (
            "a.csv",
            "id,prompt\n1,hello,extra\n",
            {},
            "{d}/a.csv line 2: expected 2 fields as in the header, got 3",
        ),
        ("a.csv", "prompt\n", {}, "{d}/a.csv: no rows, expected a header row"),
        (
            "a.json",
            "[]",
            {"format": "parquet"},
            "dataset.format: expected auto, sharegpt, jsonl or csv, got 'parquet'",
        ),
    ],
)
def test_malformed_datasets_are_one_line(tmp_path: Path, name, content, kwargs, message) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(WorkloadError) as e:
        list(iter_dataset(path, **kwargs))
    assert str(e.value).startswith(message.format(d=tmp_path))
    assert "\n" not in str(e.value)


def test_a_dataset_of_only_empty_prompts(tmp_path: Path) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_text('{"prompt": ""}\n{"prompt": " "}\n')
    with pytest.raises(WorkloadError, match=r"blank\.jsonl: no usable prompt"):
        load_dataset(path)


def _items(n: int) -> list[DatasetItem]:
    return [DatasetItem(source=str(i), prompt=f"p{i}") for i in range(n)]


@pytest.mark.parametrize("mode", ["stride", "contiguous"])
@pytest.mark.parametrize(("n_items", "n_workers"), [(10, 3), (9, 3), (7, 7), (100, 6)])
def test_shards_partition_the_items(mode: str, n_items: int, n_workers: int) -> None:
    items = _items(n_items)
    shards = [shard(items, w, n_workers, mode) for w in range(n_workers)]
    flat = [i.source for s in shards for i in s]
    assert sorted(flat, key=int) == [str(i) for i in range(n_items)]
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_stride_and_contiguous_differ() -> None:
    items = _items(6)
    assert [i.prompt for i in shard(items, 1, 2, "stride")] == ["p1", "p3", "p5"]
    assert [i.prompt for i in shard(items, 1, 2, "contiguous")] == ["p3", "p4", "p5"]
    with pytest.raises(WorkloadError, match="worker index: expected 0 <= index < 2, got 2"):
        shard(items, 2, 2)


def test_shuffled_shards_agree_across_workers() -> None:
    path = DATA / "prompts.jsonl"
    shards = [load_dataset(path, worker_index=w, n_workers=2, shuffle_seed=5) for w in range(2)]
    assert not {i.source for i in shards[0]} & {i.source for i in shards[1]}
    assert len(shards[0]) + len(shards[1]) == 4
    again = load_dataset(path, worker_index=0, n_workers=2, shuffle_seed=5)
    assert [i.source for i in again] == [i.source for i in shards[0]]
    orders = {tuple(i.source for i in load_dataset(path, shuffle_seed=s)) for s in range(8)}
    assert len(orders) > 1


def test_a_worker_without_items_is_told_so() -> None:
    with pytest.raises(WorkloadError, match="worker 5 of 6 gets no prompt: the dataset has only 4"):
        load_dataset(DATA / "prompts.jsonl", worker_index=5, n_workers=6)


def test_too_long_prompts_are_skipped_and_counted() -> None:
    items = [
        DatasetItem(source=f"row {i}", prompt="x" * length) for i, length in enumerate((10, 500, 20, 900))
    ]
    calls = []

    def count(prompt) -> int:
        calls.append(prompt)
        return emulator(prompt)

    stats = DatasetStats()
    pool = PromptPool(
        items, chat=False, count_tokens=count, max_model_len=256, reserve_output=64, stats=stats
    )
    served = [pool.next() for _ in range(10)]
    assert {item.source for item, _ in served} == {"row 0", "row 2"}
    assert [n for _, n in served[:2]] == [11, 21]
    assert stats.skipped_too_long == 2
    assert stats.too_long_examples == ["row 1 (501 tokens)", "row 3 (901 tokens)"]
    assert len(calls) == 4  # each prompt measured once


def test_a_pool_of_only_too_long_prompts_fails_clearly() -> None:
    pool = PromptPool(_items(3), chat=True, count_tokens=emulator, max_model_len=40, reserve_output=8)
    with pytest.raises(WorkloadError) as e:
        pool.next()
    assert str(e.value) == (
        "dataset: every one of this worker's 3 prompts is too long for max_model_len 40 with 8 output tokens"
    )


def test_a_pool_without_a_counter_serves_everything_in_seeded_passes() -> None:
    pool = PromptPool(_items(5), chat=False, shuffle_seed=3)
    first = [pool.next()[0].prompt for _ in range(5)]
    second = [pool.next()[0].prompt for _ in range(5)]
    assert sorted(first) == sorted(second) == [f"p{i}" for i in range(5)]
    assert pool.next()[1] is None
