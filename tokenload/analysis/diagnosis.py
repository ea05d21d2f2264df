"""Per-step verdicts: which resource saturated, the signal that decided, and what to do.

Labels: ``none`` (headroom: more load still buys throughput), ``compute`` (FLOP/s bound),
``memory_bandwidth`` (weights and KV reads bound), ``kv_capacity`` (the KV cache is full),
``scheduler_limit`` (running pinned at a cap such as max_num_seqs while the cache has room),
``frontend`` (the API server in front of the engine), ``client`` (the load generator could not
keep up), ``errors`` (failures crossed their threshold), ``unknown`` (not judged: a worker was
lost; or saturated with no resource the evidence can name -- ``saturated`` says which).
Input: the steps of ``summary.json``; only what a real server shows (client figures and
``/metrics``), and GPU peaks only when the user gave them.

The rules follow the engine (see the README's analysis section). A step's time is modelled as
``s(n) = a + b*n`` for ``n`` tokens per step, fitted on the step and the step of the next lower
load (``s``: the server's inter-token latency, one engine step; ``n``: vllm:iteration_tokens).
Throughput at a closed or open loop is ``n / s(n)``, so

* doubling the load, when the batch can grow by ``r`` (2, less when the KV cache cannot hold
  it, 1 when requests already wait), raises throughput by ``r*s(n)/s(r*n) - 1``: below
  ``saturation_gain`` the step is saturated (the ground truth's own definition);
* of a saturated step, each resource relaxed by 2x is predicted as the oracle measures it: FLOP/s
  shortens the compute part of ``s``, bandwidth the memory part (the fixed ``a``, weights read
  every step, and the decode tokens' KV reads, ``kv_read_equiv_tokens``), KV blocks or
  max_num_seqs let the batch grow; the largest predicted gain names the bottleneck.

Steps are judged in order of load (concurrency, or target rate), whatever order they ran in (a
knee search bisects downwards). The rules are the table ``RULES``, in the order they are tried.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokenload.analysis.thresholds import Thresholds

__all__ = ["ADVICE", "BOTTLENECKS", "RULES", "StepSignals", "diagnose_steps", "find_knee", "signals"]

BOTTLENECKS = (
    "none",
    "compute",
    "memory_bandwidth",
    "kv_capacity",
    "scheduler_limit",
    "frontend",
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


def _g(d: dict[str, Any] | None, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _ev(metric: str, value: Any, rule: str) -> dict[str, Any]:
    return {"metric": metric, "value": value, "rule": rule}


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


@dataclass(frozen=True, slots=True)
class StepSignals:
    """What the rules read of one step (and the step of the next lower load): each a figure a
    real server or the client shows, None when it did not."""

    load: float
    prev_load: float | None
    closed_loop: bool
    throughput: float  # output tokens/s
    throughput_source: str
    prev_throughput: float | None
    step_ms: float | None  # one engine step: the server's inter-token latency (mean)
    step_source: str
    prev_step_ms: float | None
    tokens_per_step: float | None
    prev_tokens_per_step: float | None
    ref_step_ms: float | None  # the lowest-load step of the series
    ref_tokens_per_step: float | None
    decode_share: float | None  # of the tokens computed, the generated ones
    context_tokens: float | None  # mean tokens a decode token attends to
    running_mean: float | None
    running_max: float | None
    prev_running_max: float | None
    waiting_mean: float
    kv_mean: float | None
    kv_max: float | None
    preemptions: float
    flops_share: float | None  # of the GPU's peak, with --gpu-peaks and the server's counters
    bytes_share: float | None

    @property
    def load_growth(self) -> float | None:
        return self.load / self.prev_load if self.prev_load else None

    @property
    def efficiency(self) -> float | None:
        """Throughput growth over load growth since the step below (1.0 = perfect scaling)."""
        g = self.load_growth
        if g is None or g <= 1 or not self.prev_throughput:
            return None
        return (self.throughput / self.prev_throughput - 1.0) / (g - 1.0)

    def line(self) -> tuple[float, float] | None:
        """``(a, b)`` of ``s(n) = a + b*n`` through this step and the reference below it (ms,
        ms/token): the step below, or the lowest-load one when the batch did not grow since."""
        s1, s2, n1, n2 = self.prev_step_ms, self.step_ms, self.prev_tokens_per_step, self.tokens_per_step
        if n1 is not None and n2 and n2 <= n1 * 1.05 and self.ref_tokens_per_step is not None:
            s1, n1 = self.ref_step_ms, self.ref_tokens_per_step
        if None in (s1, s2, n1, n2) or not n2:
            return None
        if n2 <= n1 * 1.05:  # type: ignore[operator]
            return None  # the batch did not grow: no slope to see
        b = max(0.0, (s2 - s1) / (n2 - n1))  # type: ignore[operator]
        a = max(0.0, s2 - b * n2)  # type: ignore[operator]
        return a, b


def _step_ms(step: dict[str, Any]) -> tuple[float | None, str]:
    for path, name in (
        (("server", "itl_ms", "mean"), "server itl_ms mean"),
        (("itl_ms", "mean"), "client itl_ms mean"),
        (("tpot_ms", "p50"), "client tpot_ms p50"),
    ):
        v = _g(step, *path)
        if v:
            return float(v), name
    return None, "no inter-token latency"


def _tokens_per_step(step: dict[str, Any], step_ms: float | None) -> tuple[float | None, float | None]:
    """Tokens per engine step and the generated share of them."""
    gen = _g(step, "server", "generation_tokens", "rate_per_s")
    prompt = _g(step, "server", "prompt_tokens", "rate_per_s")
    hits = _g(step, "server", "prefix_cache_hits", "rate_per_s") or 0.0
    computed = None if gen is None or prompt is None else gen + max(0.0, prompt - hits)
    share = gen / computed if computed else None
    n = _g(step, "server", "iteration_tokens", "mean")
    if n:
        return float(n), share
    if computed and step_ms:
        return computed * step_ms / 1000.0, share  # a busy engine: one step after another
    return None, share


def _throughput(step: dict[str, Any]) -> tuple[float, str]:
    """Output tokens/s over the step's window: the server's counter when scraped (exact for the
    window even when requests outlast the step), else the client's completed requests."""
    rate = _g(step, "server", "generation_tokens", "rate_per_s")
    if rate:
        return rate, "server generation tokens/s"
    return step.get("output_tokens_per_s") or 0.0, "output_tokens_per_s"


