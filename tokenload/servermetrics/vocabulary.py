"""One canonical vocabulary across server versions.

Each canonical quantity maps to the family that carries it in vLLM V1 (0.8 and later, including
0.32), vLLM V0 (0.6 series) and SGLang. Family names are as ``prometheus_client``'s parser
reports them: a counter family drops ``_total`` (its samples keep it); histograms keep their
name. Units are the server's (seconds, ratios 0..1, counts); reports convert to ms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CANONICAL", "FAMILY_INDEX", "Quantity", "family_names"]

Kind = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True, slots=True)
class Quantity:
    name: str
    kind: Kind
    help: str
    #: (family name, required label values) per server generation.
    vllm_v1: tuple[str, dict[str, str]] | None = None
    vllm_v0: tuple[str, dict[str, str]] | None = None
    sglang: tuple[str, dict[str, str]] | None = None

    def sources(self) -> list[tuple[str, tuple[str, dict[str, str]]]]:
        return [
            (g, s)
            for g, s in (("vllm_v1", self.vllm_v1), ("vllm_v0", self.vllm_v0), ("sglang", self.sglang))
            if s
        ]


def _q(
    name: str,
    kind: Kind,
    help: str,
    v1: str | None = None,
    v0: str | None = None,
    sg: str | None = None,
    **labels: str,
) -> Quantity:
    return Quantity(
        name,
        kind,
        help,
        (v1, dict(labels)) if v1 else None,
        (v0, {}) if v0 else None,
        (sg, {}) if sg else None,
    )


CANONICAL: dict[str, Quantity] = {
    q.name: q
    for q in (
        _q(
            "kv_cache_usage_ratio",
            "gauge",
            "KV cache in use, 0..1",
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "sglang:token_usage",
        ),
        _q(
            "requests_running",
            "gauge",
            "requests in the running batch",
            "vllm:num_requests_running",
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
        ),
        _q(
            "requests_waiting",
            "gauge",
            "requests in the waiting queue",
            "vllm:num_requests_waiting",
            "vllm:num_requests_waiting",
            "sglang:num_queue_reqs",
        ),
        _q(
            "requests_waiting_capacity",
            "gauge",
            "waiting requests held back for capacity: KV blocks, or a max_num_seqs slot",
            "vllm:num_requests_waiting_by_reason",
            reason="capacity",
        ),
        _q(
            "requests_swapped",
            "gauge",
            "requests swapped to CPU (V0 only)",
            None,
            "vllm:num_requests_swapped",
        ),
        _q("preemptions", "counter", "preemptions", "vllm:num_preemptions", "vllm:num_preemptions"),
        _q(
            "prompt_tokens",
            "counter",
            "prefill tokens processed",
            "vllm:prompt_tokens",
            "vllm:prompt_tokens",
            "sglang:prompt_tokens",
        ),
        _q(
            "generation_tokens",
            "counter",
            "tokens generated",
            "vllm:generation_tokens",
            "vllm:generation_tokens",
            "sglang:generation_tokens",
        ),
        _q("request_success", "counter", "requests finished", "vllm:request_success", "vllm:request_success"),
        _q("prefix_cache_queries", "counter", "prefix cache queries, tokens", "vllm:prefix_cache_queries"),
        _q("prefix_cache_hits", "counter", "prefix cache hits, tokens", "vllm:prefix_cache_hits"),
        _q(
            "prefix_cache_hit_ratio",
            "gauge",
            "prefix cache hit rate as the server computes it",
            None,
            "vllm:gpu_prefix_cache_hit_rate",
            "sglang:cache_hit_rate",
        ),
        _q(
            "ttft_s",
            "histogram",
            "time to first token, server side",
            "vllm:time_to_first_token_seconds",
            "vllm:time_to_first_token_seconds",
            "sglang:time_to_first_token_seconds",
        ),
        _q(
            "itl_s",
            "histogram",
            "inter-token latency, server side",
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds",
        ),
        _q(
            "tpot_s",
            "histogram",
            "mean time per output token of each request",
            "vllm:request_time_per_output_token_seconds",
        ),
        _q(
            "e2e_s",
            "histogram",
            "end-to-end request latency, server side",
            "vllm:e2e_request_latency_seconds",
            "vllm:e2e_request_latency_seconds",
            "sglang:e2e_request_latency_seconds",
        ),
        _q(
            "queue_time_s",
            "histogram",
            "time in the waiting queue",
            "vllm:request_queue_time_seconds",
            "vllm:request_queue_time_seconds",
            "sglang:queue_time_seconds",
        ),
        _q(
            "prefill_time_s",
            "histogram",
            "time in prefill",
            "vllm:request_prefill_time_seconds",
            "vllm:request_prefill_time_seconds",
        ),
        _q(
            "decode_time_s",
            "histogram",
            "time in decode",
            "vllm:request_decode_time_seconds",
            "vllm:request_decode_time_seconds",
        ),
        _q(
            "inference_time_s",
            "histogram",
            "time running (prefill + decode)",
            "vllm:request_inference_time_seconds",
            "vllm:request_inference_time_seconds",
        ),
        _q(
            "iteration_tokens",
            "histogram",
            "tokens per engine step",
            "vllm:iteration_tokens_total",
            "vllm:iteration_tokens_total",
        ),
        _q("estimated_flops", "counter", "estimated FLOPs per GPU", "vllm:estimated_flops_per_gpu"),
        _q(
            "estimated_read_bytes",
            "counter",
            "estimated bytes read per GPU",
            "vllm:estimated_read_bytes_per_gpu",
        ),
    )
}

#: family name -> [(canonical quantity, required labels)]
FAMILY_INDEX: dict[str, list[tuple[Quantity, dict[str, str]]]] = {}
for _quantity in CANONICAL.values():
    for _gen, (_family, _labels) in _quantity.sources():
        entry = (_quantity, _labels)
        if entry not in FAMILY_INDEX.setdefault(_family, []):
            FAMILY_INDEX[_family].append(entry)


# Older SGLang releases named the per-token latency histogram like vLLM V0 did.
FAMILY_INDEX["sglang:time_per_output_token_seconds"] = [(CANONICAL["itl_s"], {})]


def family_names() -> set[str]:
    return set(FAMILY_INDEX)
