"""Prompt datasets: ShareGPT JSON, JSONL of prompts or chat messages, CSV with a prompt column.

Each format reads to :class:`DatasetItem` s; JSONL and CSV stream row by row (ShareGPT is one
JSON document, read whole). A malformed row stops the run with one line naming the file, the
row and what was expected; an empty prompt or a conversation without a user turn is skipped and
counted. :func:`load_dataset` shuffles with a seed shared by all workers and then shards, so the
workers' shards never overlap; :class:`PromptPool` skips (and counts) prompts too long for the
model, measuring each at most once.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tokenload.workload.errors import WorkloadError, describe
from tokenload.workload.frames import Message, RequestPrompt

__all__ = [
    "DatasetFormat",
    "DatasetItem",
    "DatasetStats",
    "PromptPool",
    "ShardMode",
    "detect_format",
    "iter_dataset",
    "load_dataset",
    "shard",
]

DatasetFormat = Literal["auto", "sharegpt", "jsonl", "csv"]
ShardMode = Literal["stride", "contiguous"]

_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}
_CHAT_ROLES = {"system", "user", "assistant", "tool", "developer"}


@dataclass(frozen=True, slots=True)
class DatasetItem:
    """One prompt of a dataset.

    ``messages`` is a chat request (for ShareGPT: the turns up to the first user message);
    ``prompt`` a plain text prompt; ``conversation`` a ShareGPT conversation's every turn;
    ``reference_output`` the dataset's own first answer, when it has one.
    """

    source: str
    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    conversation: tuple[tuple[str, str], ...] | None = None
    reference_output: str | None = None

    def as_messages(self) -> list[Message]:
        """The item as a chat ``messages`` list."""
        if self.messages is not None:
            return [{"role": r, "content": c} for r, c in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]

    def as_prompt(self) -> str:
        """The item as a completions prompt: the text, or the last user message of a chat item."""
        if self.prompt is not None:
            return self.prompt
        assert self.messages is not None
        return next(c for r, c in reversed(self.messages) if r == "user")

    def request(self, chat: bool) -> RequestPrompt:
        return self.as_messages() if chat else self.as_prompt()


@dataclass
class DatasetStats:
    """What a dataset read, skipped and why: shown in the run's report."""

    read: int = 0
    skipped_empty: int = 0
    skipped_too_long: int = 0
    too_long_examples: list[str] = field(default_factory=list)


def detect_format(path: Path) -> Literal["sharegpt", "jsonl", "csv"]:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "sharegpt"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return "csv"
    raise WorkloadError(
        f"{path}: cannot tell the dataset format from the name; expected .json (ShareGPT), .jsonl or .csv, "
        "or set dataset.format"
    )


def iter_dataset(
    path: str | Path,
    format: DatasetFormat = "auto",
    column: str = "prompt",
    stats: DatasetStats | None = None,
) -> Iterator[DatasetItem]:
    """The dataset's usable items, lazily (ShareGPT's JSON is parsed whole on the first item)."""
    path = Path(path)
    stats = stats if stats is not None else DatasetStats()
    fmt = detect_format(path) if format == "auto" else format
    readers = {"sharegpt": _sharegpt, "jsonl": _jsonl, "csv": _csv}
    if fmt not in readers:
        raise WorkloadError(f"dataset.format: expected auto, sharegpt, jsonl or csv, got {fmt!r}")
    if not path.is_file():
        raise WorkloadError(f"{path}: no such dataset file")
    if path.stat().st_size == 0:
        raise WorkloadError(f"{path}: empty file, expected {_WHAT[fmt]}")
    seen_rows = False
    for item in readers[fmt](path, column):
        seen_rows = True
        if item is None:
            stats.skipped_empty += 1
            continue
        stats.read += 1
        yield item
    if not seen_rows:
        raise WorkloadError(f"{path}: no rows, expected {_WHAT[fmt]}")


def load_dataset(
    path: str | Path,
    format: DatasetFormat = "auto",
    column: str = "prompt",
    *,
    worker_index: int = 0,
    n_workers: int = 1,
    shard_mode: ShardMode = "stride",
    shuffle_seed: int | None = None,
    limit: int | None = None,
    stats: DatasetStats | None = None,
) -> list[DatasetItem]:
    """One worker's shard: all usable items (the first ``limit``), shuffled with ``shuffle_seed``
    (the same on every worker), then sharded. Raises when no usable item is left."""
    path = Path(path)
    items = list(iter_dataset(path, format, column, stats))
    if limit is not None:
        items = items[:limit]
    if not items:
        raise WorkloadError(f"{path}: no usable prompt (every row was empty)")
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(items)
    mine = shard(items, worker_index, n_workers, shard_mode)
    if not mine:
        raise WorkloadError(
            f"{path}: worker {worker_index} of {n_workers} gets no prompt: the dataset has only {len(items)}"
        )
    return mine