def signals(
    step: dict[str, Any],
    prev: dict[str, Any] | None,
    peaks: dict[str, float] | None,
    base: dict[str, Any] | None = None,
) -> StepSignals:
    """The signals of ``step`` (``prev``: the step of the next lower load in its series,
    ``base``: its lowest-load step)."""
    t, source = _throughput(step)
    s, s_source = _step_ms(step)
    n, share = _tokens_per_step(step, s)
    ps, pn, pt = None, None, None
    if prev is not None:
        ps, _ = _step_ms(prev)
        pn, _ = _tokens_per_step(prev, ps)
        pt = _throughput(prev)[0]
    rs, rn = None, None
    if base is not None and base is not step:
        rs, _ = _step_ms(base)
        rn, _ = _tokens_per_step(base, rs)
    rps = step.get("requests_per_s") or 0.0
    ctx = None
    if rps:
        ctx = (step.get("input_tokens_per_s") or 0.0) / rps + (
            step.get("output_tokens_per_s") or 0.0
        ) / rps / 2
    span = step.get("measured_s") or 0
    flops = _g(step, "server", "estimated_flops", "increase")
    rbytes = _g(step, "server", "estimated_read_bytes", "increase")
    fu = bu = None
    if peaks and span and flops and rbytes:
        fu = flops / span / peaks["flops_per_s"]
        bu = rbytes / span / peaks["bytes_per_s"]
    return StepSignals(
        load=_load(step),
        prev_load=_load(prev) if prev is not None else None,
        closed_loop=step.get("target_rate_rps") is None,
        throughput=t,
        throughput_source=source,
        prev_throughput=pt,
        step_ms=s,
        step_source=s_source,
        prev_step_ms=ps,
        tokens_per_step=n,
        prev_tokens_per_step=pn,
        ref_step_ms=rs,
        ref_tokens_per_step=rn,
        decode_share=share,
        context_tokens=ctx,
        running_mean=_g(step, "server", "requests_running", "mean"),
        running_max=_g(step, "server", "requests_running", "max"),
        prev_running_max=_g(prev, "server", "requests_running", "max"),
        waiting_mean=_g(step, "server", "requests_waiting", "mean") or 0.0,
        kv_mean=_g(step, "server", "kv_cache_usage_ratio", "mean"),
        kv_max=_g(step, "server", "kv_cache_usage_ratio", "max"),
        preemptions=_g(step, "server", "preemptions", "increase") or 0.0,
        flops_share=fu,
        bytes_share=bu,
    )


