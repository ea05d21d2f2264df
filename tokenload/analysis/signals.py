"""What the verdict rules read of a step: the figures a real server (``/metrics``) and the client
show, gathered once per step with the step of the next lower load and the series' lowest-load
step. Pure; nothing here judges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "FIRST_STEP_SIGNAL",
    "NOISE_SIGNAL",
    "PREDICTED_GAIN_SIGNAL",
    "StepSignals",
    "evidence",
    "load_of",
    "signals",
    "value_at",
]

#: What decides a series' first step with nothing waiting (tokenload.analysis.diagnosis): no sign
#: either way, so neither saturation nor measured room (tokenload.analysis.replicas reads it).
FIRST_STEP_SIGNAL = "no step below and nothing waiting"
#: What decides an open-loop step whose throughput fell short of the load's growth by less than
#: the Poisson noise of its few arrivals: no sign either way, as FIRST_STEP_SIGNAL.
NOISE_SIGNAL = "arrivals in the step and the step below"
#: What decides saturation where the step-time model predicts what twice the load would gain
#: (tokenload.analysis.diagnosis); its value is the predicted gain, the one a close call is near.
PREDICTED_GAIN_SIGNAL = "predicted gain from 2x load"


def evidence(metric: str, value: Any, rule: str) -> dict[str, Any]:
    """One item of a verdict's evidence: the signal, its value, and the rule it was read by."""
    return {"metric": metric, "value": value, "rule": rule}