def shard(
    items: list[DatasetItem], worker_index: int, n_workers: int, mode: ShardMode = "stride"
) -> list[DatasetItem]:
    """Worker ``worker_index`` of ``n_workers``: every n-th item (stride) or one contiguous block."""
    if n_workers < 1 or not 0 <= worker_index < n_workers:
        raise WorkloadError(f"worker index: expected 0 <= index < {n_workers}, got {worker_index}")
    if mode == "stride":
        return items[worker_index::n_workers]
    if mode == "contiguous":
        size, extra = divmod(len(items), n_workers)
        start = worker_index * size + min(worker_index, extra)
        return items[start : start + size + (1 if worker_index < extra else 0)]
    raise WorkloadError(f"dataset.shard: expected stride or contiguous, got {mode!r}")


class PromptPool:
    """A worker's items, served in a loop, skipping those the model cannot take.

    ``count_tokens`` measures an item's request (the server's ``/tokenize``); each item is
    measured once, when first served. A prompt of ``n`` tokens fits when ``n + reserve_output``
    is at most ``max_model_len``. With ``shuffle_seed``, every pass is in a new seeded order.
    """

    def __init__(
        self,
        items: list[DatasetItem],
        *,
        chat: bool,
        count_tokens: Callable[[RequestPrompt], int] | None = None,
        max_model_len: int | None = None,
        reserve_output: int = 1,
        stats: DatasetStats | None = None,
        shuffle_seed: int | None = None,
    ) -> None:
        if not items:
            raise WorkloadError("dataset: expected at least one prompt for this worker, got none")
        self.items = list(items)
        self.chat = chat
        self.count_tokens = count_tokens
        self.max_model_len = max_model_len
        self.reserve_output = reserve_output
        self.stats = stats if stats is not None else DatasetStats()
        self._rng = random.Random(shuffle_seed) if shuffle_seed is not None else None
        self._order = list(range(len(self.items)))
        self._pos = 0
        self._lengths: dict[int, int] = {}
        self._too_long: set[int] = set()

    def next(self) -> tuple[DatasetItem, int | None]:
        """The next item that fits, and its token count (None when nothing measures it)."""
        for _ in range(2 * len(self.items) + 1):
            if len(self._too_long) == len(self.items):
                break
            if self._pos == len(self._order):
                self._pos = 0
                if self._rng is not None:
                    self._rng.shuffle(self._order)
            i = self._order[self._pos]
            self._pos += 1
            if i in self._too_long:
                continue
            n = self._measure(i)
            if (
                n is not None
                and self.max_model_len is not None
                and n + self.reserve_output > self.max_model_len
            ):
                self._too_long.add(i)
                self.stats.skipped_too_long += 1
                if len(self.stats.too_long_examples) < 5:
                    self.stats.too_long_examples.append(f"{self.items[i].source} ({n} tokens)")
                continue
            return self.items[i], n
        raise WorkloadError(
            f"dataset: every one of this worker's {len(self.items)} prompts is too long for max_model_len "
            f"{self.max_model_len} with {self.reserve_output} output tokens"
        )

    def _measure(self, i: int) -> int | None:
        if self.count_tokens is None:
            return None
        if i not in self._lengths:
            self._lengths[i] = self.count_tokens(self.items[i].request(self.chat))
        return self._lengths[i]


# -- readers: each yields an item, or None for a row skipped as empty ------------------------

_WHAT = {
    "sharegpt": 'a JSON list of {"conversations": [{"from": "human", "value": ...}, ...]}',
    "jsonl": 'one JSON object a line, with "prompt" (a string) or "messages" (a list)',
    "csv": "a header row and one prompt a row",
}


