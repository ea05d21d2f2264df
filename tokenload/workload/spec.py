"""The workload section of a YAML run file, validated up front (``extra="forbid"``).

Every problem is one :class:`WorkloadError` line naming the file, the field path and what was
expected: a typo'd key is an error, not a silently ignored setting. Relative paths (datasets,
tokenizer files, empirical histograms) are read from the run file's folder.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tokenload.workload.errors import WorkloadError, describe, read_text
from tokenload.workload.lengths import Distribution, parse_length_spec, parse_seconds_spec, prefix_misfit

__all__ = [
    "ConversationSpec",
    "DatasetSpec",
    "PrefixSpec",
    "TraceSpec",
    "WorkloadSpec",
    "dump_workload",
    "load_workload_file",
    "parse_workload",
]


def _base_dir(info: Any) -> Path | None:
    context = info.context or {}
    base = context.get("base_dir")
    return Path(base) if base is not None else None


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


def _length_spec(value: Any, info: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise PydanticCustomError(
            "length_spec", "expected a length spec such as 128, fixed:128 or uniform:64-256"
        )
    try:
        parse_length_spec(value, field=info.field_name, base_dir=_base_dir(info))
    except WorkloadError as exc:
        raise PydanticCustomError("length_spec", _after_field(str(exc))) from None
    return value


def _seconds_spec(value: Any, info: Any) -> str | float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PydanticCustomError("seconds_spec", "expected seconds (2.5) or a spec such as uniform:1-5")
    try:
        parse_seconds_spec(value, field=info.field_name, base_dir=_base_dir(info))
    except WorkloadError as exc:
        raise PydanticCustomError("seconds_spec", _after_field(str(exc))) from None
    return value


def _existing_file(value: str, info: Any) -> str:
    if not _resolve(value, _base_dir(info)).is_file():
        raise PydanticCustomError(
            "no_file", "no such file: {path}", {"path": str(_resolve(value, _base_dir(info)))}
        )
    return value


def _after_field(message: str) -> str:
    """A lengths error without its own field name: the spec error adds the full path."""
    return message.split(": ", 1)[1] if ": " in message else message


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class DatasetSpec(_Strict):
    path: str = Field(description="Dataset file: ShareGPT .json, .jsonl of prompts or messages, or .csv")
    format: Literal["auto", "sharegpt", "jsonl", "csv"] = Field(
        "auto", description="File format; auto tells it from the file name"
    )
    column: str = Field("prompt", description="CSV column (or JSONL key) holding the prompt")
    shuffle: bool = Field(True, description="Shuffle with the workload seed (the same order on every worker)")
    shard: Literal["stride", "contiguous"] = Field(
        "stride", description="Worker i of n takes every n-th prompt (stride) or one contiguous block"
    )
    limit: int | None = Field(None, ge=1, description="Use only the first N usable prompts")

    _check_path = field_validator("path")(_existing_file)


class PrefixSpec(_Strict):
    groups: int = Field(8, ge=1, description="Number of distinct shared prefixes")
    tokens: int = Field(512, ge=1, description="Tokens in each shared prefix (the system prompt)")
    selection: Literal["round_robin", "random"] = Field(
        "round_robin", description="How a request picks its group"
    )


class ConversationSpec(_Strict):
    turns: int = Field(
        4, ge=1, description="User turns per conversation (synthetic) or the most taken (dataset)"
    )
    user_tokens: str = Field("fixed:128", description="Length of each synthetic user message, a length spec")
    think_time_s: str | float = Field(0.0, description="Seconds between a reply and the next turn, or a spec")
    source: Literal["synthetic", "dataset"] = Field(
        "synthetic", description="Synthetic user turns, or the user turns of the dataset's conversations"
    )

    _check_user_tokens = field_validator("user_tokens", mode="before")(_length_spec)
    _check_think = field_validator("think_time_s", mode="before")(_seconds_spec)


def _window(value: str | None) -> str | None:
    if value is not None:
        from tokenload.workload.trace import parse_window

        try:
            parse_window(value, "window")
        except WorkloadError as exc:
            raise PydanticCustomError("window", _after_field(str(exc))) from None
    return value


class TraceSpec(_Strict):
    """A request trace to replay (``--shape trace``; workload/trace.py reads it)."""

    path: str = Field(
        description="Trace file: Mooncake JSONL, BurstGPT CSV, Azure LLM inference CSV, or tokenload's "
        "JSONL/CSV (timestamp_s or gap_s, input_tokens, output_tokens, ...)"
    )
    format: Literal["auto", "mooncake", "burstgpt", "azure", "jsonl", "csv"] = Field(
        "auto", description="The trace's format; auto: by extension and header"
    )
    speed: float = Field(1.0, gt=0, description="Play the trace this many times faster")
    window: str | None = Field(None, description="Replay only START:END seconds of it")
    scale_rate: float | None = Field(None, gt=0, description="Rescale it to this mean rate (req/s)")
    block_size: int = Field(512, ge=1, description="Tokens per hash id of its hash_ids")
    steps: int = Field(1, ge=1, description="Replay it as this many steps (consecutive windows)")

    _check_path = field_validator("path")(_existing_file)
    _check_window = field_validator("window")(lambda v: _window(v))


class WorkloadSpec(_Strict):
    """What each request asks for: the ``workload:`` section of a run file."""

    kind: Literal["synthetic", "dataset", "shared_prefix", "conversation", "trace"] = Field(
        "synthetic",
        description="Which workload: synthetic prompts, a dataset, shared prefixes, conversations or a trace",
    )
    seed: int = Field(0, description="Seed of every random choice (lengths, shuffles, groups)")
    input_tokens: str = Field(
        "fixed:128",
        description="Prompt length spec: 128, uniform:64-256, normal:512,128, lognormal:mean=512,sigma=0.6, "
        "empirical:FILE",
    )
    output_tokens: str = Field("fixed:64", description="Output length spec (max_tokens), as input_tokens")
    length_method: Literal["auto", "tokenize", "tokenizer_file", "estimate", "token_ids"] = Field(
        "auto",
        description="How prompt lengths are made exact: auto = tokenizer_file if given, else the server's "
        "/tokenize",
    )
    tokenizer_file: str | None = Field(
        None, description="A local tokenizer.json (needs the tokenizers package)"
    )
    vocab_size: int | None = Field(None, ge=2, description="Vocabulary size, for length_method token_ids")
    dataset: DatasetSpec | None = Field(
        None, description="The dataset, for kind dataset (or conversations from one)"
    )
    prefix: PrefixSpec | None = Field(None, description="Shared prefixes, for kind shared_prefix")
    conversation: ConversationSpec | None = Field(
        None, description="Turns and think time, for kind conversation"
    )
    trace: TraceSpec | None = Field(None, description="The trace, for kind trace (--shape trace)")

    _base_dir: Path | None = PrivateAttr(None)

    _check_lengths = field_validator("input_tokens", "output_tokens", mode="before")(_length_spec)
    _check_tokenizer = field_validator("tokenizer_file")(
        lambda v, info: v if v is None else _existing_file(v, info)
    )

    @model_validator(mode="after")
    def _consistent(self, info: Any) -> WorkloadSpec:
        self._base_dir = _base_dir(info)
        kind = self.kind
        if kind == "dataset" and self.dataset is None:
            raise PydanticCustomError("section", "dataset: required when kind is dataset")
        if (kind == "trace") != (self.trace is not None):
            raise PydanticCustomError("section", "trace: required when kind is trace, and only then")
        if self.prefix is not None and kind != "shared_prefix":
            raise PydanticCustomError(
                "section", "prefix: only used when kind is shared_prefix, here {kind}", {"kind": kind}
            )
        if self.conversation is not None and kind != "conversation":
            raise PydanticCustomError(
                "section", "conversation: only used when kind is conversation, here {kind}", {"kind": kind}
            )
        if self.dataset is not None and kind not in ("dataset", "conversation"):
            raise PydanticCustomError(
                "section",
                "dataset: only used when kind is dataset or conversation, here {kind}",
                {"kind": kind},
            )
        if kind == "conversation" and self.conversation_spec.source == "dataset" and self.dataset is None:
            raise PydanticCustomError("section", "dataset: required when conversation.source is dataset")
        if self.length_method == "tokenizer_file" and self.tokenizer_file is None:
            raise PydanticCustomError(
                "section", "tokenizer_file: required when length_method is tokenizer_file"
            )
        if self.tokenizer_file is not None and self.length_method not in ("auto", "tokenizer_file"):
            raise PydanticCustomError(
                "section", "tokenizer_file: only used when length_method is auto or tokenizer_file"
            )
        if kind == "shared_prefix":
            prefix = self.prefix_spec.tokens
            why = prefix_misfit(self.input_distribution(), prefix)
            if why is not None:
                raise PydanticCustomError(
                    "section",
                    "input_tokens: every prompt starts with the shared prefix (prefix.tokens {prefix}) and "
                    "needs a part of its own, but {why}",
                    {"prefix": prefix, "why": why},
                )
        if self.length_method == "token_ids":
            if self.vocab_size is None:
                raise PydanticCustomError("section", "vocab_size: required when length_method is token_ids")
            if kind in ("shared_prefix", "conversation"):
                raise PydanticCustomError(
                    "section",
                    "length_method: token_ids serves kind synthetic only, here {kind}",
                    {"kind": kind},
                )
        return self

    # -- runtime views -------------------------------------------------------------------------
    @property
    def base_dir(self) -> Path | None:
        """The run file's folder, against which relative paths resolve."""
        return self._base_dir

    def resolve_path(self, path: str) -> Path:
        return _resolve(path, self._base_dir)

    @property
    def prefix_spec(self) -> PrefixSpec:
        return self.prefix if self.prefix is not None else PrefixSpec()

    @property
    def conversation_spec(self) -> ConversationSpec:
        return self.conversation if self.conversation is not None else ConversationSpec()

    def input_distribution(self) -> Distribution:
        return parse_length_spec(self.input_tokens, "input_tokens", self._base_dir)

    def output_distribution(self) -> Distribution:
        return parse_length_spec(self.output_tokens, "output_tokens", self._base_dir)

    def user_tokens_distribution(self) -> Distribution:
        return parse_length_spec(
            self.conversation_spec.user_tokens, "conversation.user_tokens", self._base_dir
        )

    def think_time_distribution(self) -> Distribution:
        return parse_seconds_spec(
            self.conversation_spec.think_time_s, "conversation.think_time_s", self._base_dir
        )


