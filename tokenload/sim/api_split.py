"""The server's TTFT outside its engine, and what a context sweep says of the API server's time
per prompt token. Pure: from summary.json's steps.

vLLM times a request's TTFT from its arrival at the API server, its queue time from when the
engine took it in (V1: between steps, so the wait for a running step is not in it), and its
prefill from when the engine first scheduled it; what is neither queue nor prefill (the means of
``vllm:time_to_first_token_seconds``, ``vllm:request_queue_time_seconds`` and
``vllm:request_prefill_time_seconds`` over the step) is the API server's (HTTP, JSON, tokenizing
the prompt, handing it to the engine and the first token back) and, on V1 under load, the wait
for the engine's running step. At one user the engine
is idle while the API server reads the next request, so that time's growth with the prompt's
length is the API server's time per prompt token (tokenization, chiefly): the slope of the
one-user steps' outside time over their prompt lengths. That outside time is defined once, in
``tokenload.metrics.definitions.ttft_outside_engine_ms``.
"""

from __future__ import annotations

from typing import Any

from tokenload.metrics.definitions import ttft_outside_engine_ms

__all__ = ["api_prompt_token_s"]


def api_prompt_token_s(steps: list[dict[str, Any]]) -> tuple[float, list[tuple[int, float]]] | None:
    """The API server's seconds per prompt token from the one-user closed-loop steps (their
    outside time's least-squares slope over ``prompt_tokens``, at least 0), and the points
    (prompt tokens, outside ms) it was read from; None without two one-user steps of different
    prompt lengths that carry the server's split."""
    points = []
    for s in steps:
        outside = ttft_outside_engine_ms(s)
        if s.get("concurrency") == 1 and s.get("prompt_tokens") and outside is not None:
            points.append((int(s["prompt_tokens"]), outside))
    if len({n for n, _ in points}) < 2:
        return None
    mean_n = sum(n for n, _ in points) / len(points)
    mean_t = sum(t for _, t in points) / len(points)
    sxx = sum((n - mean_n) ** 2 for n, _ in points)
    sxy = sum((n - mean_n) * (t - mean_t) for n, t in points)
    return max(0.0, sxy / sxx / 1000.0), sorted(points)