def _sharegpt(path: Path, column: str) -> Iterator[DatasetItem | None]:
    try:
        with path.open(encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as exc:
        raise WorkloadError(
            f"{path} line {exc.lineno}: invalid JSON ({exc.msg}), expected {_WHAT['sharegpt']}"
        ) from None
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: expected UTF-8 text") from None
    if not isinstance(doc, list):
        raise WorkloadError(f"{path}: expected {_WHAT['sharegpt']}, got a JSON {type(doc).__name__}")
    for i, entry in enumerate(doc):
        where = f"{path} item {i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
            raise WorkloadError(
                f"{where}: expected an object with a 'conversations' list, got {describe(entry)}"
            )
        turns: list[tuple[str, str]] = []
        for j, turn in enumerate(entry["conversations"]):
            if not isinstance(turn, dict):
                raise WorkloadError(f"{where}: conversations[{j}]: expected an object, got {describe(turn)}")
            who, value = turn.get("from"), turn.get("value")
            role = _ROLES.get(who.lower()) if isinstance(who, str) else None
            if role is None:
                raise WorkloadError(
                    f"{where}: conversations[{j}].from: expected human, gpt or system, got {describe(who)}"
                )
            if not isinstance(value, str):
                raise WorkloadError(
                    f"{where}: conversations[{j}].value: expected a string, got {describe(value)}"
                )
            turns.append((role, value))
        yield _from_turns(str(entry.get("id", i)), where, turns)


def _from_turns(ident: str, where: str, turns: list[tuple[str, str]]) -> DatasetItem | None:
    first_user = next((k for k, (r, c) in enumerate(turns) if r == "user" and c.strip()), None)
    if first_user is None:
        return None
    # Answers before the first question are dropped: chat templates that insist on alternating
    # user/assistant turns reject a conversation that opens with one.
    request = (*(t for t in turns[:first_user] if t[0] == "system"), turns[first_user])
    reply = next((c for r, c in turns[first_user + 1 :] if r == "assistant"), None)
    return DatasetItem(source=where, messages=request, conversation=tuple(turns), reference_output=reply)


def _jsonl(path: Path, column: str) -> Iterator[DatasetItem | None]:
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise WorkloadError(f"{path} line {line_no}: expected UTF-8 text") from None
            if line.strip():
                yield _jsonl_row(path, line_no, line, column)


def _jsonl_row(path: Path, line_no: int, line: str, column: str) -> DatasetItem | None:
    where = f"{path} line {line_no}"
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where}: invalid JSON ({exc.msg}), expected {_WHAT['jsonl']}") from None
    if not isinstance(doc, dict):
        raise WorkloadError(f"{where}: expected a JSON object, got {describe(doc)}")
    if "messages" in doc:
        messages = _messages(doc["messages"], where)
        if not any(r == "user" and c.strip() for r, c in messages):
            return None
        return DatasetItem(source=where, messages=messages, reference_output=_text_or_none(doc, "output"))
    key = column if column in doc else ("prompt" if "prompt" in doc else None)
    if key is None:
        raise WorkloadError(
            f"{where}: expected a {column!r} string or a 'messages' list, got keys {sorted(doc)}"
        )
    prompt = doc[key]
    if not isinstance(prompt, str):
        raise WorkloadError(f"{where}: {key}: expected a string, got {describe(prompt)}")
    if not prompt.strip():
        return None
    return DatasetItem(source=where, prompt=prompt, reference_output=_text_or_none(doc, "output"))


def _messages(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise WorkloadError(f"{where}: messages: expected a non-empty list, got {describe(value)}")
    out = []
    for k, m in enumerate(value):
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if role not in _CHAT_ROLES or not isinstance(content, str):
            raise WorkloadError(
                f"{where}: messages[{k}]: expected {{'role': system|user|assistant, 'content': a string}}, "
                f"got {describe(m)}"
            )
        out.append((role, content))
    return tuple(out)


def _text_or_none(doc: dict, key: str) -> str | None:
    value = doc.get(key)
    return value if isinstance(value, str) else None


def _csv(path: Path, column: str) -> Iterator[DatasetItem | None]:
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    with path.open(encoding="utf-8", newline="") as f:
        try:
            reader = csv.reader(f, delimiter=delimiter)
            header = next(reader, None)
            if header is None:
                return
            names = [h.strip() for h in header]
            if column not in names:
                raise WorkloadError(
                    f"{path} line 1: no column {column!r} (columns: {', '.join(names)}); set dataset.column"
                )
            at = names.index(column)
            for row in reader:
                where = f"{path} line {reader.line_num}"
                if not any(cell.strip() for cell in row):
                    continue
                if len(row) != len(names):
                    raise WorkloadError(
                        f"{where}: expected {len(names)} fields as in the header, got {len(row)}"
                    )
                prompt = row[at]
                yield DatasetItem(source=where, prompt=prompt) if prompt.strip() else None
        except csv.Error as exc:
            raise WorkloadError(f"{path} line {reader.line_num}: malformed CSV ({exc})") from None
        except UnicodeDecodeError:
            raise WorkloadError(f"{path}: expected UTF-8 text") from None