# -- loading ----------------------------------------------------------------------------------


def parse_workload(
    data: Any, *, source: str = "workload", base_dir: str | Path | None = None, section: str = ""
) -> WorkloadSpec:
    """Validate a mapping; errors name ``source`` and the field path (under ``section``)."""
    if not isinstance(data, dict):
        where = f"{source}: {section}" if section else source
        raise WorkloadError(f"{where}: expected a mapping of workload settings, got {_yaml_type(data)}")
    try:
        return WorkloadSpec.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise WorkloadError(_one_line(exc, source, section)) from None


def load_workload_file(path: str | Path, section: str = "workload") -> WorkloadSpec:
    """The workload of a YAML run file: its ``section`` mapping when the file has one (other
    top-level keys belong to other layers), else the whole file."""
    path = Path(path)
    text = read_text(path, str(path), "no such run file")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        where = f"{path} line {mark.line + 1} column {mark.column + 1}" if mark is not None else str(path)
        raise WorkloadError(f"{where}: invalid YAML ({problem})") from None
    if doc is None:
        raise WorkloadError(f"{path}: empty file, expected a mapping of workload settings")
    used = ""
    if isinstance(doc, dict) and section and section in doc:
        doc, used = doc[section], section
    return parse_workload(doc, source=str(path), base_dir=path.parent, section=used)