# --- the rules' shared reasoning ------------------------------------------------------------


def _kv_full(sig: StepSignals, th: Thresholds) -> bool:
    """Full for admission: at the threshold, or with less room left than one running request holds."""
    if sig.kv_max is None:
        return False
    per_request = sig.kv_mean / sig.running_mean if sig.kv_mean is not None and sig.running_mean else None
    return sig.kv_max >= th.kv_full_ratio or (per_request is not None and 1.0 - sig.kv_max < per_request)


def _kv_bound(sig: StepSignals, th: Thresholds) -> bool:
    return sig.preemptions > 0 or (_kv_full(sig, th) and sig.waiting_mean > th.waiting_mean)


def _plateau(sig: StepSignals, th: Thresholds) -> bool:
    """Running requests stopped growing across steps while the load grew and requests wait."""
    if sig.running_max is None or sig.prev_running_max is None or not sig.load_growth:
        return False
    grew = sig.running_max / sig.prev_running_max - 1 if sig.prev_running_max else float("inf")
    steady = sig.running_mean is None or sig.running_max - sig.running_mean <= 0.25 * sig.running_max
    return (
        sig.waiting_mean > th.waiting_mean
        and sig.load_growth >= th.plateau_load_growth
        and steady
        and (grew <= th.plateau_growth or grew < 0.25 * (sig.load_growth - 1))
    )


def _queued(sig: StepSignals, th: Thresholds) -> bool:
    """Requests wait for more than a passing moment: more load only lengthens the queue."""
    return sig.waiting_mean > max(th.waiting_mean, 0.1 * (sig.running_mean or 0.0))


def _grown(line: tuple[float, float], n: float, r: float) -> float:
    """Predicted throughput gain when the batch grows by ``r``."""
    a, b = line
    s = a + b * n
    return r * s / (a + b * r * n) - 1.0 if s > 0 else 0.0


def _batch_room(sig: StepSignals, th: Thresholds) -> tuple[float, str]:
    """How much the running batch can grow when the load doubles, and why."""
    if _queued(sig, th):
        return 1.0, f"requests already wait (mean {sig.waiting_mean:.2f})"
    if sig.kv_max is not None and sig.kv_max > 0:
        room = min(2.0, max(1.0, th.kv_full_ratio / sig.kv_max))
        if room < 2.0:
            return room, f"the KV cache holds {room:.2f}x the running batch (max usage {sig.kv_max:.3f})"
    return 2.0, "the batch can double"


def _split(sig: StepSignals, th: Thresholds, line: tuple[float, float]) -> tuple[float, float, str]:
    """Shares of the step's time spent on compute and on memory traffic, and how they were found."""
    if sig.flops_share is not None and sig.bytes_share is not None:
        c, m = sig.flops_share, sig.bytes_share
        return min(1.0, c), min(1.0, m), "achieved FLOP/s and bandwidth against --gpu-peaks"
    a, b = line
    n = sig.tokens_per_step or 0.0
    s = a + b * n
    if s <= 0:
        return 0.0, 0.0, "no step time"
    dec = sig.decode_share if sig.decode_share is not None else 0.5
    ctx = sig.context_tokens or 0.0
    # Per token: every token costs one unit of matmul; a decode token also reads its context's
    # KV cache, ctx / kv_read_equiv_tokens units. The fixed part (weights read) is memory.
    mem_units = dec * ctx / th.kv_read_equiv_tokens
    m_frac = mem_units / (1.0 + mem_units)
    per_token = b * n
    return per_token * (1 - m_frac) / s, (a + per_token * m_frac) / s, "step-time model"


def _faster(share: float) -> float:
    """Throughput gain when a part of the step taking ``share`` of it runs twice as fast."""
    return 1.0 / (1.0 - share / 2.0) - 1.0 if share < 2 else 0.0


