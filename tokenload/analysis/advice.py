"""The verdict labels, and what to do about each: data the diagnosis
(tokenload.analysis.diagnosis) attaches to every judged step and the reports print."""

from __future__ import annotations

__all__ = ["ADVICE", "BOTTLENECKS"]

BOTTLENECKS = (
    "none",
    "compute",
    "memory_bandwidth",
    "kv_capacity",
    "scheduler_limit",
    "frontend",
    "imbalance",
    "client",
    "errors",
    "unknown",
)

ADVICE: dict[str, list[str]] = {
    "none": ["Not saturated at this load: there is headroom; keep raising the load to find the knee."],
    "compute": [
        "Compute (FLOP/s) is the bound, mostly prefill: add replicas, a faster GPU, or tensor parallelism.",
        "Quantize (FP8 weights and activations) to raise FLOP/s; cap prompt length if long prompts dominate.",
        "Lower max_num_batched_tokens if TTFT matters more than throughput (smaller prefill chunks).",
    ],
    "memory_bandwidth": [
        "Decode is bound by memory bandwidth: quantize weights and the KV cache (FP8) to move fewer bytes.",
        "A GPU with more bandwidth (H200 over H100) or tensor parallelism splits the reads.",
        "Cap context length or concurrency if TPOT must stay under its SLO.",
    ],
    "kv_capacity": [
        "The KV cache is full: cap context length (max_model_len) or concurrency (max_num_seqs).",
        "Give the cache more memory: raise gpu_memory_utilization, an FP8 KV cache, a larger GPU, or TP.",
        "Enable prefix caching if prompts share prefixes.",
    ],
    "scheduler_limit": [
        "Running requests are pinned at the scheduler's cap while the KV cache has room: raise max_num_seqs.",
    ],
    "frontend": [
        "Time goes before the engine's queue (HTTP, tokenization, hand-over), not in prefill or decode: "
        "run more API server processes (vLLM --api-server-count) or give the server more CPU.",
        "Keep the load generator off the server's host; check the server's CPU before its GPU.",
    ],
    "imbalance": [
        "Some replicas are saturated while others have room: the router sends them more than they serve. "
        "Check its policy (session affinity, prefix-aware routing, weights), the replicas' sizes and "
        "health; a least-load policy evens it out.",
    ],
    "client": [
        "The load generator could not keep up: add workers (tokenload sweep --workers N) or cores; "
        "this step's latencies are not the server's.",
    ],
    "errors": ["Failures crossed the threshold: fix them first; latencies of a failing server mislead."],
    "unknown": [
        "The evidence cannot name the resource: rerun with the server's /metrics scraped (--metrics-url) "
        "and a step below this load, or pass --gpu-peaks; a step with a lost worker is not judged.",
    ],
}