def value_at(d: dict[str, Any] | None, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


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
    users: float | None = None  # a closed loop's concurrency
    engine_steps: float | None = None  # vllm:iteration_tokens_total's count over the step
    busy: float | None = None  # share of the window the engine was stepping (ITL x steps / window)
    flops_per_step: float | None = None  # the server's FLOP and byte counters, per engine step
    bytes_per_step: float | None = None
    fixed_bytes: float | None = None  # bytes a step reads whatever the batch (the weights)
    balance: float | None = None  # FLOP/byte machine balance, from --gpu-peaks
    ref_flops_per_step: float | None = None  # the lowest-load step's counters per engine step
    ref_bytes_per_step: float | None = None
    max_num_seqs: float | None = None  # the engine's cap on running requests, when the user gave it
    arrivals: float | None = None  # an open loop's expected arrivals in the measured window
    prev_arrivals: float | None = None

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


def _counter_rate(step: dict[str, Any], name: str) -> float | None:
    """A server counter's rate over the step: over the seconds its scrapes cover when the
    summary says it (``rate_per_s``), else its increase over the measured seconds."""
    rate = value_at(step, "server", name, "rate_per_s")
    if rate is not None:
        return rate
    inc, span = value_at(step, "server", name, "increase"), step.get("measured_s")
    return inc / span if inc is not None and span else None


def _scraped_s(step: dict[str, Any]) -> float | None:
    """The seconds the step's histogram counts cover: its scrapes' span when known, else its
    measured seconds (a Prometheus source, or a summary.json from before scraped_s)."""
    return value_at(step, "server", "scraped_s") or step.get("measured_s")


def _step_ms(step: dict[str, Any]) -> tuple[float | None, str]:
    """One engine step's mean time. Two upper bounds, the smaller taken: the server's mean
    inter-token latency (stretched by preemptions and prefill stalls) and the step's window over
    its engine steps (stretched by idle time)."""
    found: list[tuple[float, str]] = []
    count = value_at(step, "server", "iteration_tokens", "count")
    span = _scraped_s(step)
    if count and span:
        found.append((span * 1000.0 / count, "window / engine steps (vllm:iteration_tokens_total count)"))
    for path, name in (
        (("server", "itl_ms", "mean"), "server itl_ms mean"),
        (("itl_ms", "mean"), "client itl_ms mean"),
        (("tpot_ms", "p50"), "client tpot_ms p50"),
    ):
        v = value_at(step, *path)
        if v:
            found.append((float(v), name))
            break
    if not found:
        return None, "no inter-token latency"
    return min(found)


def _tokens_per_step(step: dict[str, Any], step_ms: float | None) -> tuple[float | None, float | None]:
    """Tokens per engine step and the generated share of them."""
    gen = value_at(step, "server", "generation_tokens", "rate_per_s")
    prompt = value_at(step, "server", "prompt_tokens", "rate_per_s")
    hits = value_at(step, "server", "prefix_cache_hits", "rate_per_s") or 0.0
    computed = None if gen is None or prompt is None else gen + max(0.0, prompt - hits)
    share = gen / computed if computed else None
    n = value_at(step, "server", "iteration_tokens", "mean")
    if n:
        return float(n), share
    if computed and step_ms:
        return computed * step_ms / 1000.0, share  # a busy engine: one step after another
    return None, share


def _throughput(step: dict[str, Any]) -> tuple[float, str]:
    """Output tokens/s over the step's window: the server's counter when scraped (exact for the
    window even when requests outlast the step), else the client's completed requests."""
    rate = value_at(step, "server", "generation_tokens", "rate_per_s")
    if rate:
        return rate, "server generation tokens/s"
    return step.get("output_tokens_per_s") or 0.0, "output_tokens_per_s"


def _context_tokens(step: dict[str, Any]) -> float | None:
    """The mean context a decode token attends to: a request's prompt and half its output, over
    the requests that ended in the step (``tokens_per_request``; summary.json before version 3:
    its token rates over its request rate, which then counted the same requests)."""
    per = step.get("tokens_per_request")
    if per:
        return (per.get("input") or 0.0) + (per.get("output") or 0.0) / 2
    rps = step.get("requests_per_s") or 0.0
    if not rps or "tokens_per_request" in step:
        return None
    return (step.get("input_tokens_per_s") or 0.0) / rps + (step.get("output_tokens_per_s") or 0.0) / rps / 2


def signals(
    step: dict[str, Any],
    prev: dict[str, Any] | None,
    peaks: dict[str, float] | None,
    base: dict[str, Any] | None = None,
    max_num_seqs: int | None = None,
) -> StepSignals:
    """The signals of ``step`` (``prev``: the step of the next lower load in its series,
    ``base``: its lowest-load step; ``max_num_seqs``: the engine's cap on running requests, only
    when the user gave it: vLLM's ``/metrics`` does not show it)."""
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
    ctx = _context_tokens(step)
    flops = _counter_rate(step, "estimated_flops")
    rbytes = _counter_rate(step, "estimated_read_bytes")
    fu = bu = None
    if peaks and flops and rbytes:
        fu = flops / peaks["flops_per_s"]
        bu = rbytes / peaks["bytes_per_s"]
    fps, bps = _per_engine_step(step)
    busy = None
    itl = value_at(step, "server", "itl_ms", "mean")
    count = value_at(step, "server", "iteration_tokens", "count")
    scraped = _scraped_s(step)
    if itl and count and scraped:
        busy = min(1.0, itl * count / (scraped * 1000.0))
    return StepSignals(
        load=load_of(step),
        prev_load=load_of(prev) if prev is not None else None,
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
        running_mean=value_at(step, "server", "requests_running", "mean"),
        running_max=value_at(step, "server", "requests_running", "max"),
        prev_running_max=value_at(prev, "server", "requests_running", "max"),
        waiting_mean=value_at(step, "server", "requests_waiting", "mean") or 0.0,
        kv_mean=value_at(step, "server", "kv_cache_usage_ratio", "mean"),
        kv_max=value_at(step, "server", "kv_cache_usage_ratio", "max"),
        preemptions=value_at(step, "server", "preemptions", "increase") or 0.0,
        flops_share=fu,
        bytes_share=bu,
        users=float(step["concurrency"])
        if step.get("target_rate_rps") is None and step.get("concurrency")
        else None,
        busy=busy,
        engine_steps=count,
        flops_per_step=fps,
        bytes_per_step=bps,
        fixed_bytes=_fixed_bytes(step, prev, base) if bps else None,
        balance=peaks["flops_per_s"] / peaks["bytes_per_s"] if peaks else None,
        ref_flops_per_step=_per_engine_step(base)[0] if base is not None and base is not step else None,
        ref_bytes_per_step=_per_engine_step(base)[1] if base is not None and base is not step else None,
        max_num_seqs=float(max_num_seqs) if max_num_seqs else None,
        arrivals=_arrivals(step),
        prev_arrivals=_arrivals(prev) if prev is not None else None,
    )


def _arrivals(step: dict[str, Any]) -> float | None:
    """An open loop's expected arrivals in the step's measured window (its rate times the
    window); None for a closed loop, whose users do not arrive at random."""
    rate, span = step.get("target_rate_rps"), step.get("measured_s")
    return rate * span if rate and span else None


def _per_engine_step(step: dict[str, Any]) -> tuple[float | None, float | None]:
    """The server's FLOP and byte counters over the step, per engine step."""
    count = value_at(step, "server", "iteration_tokens", "count")
    flops = value_at(step, "server", "estimated_flops", "increase")
    rbytes = value_at(step, "server", "estimated_read_bytes", "increase")
    if not count or not flops or not rbytes:
        return None, None
    return flops / count, rbytes / count


def _fixed_bytes(step: dict[str, Any], *lower: dict[str, Any] | None) -> float | None:
    """Bytes an engine step reads whatever its batch (the weights): the intercept of bytes per
    step against the running batch, through this step and the lowest-load step below it whose
    batch was clearly smaller. None without such a step."""
    _, b2 = _per_engine_step(step)
    r2 = value_at(step, "server", "requests_running", "mean")
    best = None
    for other in lower:
        if other is None or other is step:
            continue
        _, b1 = _per_engine_step(other)
        r1 = value_at(other, "server", "requests_running", "mean")
        if b1 is None or b2 is None or not r1 or not r2 or r2 < 1.2 * r1:
            continue
        slope = max(0.0, (b2 - b1) / (r2 - r1))
        fixed = min(b1, max(0.0, b2 - slope * r2))
        if best is None or r1 < best[0]:
            best = (r1, fixed)
    return best[1] if best else None


def load_of(step: dict[str, Any]) -> float:
    c = step.get("target_rate_rps")
    if c is None:
        c = step.get("concurrency")
    return float(c or 0)