#: A binding cap whose predicted gain is within this share of the best is named (tuned on the
#: verdict grid's seeds 1 and 11; bench/RESULTS.md quotes seeds it was not tuned on).
CAP_TIE_SHARE = 0.9


# --- the rule table ---------------------------------------------------------------------------

#: A rule: (signals, step, thresholds) -> (label, evidence) when it decides, else None.
Rule = Callable[[StepSignals, dict[str, Any], Thresholds], "tuple[str, list[dict]] | None"]


def _rule_client(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, list[dict]] | None:
    flags = step.get("flags") or []
    if "client_bound" not in flags:
        return None
    c = step.get("client") or {}
    bound_by = c.get("bound_by")  # absent in summaries older than the coalesced-read check
    passed = ", ".join(bound_by) if bound_by else "CPU, loop lag or send lag"
    ev = [_ev("flag", "client_bound", f"the client's own {passed} passed its limit")]
    for k, rule in (
        ("cpu_percent_max", "> 90 % of the CPU the process may use (one core, or its cgroup quota)"),
        ("loop_lag_ms_p95", "> 10 ms"),
        ("send_lag_ms_p99", "> 10 ms"),
        ("coalesced_first_share", "> 0.01 of first tokens read late behind later ones"),
        ("coalesced_first_late_ms_max", "(k - 1) x TPOT: how late such a first token may be dated"),
    ):
        if c.get(k) is not None:
            ev.append(_ev(f"client {k}", round(c[k], 3), rule))
    return "client", ev


def _rule_queue_grew(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, list[dict]] | None:
    """A lagging client that still saw the server's queue grow: the client can only have offered
    less than was asked, so a queue that grows through the step (scraped from /metrics, no client
    timing) shows the server saturated whatever the client's lag; the resource is judged from the
    server's figures as for any step."""
    flags = step.get("flags") or []
    if "client_bound" not in flags or "oversaturated" not in flags:
        return None
    found = _rule_saturated(sig, step, th)
    if found is None or found[0] == "none":
        return None
    trend = step.get("waiting_trend") or {}
    head = _ev(
        "requests_waiting trend",
        trend.get("per_s"),
        "requests/s: the server's queue grew through the step although the client was behind "
        "(client_bound): saturated; client-side latencies of this step are not the server's",
    )
    return found[0], [head, *found[1]]


def _rule_worker_lost(
    sig: StepSignals, step: dict[str, Any], th: Thresholds
) -> tuple[str, list[dict]] | None:
    if "worker_lost" not in (step.get("flags") or []):
        return None
    return "unknown", [
        _ev("flag", "worker_lost", "a worker died during the step: its load was short; not judged")
    ]


def _rule_errors(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, list[dict]] | None:
    reqs = step.get("requests") or {}
    total = (reqs.get("ok") or 0) + (reqs.get("failed") or 0)
    if not total or (reqs.get("failed") or 0) / total <= th.error_rate:
        return None
    by = reqs.get("by_failure_class") or {}
    dominant = max(by, key=by.get) if by else "unclassified"
    return "errors", [
        _ev("failed share", round(reqs["failed"] / total, 3), f"> {th.error_rate}; mostly {dominant}")
    ]


def _saturation(sig: StepSignals, th: Thresholds) -> tuple[bool | None, list[dict]]:
    """Whether doubling the load would raise throughput by less than ``saturation_gain``."""
    line = sig.line()
    room, why = _batch_room(sig, th)
    if line is not None and sig.tokens_per_step:
        gain = _grown(line, sig.tokens_per_step, room)
        ev = [
            _ev(
                "predicted gain from 2x load",
                round(gain, 3),
                f"{'<' if gain < th.saturation_gain else '>='} {th.saturation_gain}: {why}; step time "
                f"{line[0]:.2f} + {line[1]:.4f} ms/token x {sig.tokens_per_step:.0f} tokens "
                f"({sig.step_source}, "
                "vllm:iteration_tokens_total)",
            )
        ]
        return gain < th.saturation_gain, ev
    if room == 1.0:
        return True, [_ev("requests_waiting mean", round(sig.waiting_mean, 2), f"> {th.waiting_mean}: {why}")]
    eff = sig.efficiency
    if eff is not None:
        return eff < th.scaling_efficiency, [
            _ev(
                sig.throughput_source,
                round(sig.throughput, 1),
                f"grew {sig.throughput / (sig.prev_throughput or 1):.2f}x for {sig.load_growth:.2f}x "
                f"the load: scaling efficiency {eff:.2f} {'<' if eff < th.scaling_efficiency else '>='} "
                f"{th.scaling_efficiency}",
            )
        ]
    return None, []


