"""The emulator engine's settings (vLLM's engine arguments that shape scheduling and the KV
cache, and the emulator's own output-length draw), validated by pydantic."""

from __future__ import annotations

import math
import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["EngineConfig", "OutputLenConfig"]


class OutputLenConfig(BaseModel):
    """How long a response runs when the request does not set ``ignore_eos``: the token count
    at which the emulated model emits EOS (then capped by ``max_tokens``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    distribution: Literal["fixed", "uniform", "lognormal"] = Field(
        default="lognormal", description="Shape of the natural output length."
    )
    mean_tokens: float = Field(
        default=256.0, gt=0, description="Mean (fixed: the value) for fixed and lognormal."
    )
    sigma: float = Field(default=0.8, ge=0, description="Lognormal shape: standard deviation of log(length).")
    low_tokens: int = Field(default=1, ge=1, description="Uniform: smallest length.")
    high_tokens: int = Field(default=512, ge=1, description="Uniform: largest length.")

    @model_validator(mode="after")
    def _check_range(self) -> OutputLenConfig:
        if self.distribution == "uniform" and self.low_tokens > self.high_tokens:
            raise ValueError("output_len: low_tokens must not exceed high_tokens")
        return self

    def sample(self, rng: random.Random) -> int:
        """One natural output length, EOS included, at least 1."""
        if self.distribution == "fixed":
            return max(1, round(self.mean_tokens))
        if self.distribution == "uniform":
            return rng.randint(self.low_tokens, self.high_tokens)
        # mu such that the lognormal's mean is mean_tokens.
        mu = math.log(self.mean_tokens) - self.sigma**2 / 2
        return max(1, round(rng.lognormvariate(mu, self.sigma)))


class EngineConfig(BaseModel):
    """vLLM engine arguments the emulator honours; unset values take vLLM's defaults for the preset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: Literal["v1", "v0"] = Field(
        default="v1",
        description="v1: vLLM V1 scheduler (chunked prefill, mixed batches); v0: vLLM 0.6 (prefill-first).",
    )
    max_num_seqs: int = Field(default=256, gt=0, description="Most requests running at once.")
    max_num_batched_tokens: int | None = Field(
        default=None,
        gt=0,
        description="Tokens per step; default 2048 with chunked prefill, else max(max_model_len, 2048).",
    )
    enable_chunked_prefill: bool | None = Field(
        default=None, description="Split prompts across steps; default on for v1, off for v0."
    )
    block_size: int = Field(default=16, gt=0, description="Tokens per KV cache block.")
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Share of GPU memory vLLM may use."
    )
    num_gpu_blocks: int | None = Field(
        default=None, gt=0, description="KV cache blocks, overriding the size computed from the profile."
    )
    max_model_len: int | None = Field(
        default=None, gt=0, description="Context limit; default from the profile."
    )
    enable_prefix_caching: bool = Field(
        default=False, description="Reuse cached KV blocks of shared prefixes."
    )
    api_server_count: int = Field(
        default=1,
        gt=0,
        description="API server processes in front of the engine (vLLM's --api-server-count); "
        "matters where the profile gives the API server a CPU cost per request.",
    )
    seed: int = Field(default=0, description="Seeds output lengths and generated text.")
    output_len: OutputLenConfig = Field(default_factory=OutputLenConfig)

    @property
    def chunked_prefill(self) -> bool:
        if self.enable_chunked_prefill is not None:
            return self.enable_chunked_prefill
        return self.preset == "v1"
