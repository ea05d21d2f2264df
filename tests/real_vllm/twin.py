"""The digital twin of the real-vLLM tier's server: the base profile ``tokenload calibrate``
starts from, and the engine settings vLLM's CPU build runs the tiny model with.

The model part is the tiny model's own shape (``model.CONFIG``: parameter count worked out from
it). The "GPU" part is a CPU core, which has no datasheet bf16 tensor peak: the figures below are
nominal scales (torch's bf16 GEMM at the model's own shapes measured 1.3-2.5 GFLOP/s on one core
of the 2-core EPYC this was written on; vLLM's CPU kernels run its prefill at about 4 GFLOP/s of
the model's matmul work), so the efficiencies fitted against them are relative to those scales,
not shares of a physical peak.
"""

from __future__ import annotations

from typing import Any

from tests.real_vllm.model import CONFIG

#: vLLM 0.32's CPU defaults for the OpenAI server (engine/arg_utils.py: max_num_seqs 128,
#: max_num_batched_tokens 2048; chunked prefill and prefix caching on), the tier's block size
#: and the roomy server's 512 blocks.
SIM_ARGS = (
    "--max-num-seqs 128 --max-num-batched-tokens 2048 --block-size 128 --num-gpu-blocks 512 "
    "--max-model-len 2048 --enable-prefix-caching"
)


def tiny_params() -> int:
    """Parameters of the tiny Llama: tied embedding, attention with GQA, a gated MLP, RMSNorms."""
    h, inter, layers = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["num_hidden_layers"]
    q = CONFIG["num_attention_heads"] * CONFIG["head_dim"]
    kv = CONFIG["num_key_value_heads"] * CONFIG["head_dim"]
    attention = h * q + 2 * h * kv + q * h
    mlp = 3 * h * inter
    per_layer = attention + mlp + 2 * h
    return CONFIG["vocab_size"] * h + layers * per_layer + h


def kv_bytes_per_token() -> int:
    """KV-cache bytes one token of context holds: keys and values, every layer, bf16."""
    return 2 * CONFIG["num_hidden_layers"] * CONFIG["num_key_value_heads"] * CONFIG["head_dim"] * 2


#: The least rise of a one-user TPOT across a context sweep that is taken as measured: 1 % of
#: the fastest. A definition, not fitted: the same low-load step measured twice in one bench run
#: of a quiet host moved 0-2 % in TPOT p50 (the validation staircase's 2-user step, 3.78 and
#: 3.78 ms, 3.71 and 3.78 ms; bench/RESULTS.md, twin_vllm, 2026-12-07). It decides only a sweep
#: flatter than that; a steeper one bounds the KV reads' cost by its own rise.
TPOT_RESOLUTION = 0.01


def host_scales(context_steps: list[dict[str, Any]], api_token_s: float = 0.0) -> tuple[float, float]:
    """Nominal peak FLOP/s and bandwidth for the host the server ran on, from a context sweep at
    one user (its steps from ``summary.json``). A CPU core has no datasheet, and the hosts
    differ: one core of the first host ran torch's bf16 GEMM at the model's shapes at 1.3-2.5
    GFLOP/s, a later one at 171-400 (bench/RESULTS.md, "The machine changed under the twin").
    Fitting data only: the validation staircase is not read.

    FLOP/s: the scale at which the base prefill efficiency gives the sweep's own prefill time
    per token (between its shortest and longest prompt, TTFT p50). Bandwidth: the larger of two
    lower bounds. The weights' read at the base decode efficiency fits in the fastest TPOT p50;
    and the KV reads at the base ``kv_read`` efficiency cost no more than the TPOT rose across
    the sweep's contexts (its spread, at least :data:`TPOT_RESOLUTION` of the fastest): a host
    whose one-user TPOT does not grow with the context reads its KV cache faster than the first
    bound says, and the rest of its step is fixed time (``step_overhead_s``), not the weights'
    read. Without the second bound a flat sweep (vLLM's CPU build on a host whose caches hold
    the tiny model, 2026-12-07) had the weights' read take the whole one-user TPOT, priced each
    context token's KV at that slow scale and predicted a 12-user TPOT of 11.6 ms against 6.6.

    ``api_token_s``: the API server's time per prompt token where the profile carries it apart
    (``api_prompt_token_cpu_s``, read from the same sweep): the prefill's own time per token is
    then the TTFT's rise less that, or the API server's share would be counted twice."""
    ordered = sorted(context_steps, key=lambda st: int(st["prompt_tokens"]))
    lo, hi = ordered[0], ordered[-1]
    tokens = int(hi["prompt_tokens"]) - int(lo["prompt_tokens"])
    seconds = (hi["ttft_ms"]["p50"] - lo["ttft_ms"]["p50"]) / 1000.0 - api_token_s * tokens
    if seconds <= 0 or tokens <= 0:
        raise ValueError("the context sweep's longest prompt was not slower than its shortest")
    matmul_flops_per_token = 2 * (tiny_params() - CONFIG["vocab_size"] * CONFIG["hidden_size"])
    tpots = [st["tpot_ms"]["p50"] / 1000.0 for st in ordered]
    rise = max(max(tpots) - min(tpots), TPOT_RESOLUTION * min(tpots))
    eff = base_profile()["efficiency"]
    weights_bound = 2 * tiny_params() / (eff["decode_bandwidth"] * min(tpots))
    kv_bound = kv_bytes_per_token() * tokens / (eff["kv_read"] * rise)
    return tokens * matmul_flops_per_token / (eff["prefill_matmul"] * seconds), max(weights_bound, kv_bound)


def base_profile(scales: tuple[float, float] | None = None) -> dict[str, Any]:
    """The profile (as YAML data) calibrate starts from: starting efficiencies mid-range, on the
    nominal scales below or on ``scales`` (peak FLOP/s, bandwidth; :func:`host_scales`)."""
    flops, bandwidth = scales or (10.0e9, 10.0e9)
    return {
        "description": "tiny random Llama on vLLM's CPU build (tests/real_vllm): nominal CPU scales",
        "gpu": {
            "name": "CPU core (vLLM CPU build)",
            "peak_bf16_flops_per_s": flops,
            "peak_fp8_flops_per_s": None,
            "memory_bandwidth_bytes_per_s": bandwidth,
            "memory_bytes": 9.0e9,
        },
        "model": {
            "name": "tiny",
            "params": tiny_params(),
            "num_layers": CONFIG["num_hidden_layers"],
            "hidden_size": CONFIG["hidden_size"],
            "num_attention_heads": CONFIG["num_attention_heads"],
            "num_kv_heads": CONFIG["num_key_value_heads"],
            "head_dim": CONFIG["head_dim"],
            "intermediate_size": CONFIG["intermediate_size"],
            "vocab_size": CONFIG["vocab_size"],
            "tie_word_embeddings": CONFIG["tie_word_embeddings"],
            "weight_bytes_per_param": 2,
            "kv_bytes_per_element": 2,
            "matmul_dtype": "bf16",
            "max_model_len": 2048,
        },
        "efficiency": {
            "prefill_matmul": 0.5,
            "attention": 0.3,
            "decode_bandwidth": 0.6,
            "kv_read": 0.5,
            "compute_memory_overlap": 0.5,
        },
        "step_overhead_s": 0.005,
        "activation_reserve_bytes": 0,
    }