def _rule_saturated(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, list[dict]] | None:
    """Not saturated (``none``), or which resource: the largest predicted gain from relaxing one."""
    saturated, ev = _saturation(sig, th)
    if saturated is None:
        if _kv_bound(sig, th) or _plateau(sig, th):
            saturated = True
        else:
            return "none", [
                _ev(
                    "no step below and nothing waiting",
                    sig.load,
                    "first step of its series: no sign of saturation",
                )
            ]
    if not saturated:
        return "none", ev
    frontend = _frontend(sig, step, th)
    if frontend is not None:
        return "frontend", ev + frontend
    line = sig.line()
    n = sig.tokens_per_step or 0.0
    gains: dict[str, tuple[float, list[dict]]] = {}
    grow = min(2.0, (sig.running_mean + sig.waiting_mean) / sig.running_mean) if sig.running_mean else 2.0
    if _kv_bound(sig, th):
        # Evicted requests are recomputed: a cache twice the size keeps them, and the batch and
        # its contexts can double whatever waits.
        grow_kv = 2.0 if sig.preemptions else grow
        kv_ev = [
            _ev(
                "kv_cache_usage_ratio max",
                _r(sig.kv_max),
                f"full for admission (>= {th.kv_full_ratio} or no room for one more request)",
            )
        ]
        if sig.preemptions:
            kv_ev.append(_ev("preemptions", sig.preemptions, "> 0: requests evicted and recomputed"))
        kv_ev.append(
            _ev(
                "requests_waiting mean",
                round(sig.waiting_mean, 2),
                f"> {th.waiting_mean}: queued for capacity",
            )
        )
        gains["kv_capacity"] = (_grown(line, n, grow_kv) if line and n else 1.0, kv_ev)
    elif _plateau(sig, th):
        gains["scheduler_limit"] = (
            _grown(line, n, grow) if line and n else 1.0,
            [
                _ev(
                    "requests_running max",
                    {"this step": sig.running_max, "step below": sig.prev_running_max},
                    "a plateau: steady within the step, and grew "
                    f"{sig.running_max / (sig.prev_running_max or 1):.2f}x "
                    f"while the load grew {sig.load_growth:.2f}x",
                ),
                _ev(
                    "requests_waiting mean",
                    round(sig.waiting_mean, 2),
                    f"> {th.waiting_mean} while the KV cache has room",
                ),
            ],
        )
    if line is not None or (sig.flops_share is not None and sig.bytes_share is not None):
        c, m, how = _split(sig, th, line or (0.0, 0.0))
        gains["compute"] = (_faster(c), [_ev("compute share of step time", round(c, 3), how)])
        gains["memory_bandwidth"] = (_faster(m), [_ev("memory share of step time", round(m, 3), how)])
    if not gains:
        missing = _ev(
            "missing",
            "step time model",
            "needs the server's inter-token latency and tokens per step on this step and one below it "
            "(scrape /metrics), or --gpu-peaks with the FLOP/byte counters",
        )
        return "unknown", [*ev, missing]
    best = max(gains, key=lambda k: gains[k][0])
    # Near a tie the binding cap is named: the model's bandwidth share counts the step's fixed
    # overhead as memory time, so it overstates what more bandwidth buys by about that much.
    cap = next((k for k in ("kv_capacity", "scheduler_limit") if k in gains), None)
    if cap is not None and gains[cap][0] >= CAP_TIE_SHARE * gains[best][0]:
        best = cap
    ranked = ", ".join(f"{k} {g:+.0%}" for k, (g, _) in sorted(gains.items(), key=lambda kv: -kv[1][0]))
    return best, ev + gains[best][1] + [
        _ev("predicted gain from relaxing each 2x", ranked, "the largest binds")
    ]