def dump_workload(spec: WorkloadSpec, section: str = "workload") -> str:
    """YAML text that :func:`load_workload_file` reads back to an equal spec."""
    data = spec.model_dump(mode="json", exclude_none=True)
    return yaml.safe_dump({section: data} if section else data, sort_keys=False)


def _yaml_type(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__
    ) + (f" {describe(value)}" if isinstance(value, (str, int, float)) else "")


def _one_line(exc: ValidationError, source: str, section: str) -> str:
    errors = exc.errors(include_url=False)
    err = errors[0]
    loc = [str(p) for p in err["loc"]]
    msg = err["msg"]
    if err["type"] == "section":
        field, _, msg = msg.partition(": ")
        loc = [field]
    elif err["type"] == "extra_forbidden":
        allowed = _keys_at(loc[:-1])
        msg = "unknown key" + (f" (expected one of: {', '.join(allowed)})" if allowed else "")
    elif err["type"] == "missing":
        msg = "required"
    elif err["type"] in _EXPECTED:
        expected = _EXPECTED[err["type"]].format(**err.get("ctx", {}))
        msg = f"expected {expected}, got {describe(err.get('input'))}"
    elif err["type"] not in ("length_spec", "seconds_spec", "no_file"):
        msg = msg.removeprefix("Value error, ").removeprefix("Input should be ")
        msg = f"expected {msg}, got {describe(err.get('input'))}"
    path = ".".join(([section] if section else []) + loc)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: {path}: {msg}{more}" if path else f"{source}: {msg}{more}"


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "greater_than_equal": "a number >= {ge}",
    "greater_than": "a number > {gt}",
    "less_than_equal": "a number <= {le}",
    "model_type": "a mapping of settings",
    "model_attributes_type": "a mapping of settings",
    "dict_type": "a mapping of settings",
}


def _keys_at(loc: list[str]) -> list[str]:
    model: type[BaseModel] = WorkloadSpec
    for part in loc:
        field = model.model_fields.get(part)
        if field is None:
            return []
        inner = [a for a in typing.get_args(field.annotation) or (field.annotation,) if isinstance(a, type)]
        nested = [a for a in inner if issubclass(a, BaseModel)]
        if not nested:
            return []
        model = nested[0]
    return list(model.model_fields)
