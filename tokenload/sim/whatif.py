"""What-if changes for ``tokenload plan --set``: one changed setting (or several together) of the
emulated server, applied to its profile and engine configuration.

    max_num_seqs=512                 an engine argument (any of EngineConfig's but seed/output_len)
    num_gpu_blocks=40000             ... a KV cache of this many blocks (more KV memory)
    gpu_memory_utilization=0.95      ... or a larger share of the GPU for it
    kv_cache_dtype=fp8               the KV cache in FP8 (1 byte per element; vLLM's --kv-cache-dtype)
    gpu=h100-llama3.1-8b             another GPU: that profile's datasheet figures (peaks, bandwidth,
                                     memory); the efficiencies and step overhead stay this profile's,
                                     the fitted part, which belongs to the serving software
    max_num_seqs=512,kv_cache_dtype=fp8   several at once: one variant

A change is a prediction of the same cost model, not a measurement: its answer is only as good as
the profile's form (see docs/emulator.md's twin section for what was validated). Tensor parallelism is
refused: the profiles model one GPU and carry no interconnect figures to cost its all-reduces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tokenload.sim.engine import EngineConfig
from tokenload.sim.profile import Profile, ProfileError, load_profile

__all__ = ["ENGINE_KEYS", "Change", "WhatIfError", "apply_change", "parse_change"]

#: Engine arguments a change may set (EngineConfig's fields but the run's seed and output lengths).
ENGINE_KEYS = tuple(k for k in EngineConfig.model_fields if k not in ("seed", "output_len"))
_PROFILE_KEYS = ("kv_cache_dtype", "gpu")
_KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bf16": 2, "fp16": 2, "auto": None}
_REFUSED = {
    "tensor_parallel_size": "the profiles model one GPU and carry no interconnect figures to cost "
    "tensor parallelism's all-reduces",
}


class WhatIfError(ValueError):
    """A change that cannot be applied; the message is one line naming it."""


@dataclass(frozen=True, slots=True)
class Change:
    """One what-if variant: the settings it changes, as given."""

    text: str
    settings: tuple[tuple[str, str], ...]

    def to_dict(self) -> dict[str, str]:
        return dict(self.settings)


def parse_change(text: str) -> Change:
    """``KEY=VALUE[,KEY=VALUE...]``; WhatIfError naming what is wrong."""
    settings: list[tuple[str, str]] = []
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        key, value = key.strip().replace("-", "_"), value.strip()
        if not sep or not key or not value:
            raise WhatIfError(f"--set {text}: expected KEY=VALUE[,KEY=VALUE...]")
        if key in _REFUSED:
            raise WhatIfError(f"--set {key}: not modelled: {_REFUSED[key]}")
        if key not in ENGINE_KEYS and key not in _PROFILE_KEYS:
            known = ", ".join((*ENGINE_KEYS, *_PROFILE_KEYS))
            raise WhatIfError(f"--set {key}: unknown setting (expected one of {known})")
        if any(k == key for k, _ in settings):
            raise WhatIfError(f"--set {text}: {key} given twice")
        settings.append((key, value))
    return Change(text, tuple(settings))


def apply_change(profile: Profile, config: EngineConfig, change: Change) -> tuple[Profile, EngineConfig]:
    """The profile and engine configuration with ``change`` applied."""
    engine: dict[str, Any] = {}
    for key, value in change.settings:
        if key == "kv_cache_dtype":
            if value not in _KV_DTYPE_BYTES:
                raise WhatIfError(
                    f"--set kv_cache_dtype={value}: expected one of {', '.join(_KV_DTYPE_BYTES)}"
                )
            nbytes = _KV_DTYPE_BYTES[value]
            if nbytes is not None:
                model = profile.model.model_copy(update={"kv_bytes_per_element": nbytes})
                profile = profile.model_copy(update={"model": model})
        elif key == "gpu":
            try:
                other = load_profile(value)
            except ProfileError as exc:
                raise WhatIfError(f"--set gpu={value}: {exc}") from None
            profile = profile.model_copy(update={"gpu": other.gpu})
        else:
            engine[key] = value
    if engine:
        try:
            config = EngineConfig(**{**config.model_dump(), **engine})
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(x) for x in err["loc"])
            raise WhatIfError(f"--set {key}={engine.get(key, '')}: {err['msg']}") from None
    return profile, config
