"""The workload section of a run file: strict keys, one-line errors naming file and field, round trips."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tokenload.workload.errors import WorkloadError
from tokenload.workload.lengths import Empirical, LogNormal, Uniform
from tokenload.workload.spec import WorkloadSpec, dump_workload, load_workload_file, parse_workload

DATA = Path(__file__).parent / "data"


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(WorkloadError) as e:
        load_workload_file(path)
    message = str(e.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_defaults() -> None:
    spec = parse_workload({})
    assert spec.kind == "synthetic" and spec.input_tokens == "fixed:128" and spec.output_tokens == "fixed:64"
    assert spec.input_distribution().mean() == 128 and spec.length_method == "auto"


def test_every_field_has_a_description() -> None:
    from tokenload.workload.spec import ConversationSpec, DatasetSpec, PrefixSpec

    for model in (WorkloadSpec, DatasetSpec, PrefixSpec, ConversationSpec):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"


def test_a_full_file_loads_with_paths_relative_to_it(tmp_path: Path) -> None:
    shutil.copy(DATA / "sharegpt.json", tmp_path / "chats.json")
    shutil.copy(DATA / "hist.csv", tmp_path / "hist.csv")
    path = write(
        tmp_path,
        """
locust:            # another layer's section: not the workload's business
  users: 8
workload:
  kind: conversation
  seed: 7
  input_tokens: empirical:hist.csv
  output_tokens: lognormal:median=200,sigma=0.5
  dataset:
    path: chats.json
    shuffle: false
  conversation:
    turns: 3
    source: dataset
    think_time_s: uniform:1-2
