"""Hardware + model profiles for the emulator: the numbers its roofline cost model and its KV
cache sizing are computed from, loaded from YAML and validated field by field."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

__all__ = [
    "DEFAULT_PROFILE",
    "EfficiencySpec",
    "GpuSpec",
    "ModelSpec",
    "Profile",
    "ProfileError",
    "list_profiles",
    "load_profile",
]

DEFAULT_PROFILE = "a40-qwen2.5-7b"


class ProfileError(ValueError):
    """A profile that cannot be loaded; the message is one line naming the file and the field."""


@dataclass(frozen=True)
class _Expect:
    """What a field expects, in words, for error messages."""

    text: str


PositiveNumber = Annotated[float, Field(gt=0), _Expect("a positive number")]
NonNegativeNumber = Annotated[float, Field(ge=0), _Expect("a number >= 0")]
PositiveInt = Annotated[int, Field(gt=0), _Expect("a positive integer")]
Fraction = Annotated[float, Field(gt=0, le=1), _Expect("a number in (0, 1]")]
FractionOrZero = Annotated[float, Field(ge=0, le=1), _Expect("a number in [0, 1]")]
Text = Annotated[str, Field(min_length=1), _Expect("a non-empty string")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSpec(_Strict):
    """One accelerator, from its public datasheet."""

    name: Text = Field(description="Marketing name of the GPU, e.g. 'NVIDIA A40'.")
    peak_bf16_flops_per_s: PositiveNumber = Field(
        description="Dense (no sparsity) BF16 tensor-core peak, FLOP/s."
    )
    peak_fp8_flops_per_s: Annotated[
        Annotated[float, Field(gt=0)] | None, _Expect("a positive number or null")
    ] = Field(
        default=None, description="Dense FP8 tensor-core peak, FLOP/s; null where the GPU has no FP8 units."
    )
    memory_bandwidth_bytes_per_s: PositiveNumber = Field(description="Peak device-memory bandwidth, bytes/s.")
    memory_bytes: PositiveNumber = Field(
        description="Device memory the driver reports as total (nvidia-smi), bytes; vLLM sizes from this."
    )


class ModelSpec(_Strict):
    """The served model's architecture: what sets FLOPs per token and bytes per step."""

    name: Text = Field(description="Served model name, as /v1/models lists it.")
    params: PositiveNumber = Field(description="Total parameter count, embeddings included.")
    num_layers: PositiveInt = Field(description="Transformer layers.")
    hidden_size: PositiveInt = Field(description="Hidden (model) dimension.")
    num_attention_heads: PositiveInt = Field(description="Query heads per layer.")
    num_kv_heads: PositiveInt = Field(description="Key/value heads per layer (GQA).")
    head_dim: PositiveInt = Field(description="Dimension of one attention head.")
    intermediate_size: PositiveInt = Field(description="MLP intermediate dimension.")
    vocab_size: PositiveInt = Field(description="Vocabulary size (rows of the embedding and LM head).")
    tie_word_embeddings: bool = Field(
        default=False, description="Whether the LM head shares the input embedding matrix."
    )
    weight_bytes_per_param: PositiveNumber = Field(
        description="Average bytes per stored parameter (2 for bf16; about 1 for FP8 checkpoints)."
    )
    kv_bytes_per_element: PositiveNumber = Field(description="Bytes per cached K or V element (2 for bf16).")
    matmul_dtype: Literal["bf16", "fp8"] = Field(
        default="bf16", description="Data type the linear layers run in: selects the GPU peak they use."
    )
    max_model_len: PositiveInt = Field(description="Context length vLLM serves by default for this model.")

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights read by every forward pass."""
        return self.params * self.weight_bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """KV cache bytes one token occupies: K and V, every layer, every KV head."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_bytes_per_element

    @property
    def embedding_params(self) -> float:
        """Parameters in the vocabulary matrices (one when tied, two otherwise)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)


class EfficiencySpec(_Strict):
    """Fractions of the datasheet peaks the kernels reach: the fitted part of the model."""

    prefill_matmul: Fraction = Field(description="Linear layers' share of peak FLOP/s.")
    attention: Fraction = Field(description="Attention kernels' share of the BF16 peak FLOP/s.")
    decode_bandwidth: Fraction = Field(
        description="Share of peak bandwidth for streaming weights and KV writes."
    )
    kv_read: Fraction = Field(description="Share of peak bandwidth for attention reading the KV cache.")
    compute_memory_overlap: FractionOrZero = Field(
        description=(
            "Share of the shorter of compute and memory time hidden under the longer: "
            "1 is the ideal roofline max(compute, memory), 0 is their sum."
        )
    )


class Profile(_Strict):
    """A GPU + model pair with the efficiencies that make its step times match measurements."""

    description: Text = Field(description="One line: what this profile is and how it was calibrated.")
    gpu: GpuSpec
    model: ModelSpec
    efficiency: EfficiencySpec
    step_overhead_s: NonNegativeNumber = Field(
        description="Fixed time per engine step (scheduling, input preparation, sampling, launches), s."
    )
    activation_reserve_bytes: NonNegativeNumber = Field(
        description="Memory vLLM's profiling run keeps for activations, CUDA graphs and buffers, bytes."
    )
    output_token_overhead_s: NonNegativeNumber = Field(
        default=0.0,
        description="Time per sequence that samples a token in a step, outside the model: sampler and "
        "output processing, and streaming the token where the API server shares the engine's CPU, s.",
    )
    frontend_request_s: NonNegativeNumber = Field(
        default=0.0,
        description="Time the API server spends on each request before the engine sees it (HTTP, "
        "tokenization), s: a latency added to TTFT, not a queue.",
    )
    api_request_cpu_s: NonNegativeNumber = Field(
        default=0.0,
        description="CPU time one API server process spends on each request before the engine sees "
        "it (HTTP, JSON), s: a queue, one request at a time per process (tokenload.sim.apiserver).",
    )
    api_prompt_token_cpu_s: NonNegativeNumber = Field(
        default=0.0,
        description="CPU time one API server process spends per prompt token (tokenization), s: "
        "added to api_request_cpu_s.",
    )
    api_shares_engine_cpu: bool = Field(
        default=False,
        description="Whether the API server runs on the engine's CPU core (a CPU-only host, or a "
        "server pinned to one core): its CPU time per request is then taken from the engine's "
        "steps, and takes twice as long while the engine has work (tokenload.sim.apiserver).",
    )
    _name: str = PrivateAttr(default="")

    @property
    def name(self) -> str:
        """The shipped profile's name, or the file's stem."""
        return self._name


def _profiles_dir() -> Any:
    return resources.files("tokenload.sim").joinpath("profiles")


def list_profiles() -> list[str]:
    """Names of the profiles shipped with the package, sorted."""
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in _profiles_dir().iterdir()
        if entry.name.endswith(".yaml")
    )


def load_profile(name_or_path: str | Path = DEFAULT_PROFILE) -> Profile:
    """A shipped profile by name (``a40-qwen2.5-7b``) or a YAML file by path."""
    text_name = str(name_or_path)
    looks_like_path = (
        isinstance(name_or_path, Path) or "/" in text_name or text_name.endswith((".yaml", ".yml"))
    )
    if looks_like_path:
        path = Path(name_or_path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"profile {path}: cannot read: {exc.strerror or exc}") from exc
        return _parse(text, path.name)
    shipped = _profiles_dir().joinpath(f"{text_name}.yaml")
    if not shipped.is_file():
        raise ProfileError(f"unknown profile {text_name!r}; available: {', '.join(list_profiles())}")
    return _parse(shipped.read_text(encoding="utf-8"), f"{text_name}.yaml")


def _parse(text: str, label: str) -> Profile:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ProfileError(f"profile {label}: invalid YAML{where}: {problem}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"profile {label}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"profile {label}: {_describe(exc)}") from None
    profile._name = label.removesuffix(".yaml")
    return profile


def _describe(exc: ValidationError) -> str:
    """One error as 'dotted.field: expected X, got Y': an unknown field first (a misspelt key is
    also a missing one; the unknown one names both)."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(str(p) for p in err["loc"])
    field = ".".join(loc)
    if err["type"] == "extra_forbidden":
        allowed = _allowed_fields(loc[:-1])
        close = difflib.get_close_matches(loc[-1], allowed, n=1, cutoff=0.8)  # a typo, not a guess
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"{field}: unknown field{hint} (allowed: {', '.join(allowed)})"
    expected = _expected(loc) or err["msg"]
    if err["type"] == "missing":
        return f"{field}: missing (expected {expected})"
    return f"{field}: expected {expected}, got {err.get('input')!r}"


def _field_info(loc: tuple[str, ...]) -> Any:
    model: Any = Profile
    info = None
    for part in loc:
        if model is None or not hasattr(model, "model_fields") or part not in model.model_fields:
            return None
        info = model.model_fields[part]
        model = info.annotation if isinstance(info.annotation, type) else None
    return info


def _expected(loc: tuple[str, ...]) -> str | None:
    info = _field_info(loc)
    if info is None:
        return None
    for meta in info.metadata:
        if isinstance(meta, _Expect):
            return meta.text
    annotation = info.annotation
    if annotation is bool:
        return "true or false"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a mapping"
    if getattr(annotation, "__origin__", None) is Literal:
        return " or ".join(repr(a) for a in annotation.__args__)
    return None


def _allowed_fields(loc: tuple[str, ...]) -> list[str]:
    model: Any = Profile
    if loc:
        info = _field_info(loc)
        model = info.annotation if info is not None else None
    if model is None or not hasattr(model, "model_fields"):
        return []
    return list(model.model_fields)
