"""Per-step verdicts: which resource saturated, the evidence that decided, and what to do.

Labels: ``none`` (still scaling), ``compute`` (prefill-bound), ``memory_bandwidth``
(decode-bound), ``kv_capacity`` (the KV cache is full), ``scheduler_limit`` (running pinned at
a cap such as max_num_seqs while the cache has room), ``frontend`` (the API server in front of
the engine: HTTP, tokenization), ``client`` (the load generator could not keep up), ``errors``
(failures crossed their threshold). Input: the steps of ``summary.json``.

Steps are judged in order of load (concurrency, or target rate), whatever order they ran in (a
knee search bisects downwards): a step is compared with the step of the next lower load, and
latencies with the lowest-load step's.
"""

from __future__ import annotations

from typing import Any

from tokenload.analysis.thresholds import Thresholds

__all__ = ["ADVICE", "BOTTLENECKS", "diagnose_steps", "find_knee"]

BOTTLENECKS = (
    "none",
    "compute",
    "memory_bandwidth",
    "kv_capacity",
    "scheduler_limit",
    "frontend",
    "client",
    "errors",
)

ADVICE: dict[str, list[str]] = {
    "none": ["Not saturated at this load: there is headroom; keep raising the load to find the knee."],
    "compute": [
        "Prefill compute is the bound: add replicas, or a faster GPU, or tensor parallelism.",
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
    "client": [
        "The load generator could not keep up: add workers (tokenload sweep --workers N) or cores; "
        "this step's latencies are not the server's.",
    ],
    "errors": ["Failures crossed the threshold: fix them first; latencies of a failing server mislead."],
}


def _g(d: dict[str, Any] | None, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _ev(metric: str, value: Any, rule: str) -> dict[str, Any]:
    return {"metric": metric, "value": value, "rule": rule}


def _saturation(
    step: dict[str, Any], prev: dict[str, Any] | None, base: dict[str, Any], th: Thresholds
) -> list[dict]:
    """Evidence that this step is saturated (empty: it is not)."""
    ev = []
    eff = None
    judged = (
        (_completed(prev) >= th.min_completed and _completed(step) >= th.min_completed) if prev else False
    )
    if prev is not None and (judged or _g(step, "server", "generation_tokens", "rate_per_s")):
        load_prev, load = _load(prev), _load(step)
        (t_prev, _), (t, source) = _throughput(prev), _throughput(step)
        if load_prev and load and load > load_prev and t_prev > 0:
            eff = (t / t_prev - 1.0) / (load / load_prev - 1.0)
            if eff < th.scaling_efficiency:
                ev.append(
                    _ev(
                        source,
                        round(t, 1),
                        f"grew {t / t_prev:.2f}x for {load / load_prev:.2f}x the load: scaling efficiency "
                        f"{eff:.2f} < {th.scaling_efficiency}",
                    )
                )
    # Latency growth alone (prefills of simultaneous arrivals sharing a step) is saturation only
    # once the throughput stops keeping pace with the load.
    for m in ("ttft_ms", "tpot_ms"):
        v, v0 = _g(step, m, "p50"), _g(base, m, "p50")
        if v and v0 and v / v0 > th.latency_growth and (eff is None or eff < th.scaling_with_latency):
            ev.append(
                _ev(f"{m} p50", round(v, 2), f"{v / v0:.1f}x its unloaded {v0:.1f} > {th.latency_growth}x")
            )
    # Queueing alone (a burst of arrivals waiting a step or two for the token budget) likewise.
    waiting = _g(step, "server", "requests_waiting", "mean") or 0
    if waiting > th.waiting_mean and (eff is None or eff < th.scaling_with_latency):
        ev.append(
            _ev(
                "requests_waiting mean",
                round(waiting, 2),
                f"> {th.waiting_mean}",
            )
        )
    return ev


def _which(
    step: dict[str, Any], base: dict[str, Any], th: Thresholds, peaks: dict[str, float] | None
) -> tuple[str, list[dict]]:
    kv_max = _g(step, "server", "kv_cache_usage_ratio", "max")
    preempt = _g(step, "server", "preemptions", "increase") or 0
    waiting = _g(step, "server", "requests_waiting", "mean") or 0
    kv_mean = _g(step, "server", "kv_cache_usage_ratio", "mean")
    run_mean = _g(step, "server", "requests_running", "mean")
    # Full for admission: at the threshold, or with less room left than one running request holds.
    per_request = kv_mean / run_mean if kv_mean is not None and run_mean else None
    kv_full = kv_max is not None and (
        kv_max >= th.kv_full_ratio or (per_request is not None and 1.0 - kv_max < per_request)
    )
    if preempt > 0 or (kv_full and waiting > th.waiting_mean):
        rule = f">= {th.kv_full_ratio}"
        if per_request is not None and kv_max is not None and kv_max < th.kv_full_ratio:
            rule = f"leaves {1 - kv_max:.3f} free, less than one running request's {per_request:.3f}"
        ev = [_ev("kv_cache_usage_ratio max", None if kv_max is None else round(kv_max, 3), rule)]
        if preempt:
            ev.append(_ev("preemptions", preempt, "> 0: requests evicted and recomputed"))
        if waiting > th.waiting_mean:
            ev.append(
                _ev("requests_waiting mean", round(waiting, 2), f"> {th.waiting_mean}: queued for capacity")
            )
        q = _g(step, "server", "queue_time_ms", "mean")
        if q is not None:
            ev.append(_ev("queue_time_ms mean", round(q, 1), "time waiting for a slot"))
        return "kv_capacity", ev
    run_max = _g(step, "server", "requests_running", "max")
    conc = step.get("concurrency")
    if (
        run_max
        and run_mean is not None
        and waiting > th.waiting_mean
        and (run_max - run_mean) <= th.pinned_spread * run_max
        and (conc is None or run_max < conc)
    ):
        return "scheduler_limit", [
            _ev(
                "requests_running",
                {"max": run_max, "mean": round(run_mean, 2)},
                "pinned below the offered load",
            ),
            _ev(
                "requests_waiting mean", round(waiting, 2), f"> {th.waiting_mean} while the KV cache has room"
            ),
            _ev(
                "kv_cache_usage_ratio max",
                None if kv_max is None else round(kv_max, 3),
                f"< {th.kv_full_ratio}",
            ),
        ]
    # The API server in front of the engine: the server's TTFT goes mostly neither to its queue nor
    # to prefill, nothing waits, and the engine runs clearly fewer requests than the load offers.
    ttft = _g(step, "server", "ttft_ms", "mean")
    queue = _g(step, "server", "queue_time_ms", "mean")
    prefill_t = _g(step, "server", "prefill_time_ms", "mean")
    if (
        ttft
        and queue is not None
        and prefill_t is not None
        and waiting <= th.waiting_mean
        and conc
        and run_mean is not None
        and run_mean < th.frontend_running_share * conc
        and ttft - queue - prefill_t > th.frontend_share * ttft
    ):
        return "frontend", [
            _ev("server ttft_ms mean", round(ttft, 1), "arrival -> first token, server side"),
            _ev(
                "outside queue and prefill",
                round((ttft - queue - prefill_t) / ttft, 3),
                f"> {th.frontend_share} of the server's TTFT "
                f"(queue {queue:.1f} ms, prefill {prefill_t:.1f} ms)",
            ),
            _ev(
                "requests_running mean",
                round(run_mean, 1),
                f"< {th.frontend_running_share} x the {conc} users, with nothing waiting",
            ),
        ]
    # Compute or bandwidth: the server's own FLOP and byte estimates against the GPU's peaks
    # decide when both are known, as a roofline does: the resource run closer to its peak binds.
    # (Latency growth cannot tell them apart under chunked prefill: a new request's prefill rides
    # in the running batch's step, so TTFT grows with the decode step as much as TPOT does.)
    # Otherwise, or when the GPU is mostly idle, which latency grew more.
    span = step.get("measured_s") or 0
    flops = _g(step, "server", "estimated_flops", "increase")
    rbytes = _g(step, "server", "estimated_read_bytes", "increase")
    if peaks and span and flops and rbytes:
        fu = flops / span / peaks["flops_per_s"]
        bu = rbytes / span / peaks["bytes_per_s"]
        ev = [
            _ev(
                "achieved FLOP/s share of peak",
                round(fu, 3),
                "vllm:estimated_flops_per_gpu_total rate / peak",
            ),
            _ev(
                "achieved bandwidth share of peak",
                round(bu, 3),
                "vllm:estimated_read_bytes_per_gpu_total rate / peak",
            ),
        ]
        if max(fu, bu) >= th.utilization_bound:
            return ("compute" if fu >= bu else "memory_bandwidth"), ev
    g_ttft = _growth(step, base, "ttft_ms")
    g_tpot = _growth(step, base, "tpot_ms")
    ev = [
        _ev("ttft_ms p50 growth", None if g_ttft is None else round(g_ttft, 2), "vs the first step"),
        _ev("tpot_ms p50 growth", None if g_tpot is None else round(g_tpot, 2), "vs the first step"),
    ]
    prefill, decode = (
        _g(step, "server", "prefill_time_ms", "mean"),
        _g(step, "server", "decode_time_ms", "mean"),
    )
    if prefill is not None and decode:
        ev.append(
            _ev(
                "prefill share of inference time", round(prefill / (prefill + decode), 3), "server histograms"
            )
        )
    if (g_ttft or 0) >= (g_tpot or 0):
        return "compute", ev
    return "memory_bandwidth", ev


def _throughput(step: dict[str, Any]) -> tuple[float, str]:
    """Output tokens/s over the step's window: the server's counter when scraped (exact for the
    window even when requests outlast the step), else the client's completed requests."""
    rate = _g(step, "server", "generation_tokens", "rate_per_s")
    if rate:
        return rate, "server generation tokens/s"
    return step.get("output_tokens_per_s") or 0.0, "output_tokens_per_s"


def _completed(step: dict[str, Any]) -> float:
    return (
        (step.get("requests_per_s") or 0.0) * (step.get("measured_s") or 0.0)
        if "requests_per_s" in step
        else 1e9
    )


def _growth(step: dict[str, Any], base: dict[str, Any], m: str) -> float | None:
    v, v0 = _g(step, m, "p50"), _g(base, m, "p50")
    return v / v0 if v and v0 else None


def diagnose_steps(
    steps: list[dict[str, Any]], thresholds: Thresholds | None = None, peaks: dict[str, float] | None = None
) -> list[dict[str, Any]]:
    """One verdict per step: ``{"bottleneck", "saturated", "evidence", "advice"}``. Steps with
    different workloads (a context sweep's prompt lengths) are judged as separate series."""
    th = thresholds or Thresholds()
    out: list[dict[str, Any]] = [{} for _ in steps]
    series: dict[Any, list[int]] = {}
    for i in _by_load(steps):
        series.setdefault(steps[i].get("prompt_tokens"), []).append(i)
    for order in series.values():
        _diagnose_series(steps, order, th, peaks, out)
    return out


def _diagnose_series(
    steps: list[dict[str, Any]],
    order: list[int],
    th: Thresholds,
    peaks: dict[str, float] | None,
    out: list[dict[str, Any]],
) -> None:
    base = steps[order[0]]
    for pos, i in enumerate(order):
        step = steps[i]
        prev = steps[order[pos - 1]] if pos else None
        reqs = step.get("requests") or {}
        total = (reqs.get("ok") or 0) + (reqs.get("failed") or 0)
        if "client_bound" in (step.get("flags") or []):
            c = step.get("client") or {}
            verdict = (
                "client",
                [
                    _ev("client cpu_percent_max", c.get("cpu_percent_max"), "> 90"),
                    _ev("client loop_lag_ms_p95", c.get("loop_lag_ms_p95"), "> 10 ms"),
                ],
            )
        elif total and (reqs.get("failed") or 0) / total > th.error_rate:
            by = reqs.get("by_failure_class") or {}
            dominant = max(by, key=by.get) if by else None
            verdict = (
                "errors",
                [
                    _ev(
                        "failed share",
                        round(reqs["failed"] / total, 3),
                        f"> {th.error_rate}; mostly {dominant}",
                    )
                ],
            )
        else:
            sat = _saturation(step, prev, base, th)
            if sat:
                name, why = _which(step, base, th, peaks)
                verdict = (name, sat + why)
            else:
                verdict = ("none", [])
        name, evidence = verdict
        verdict_out = {
            "bottleneck": name,
            "saturated": name != "none",
            "evidence": evidence,
            "advice": ADVICE[name],
        }
        if _completed(step) < th.min_completed and not _g(step, "server", "generation_tokens", "rate_per_s"):
            # Too few requests ended inside the step to judge its throughput: say so.
            verdict_out["low_sample"] = True
            evidence.append(
                _ev("requests completed in the step", round(_completed(step), 1),
                    f"< {th.min_completed}: lengthen --step-duration; throughput not judged")
            )  # fmt: skip
        out[i] = verdict_out


def _load(step: dict[str, Any]) -> float:
    c = step.get("target_rate_rps")
    if c is None:
        c = step.get("concurrency")
    return float(c or 0)


def _by_load(steps: list[dict[str, Any]]) -> list[int]:
    """Step positions in order of load; a stable sort keeps equal loads in run order."""
    return sorted(range(len(steps)), key=lambda i: _load(steps[i]))


def find_knee(steps: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The saturation point: the lowest-load saturated step whose next higher load is saturated
    too (one noisy step that the next load contradicts is not the knee), the highest-load
    unsaturated step below it, and what ran out."""
    last_good = None
    order = [i for i in _by_load(steps) if verdicts[i]["bottleneck"] != "client"]
    for pos, i in enumerate(order):
        v = verdicts[i]
        nxt = verdicts[order[pos + 1]]["bottleneck"] if pos + 1 < len(order) else None
        if v["bottleneck"] == "none":
            last_good = steps[i]
        elif nxt is None or nxt != "none":
            return {
                "step": i,
                "concurrency": steps[i].get("concurrency"),
                "target_rate_rps": steps[i].get("target_rate_rps"),
                "bottleneck": v["bottleneck"],
                "last_unsaturated_concurrency": last_good.get("concurrency") if last_good else None,
                "last_unsaturated_rate_rps": last_good.get("target_rate_rps") if last_good else None,
                "output_tokens_per_s_at_knee": steps[i].get("output_tokens_per_s"),
            }
    return None