""",
    )
    spec = load_workload_file(path)
    assert spec.kind == "conversation" and spec.seed == 7
    assert spec.resolve_path(spec.dataset.path) == tmp_path / "chats.json"
    assert isinstance(spec.input_distribution(), Empirical)
    assert isinstance(spec.output_distribution(), LogNormal)
    assert isinstance(spec.think_time_distribution(), Uniform)
    assert spec.conversation_spec.turns == 3 and spec.dataset.shuffle is False


def test_a_file_that_is_only_the_workload(tmp_path: Path) -> None:
    # (Prompts longer than the 256-token prefix: the default fixed:128 is refused, below.)
    text = "kind: shared_prefix\ninput_tokens: 512\nprefix: {groups: 4, tokens: 256}\n"
    spec = load_workload_file(write(tmp_path, text))
    assert spec.prefix_spec.groups == 4 and spec.prefix_spec.tokens == 256


def test_round_trip(tmp_path: Path) -> None:
    shutil.copy(DATA / "prompts.csv", tmp_path / "p.csv")
    spec = parse_workload(
        {
            "kind": "dataset",
            "seed": 3,
            "input_tokens": "normal:512,128",
            "output_tokens": 32,
            "length_method": "estimate",
            "dataset": {"path": "p.csv", "column": "text", "shard": "contiguous", "limit": 2},
        },
        base_dir=tmp_path,
    )
    path = write(tmp_path, dump_workload(spec))
    again = load_workload_file(path)
    assert again == spec
    assert again.model_dump() == spec.model_dump()
    assert again.output_tokens == "32" and again.output_distribution().mean() == 32
    # And dumping the reloaded spec gives the same text.
    assert dump_workload(again) == path.read_text()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "workload:\n  knd: synthetic\n",
            "{f}: workload.knd: unknown key (expected one of: kind, seed, input_tokens,",
        ),
        (
            "workload:\n  kind: shared_prefix\n  prefix:\n    groups: 2\n    tokns: 5\n",
            "{f}: workload.prefix.tokns: unknown key (expected one of: groups, tokens, selection)",
        ),
        ("kind: synthetic\nseeed: 1\n", "{f}: seeed: unknown key"),
        (
            "workload:\n  kind: batch\n",
            "{f}: workload.kind: expected 'synthetic', 'dataset', 'shared_prefix', 'conversation' or "
            "'trace', got 'batch'",
        ),
        ("workload:\n  seed: x\n", "{f}: workload.seed: expected an integer, got 'x'"),
        (
            "workload:\n  input_tokens: uniform:256-64\n",
            "{f}: workload.input_tokens: expected uniform:LOW-HIGH with integers 1 <= LOW <= HIGH, "
            "got 'uniform:256-64'",
        ),
        (
            "workload:\n  output_tokens: [1]\n",
            "{f}: workload.output_tokens: expected a length spec such as 128",
        ),
        (
            "workload:\n  input_tokens: empirical:none.csv\n",
            "{f}: workload.input_tokens: {d}/none.csv: no such file",
        ),
        ("workload:\n  kind: dataset\n", "{f}: workload.dataset: required when kind is dataset"),
        ("workload:\n  kind: dataset\n  dataset: {}\n", "{f}: workload.dataset.path: required"),
        (
            "workload:\n  kind: dataset\n  dataset: {path: gone.jsonl}\n",
            "{f}: workload.dataset.path: no such file: {d}/gone.jsonl",
        ),
        (
            "workload:\n  prefix: {groups: 2}\n",
            "{f}: workload.prefix: only used when kind is shared_prefix, here synthetic",
        ),
        (
            "workload:\n  kind: shared_prefix\n  prefix: {groups: 0}\n",
            "{f}: workload.prefix.groups: expected a number >= 1, got 0",
        ),
        (
            # Walkthrough: caught only once the run had started, as an ERROR log line.
            "workload:\n  kind: shared_prefix\n  input_tokens: uniform:64-512\n  prefix: {tokens: 512}\n",
            "{f}: workload.input_tokens: every prompt starts with the shared prefix (prefix.tokens 512) and "
            "needs a part of its own, but the longest uniform:64-512 can draw is 512 tokens",
        ),
        (
            # Review: an unbounded spread passed and failed the run after 100 redraws.
            "workload:\n  kind: shared_prefix\n  input_tokens: normal:100,10\n  prefix: {tokens: 512}\n",
            "{f}: workload.input_tokens: every prompt starts with the shared prefix (prefix.tokens 512) and "
            "needs a part of its own, but normal:100,10's mean is 100 tokens: half its draws or more would "
            "be drawn again",
        ),
        (
            "workload:\n  kind: shared_prefix\n  prefix: 5\n",
            "{f}: workload.prefix: expected a mapping of settings, got 5",
        ),
        (
            "workload:\n  kind: conversation\n  conversation: {source: dataset}\n",
            "{f}: workload.dataset: required when conversation.source is dataset",
        ),
        (
            "workload:\n  kind: conversation\n  conversation: {think_time_s: soon}\n",
            "{f}: workload.conversation.think_time_s: expected fixed:SECONDS with SECONDS >= 0, got 'soon'",
        ),
        (
            "workload:\n  length_method: token_ids\n",
            "{f}: workload.vocab_size: required when length_method is token_ids",
        ),
        (
            "workload:\n  length_method: tokenizer_file\n",
            "{f}: workload.tokenizer_file: required when length_method is tokenizer_file",
        ),
        (
            "workload:\n  tokenizer_file: tok.json\n",
            "{f}: workload.tokenizer_file: no such file: {d}/tok.json",
        ),
        (
            "workload:\n  kind: synthetic\n  seed: 1\n  oops: 2\n  kind2: 3\n",
            "{f}: workload.oops: unknown key",
        ),
        ("workload: [1, 2]\n", "{f}: workload: expected a mapping of workload settings, got a list"),
        ("- kind: synthetic\n", "{f}: expected a mapping of workload settings, got a list"),
        ("", "{f}: empty file, expected a mapping of workload settings"),
        ("workload:\n  kind: synthetic\n seed: 1\n", "{f} line 3 column 2: invalid YAML"),
        ("workload:\n  kind: [synthetic\n", "{f} line 3 column 1: invalid YAML"),
        (
            "workload:\n\tkind: synthetic\n",
            "{f} line 2 column 1: invalid YAML (found character '\\t' that cannot start any token)",
        ),
    ],
)
def test_errors_name_the_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    assert error_of(path).startswith(message.format(f=path, d=tmp_path))


def test_several_errors_are_counted_on_the_one_line(tmp_path: Path) -> None:
    msg = error_of(write(tmp_path, "workload:\n  seed: x\n  kind: y\n"))
    assert msg.endswith("(and 1 more)")


def test_a_missing_run_file(tmp_path: Path) -> None:
    assert error_of(tmp_path / "nope.yaml") == f"{tmp_path / 'nope.yaml'}: no such run file"


def test_validation_without_a_file_names_the_source() -> None:
    with pytest.raises(WorkloadError, match=r"^--workload: kind: expected"):
        parse_workload({"kind": 3}, source="--workload")