def _frontend(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> list[dict] | None:
    """The API server in front of the engine: the server's TTFT goes mostly neither to its queue
    nor to prefill, nothing waits, and the engine runs clearly fewer requests than the load offers."""
    ttft = _g(step, "server", "ttft_ms", "mean")
    queue = _g(step, "server", "queue_time_ms", "mean")
    prefill_t = _g(step, "server", "prefill_time_ms", "mean")
    # Closed loop only: a rate step's "concurrency" is its pool of users, not the load.
    conc = step.get("concurrency") if sig.closed_loop else None
    if not (
        ttft
        and queue is not None
        and prefill_t is not None
        and sig.waiting_mean <= th.waiting_mean
        and conc
        and sig.running_mean is not None
        and sig.running_mean < th.frontend_running_share * conc
        and ttft - queue - prefill_t > th.frontend_share * ttft
    ):
        return None
    return [
        _ev("server ttft_ms mean", round(ttft, 1), "arrival -> first token, server side"),
        _ev(
            "outside queue and prefill",
            round((ttft - queue - prefill_t) / ttft, 3),
            f"> {th.frontend_share} of the server's TTFT (queue {queue:.1f} ms, prefill {prefill_t:.1f} ms)",
        ),
        _ev(
            "requests_running mean",
            round(sig.running_mean, 1),
            f"< {th.frontend_running_share} x the {conc} users, with nothing waiting",
        ),
    ]


#: The rules in the order they are tried; the first that decides gives the verdict.
RULES: tuple[tuple[str, Rule], ...] = (
    ("server queue grew past a lagging client", _rule_queue_grew),
    ("client_bound flag", _rule_client),
    ("worker_lost flag", _rule_worker_lost),
    ("failed share", _rule_errors),
    ("saturation and the resource that binds", _rule_saturated),
)


def _first_rule(sig: StepSignals, step: dict[str, Any], th: Thresholds) -> tuple[str, str, list[dict]]:
    """The first rule of the table that decides: (its name, the label, the evidence)."""
    for rule_name, rule in RULES:
        found = rule(sig, step, th)
        if found is not None:
            return rule_name, found[0], found[1]
    raise AssertionError("the last rule always decides")


def _completed(step: dict[str, Any]) -> float:
    return (
        (step.get("requests_per_s") or 0.0) * (step.get("measured_s") or 0.0)
        if "requests_per_s" in step
        else 1e9
    )


def diagnose_steps(
    steps: list[dict[str, Any]], thresholds: Thresholds | None = None, peaks: dict[str, float] | None = None
) -> list[dict[str, Any]]:
    """One verdict per step: ``{"bottleneck", "saturated", "decided_by", "evidence", "advice"}``.
    Steps with different workloads (a context sweep's prompt lengths) are judged as separate
    series; steps not judged as server saturation (client-bound, lost worker) are no one's step
    below."""
    th = thresholds or Thresholds()
    out: list[dict[str, Any]] = [{} for _ in steps]
    series: dict[Any, list[int]] = {}
    for i in _by_load(steps):
        series.setdefault(steps[i].get("prompt_tokens"), []).append(i)
    for order in series.values():
        prev = base = None
        for i in order:
            step = steps[i]
            sig = signals(step, prev, peaks, base)
            rule_name, name, evidence = _first_rule(sig, step, th)
            verdict: dict[str, Any] = {
                "bottleneck": name,
                "saturated": name not in ("none", "client") and rule_name != "worker_lost flag",
                "decided_by": evidence[0]["metric"] if evidence else rule_name,
                "evidence": evidence,
                "advice": ADVICE[name],
            }
            if _completed(step) < th.min_completed and not _g(
                step, "server", "generation_tokens", "rate_per_s"
            ):
                verdict["low_sample"] = True
                evidence.append(
                    _ev("requests completed in the step", round(_completed(step), 1),
                        f"< {th.min_completed}: lengthen --step-duration; throughput not judged")
                )  # fmt: skip
            out[i] = verdict
            if name not in ("client",) and rule_name != "worker_lost flag":
                prev = step
                base = base or step
    return out


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
    # Steps not judged as the server's (the client could not keep up, a worker was lost) are skipped.
    order = [
        i
        for i in _by_load(steps)
        if verdicts[i]["bottleneck"] != "client"
        and not (verdicts[i]["bottleneck"] == "unknown" and not verdicts[i]["saturated"])
    ]
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
