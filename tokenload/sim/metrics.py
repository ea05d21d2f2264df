"""The emulator's /metrics page: vLLM's Prometheus families with vLLM's names, types, help
texts, labels and histogram buckets, fed by the engine step by step.

The families are data (:mod:`tokenload.sim.metric_catalog`: ``V1`` reproduces vLLM 0.32, ``V0``
vLLM 0.6.x, ``HTTP`` the API server's); this module builds them and fills them from the engine's
steps. tests/sim/test_metrics.py checks the page against real servers' pages (tests/goldens/).

The families are small hand-written collectors in a private CollectorRegistry rather than
prometheus_client's Histogram and Counter: the engine observes one inter-token latency per
running request per step, and a bisect into a list is several times cheaper than the library's
locked observe(). The text exposition is prometheus_client's own.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal, cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from tokenload.sim import metric_catalog as catalog
from tokenload.sim.metric_catalog import MODEL, FamilySpec, token_count_buckets
from tokenload.sim.stats import ALL_WAITING_CAUSES, StepStats

__all__ = ["SimMetrics", "build_1_2_5_buckets"]


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value``, as vLLM builds token-count buckets."""
    return token_count_buckets((1, 2, 5), max_value)


# V0 refreshed its deprecated average-throughput gauges once per logging interval.
_V0_THROUGHPUT_INTERVAL_S = 5.0


class _Counter:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class _Gauge:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = value


class _Histogram:
    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        # bisect_left puts a value equal to a bound in that bound's bucket: "le" is inclusive.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: Iterable[float]) -> None:
        counts, bounds = self.counts, self.bounds
        total = 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        self.sum += total


class _Summary:
    __slots__ = ("count", "created", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value


_SeriesType = _Counter | _Gauge | _Histogram | _Summary


class _Family:
    """One metric family: name, help, type, label names and its labelled series."""

    def __init__(
        self,
        name: str,
        documentation: str,
        typ: Literal["counter", "gauge", "histogram", "summary"],
        labelnames: Sequence[str],
        buckets: Sequence[float] = (),
        with_created: bool = True,
    ) -> None:
        if typ == "counter" and name.endswith("_total"):
            name = name.removesuffix("_total")  # the exposition adds it back
        self.name = name
        self.documentation = documentation
        self.typ = typ
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self.with_created = with_created
        self.series: dict[tuple[str, ...], _SeriesType] = {}

    def labels(self, *values: str) -> _SeriesType:
        series = self.series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
            if self.typ == "counter":
                series = _Counter()
            elif self.typ == "gauge":
                series = _Gauge()
            elif self.typ == "histogram":
                series = _Histogram(self.bounds)
            else:
                series = _Summary()
            self.series[values] = series
        return series

    def counter(self, *values: str) -> _Counter:
        return cast(_Counter, self.labels(*values))

    def gauge(self, *values: str) -> _Gauge:
        return cast(_Gauge, self.labels(*values))

    def histogram(self, *values: str) -> _Histogram:
        return cast(_Histogram, self.labels(*values))

    def summary(self, *values: str) -> _Summary:
        return cast(_Summary, self.labels(*values))

    def collect(self) -> Metric:
        metric = Metric(self.name, self.documentation, self.typ)
        name = self.name
        for values, series in self.series.items():
            labels = dict(zip(self.labelnames, values, strict=True))
            if isinstance(series, _Gauge):
                metric.add_sample(name, labels, series.value)
                continue
            if isinstance(series, _Counter):
                metric.add_sample(name + "_total", labels, series.value)
            elif isinstance(series, _Histogram):
                cumulative = 0
                for bound, count in zip((*series.bounds, float("inf")), series.counts, strict=True):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    metric.add_sample(name + "_bucket", {**labels, "le": le}, cumulative)
                metric.add_sample(name + "_count", labels, cumulative)
                metric.add_sample(name + "_sum", labels, series.sum)
            else:
                metric.add_sample(name + "_count", labels, series.count)
                metric.add_sample(name + "_sum", labels, series.sum)
            if self.with_created:
                metric.add_sample(name + "_created", labels, series.created)
        return metric


class _FamilyCollector:
    """A registry member that yields a list of families in order."""

    def __init__(self, families: list[_Family]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.collect()


class SimMetrics:
    """The registry behind the emulator's /metrics, and the observations that fill it.

    ``names``: "v1" for vLLM 0.32's families (labels engine + model_name), "v0" for vLLM 0.6's
    (label model_name only). ``max_model_len`` sets the token-count buckets as vLLM does.
    """

    def __init__(
        self,
        model_name: str,
        max_model_len: int | None = None,
        *,
        names: Literal["v1", "v0"] = "v1",
        engine_index: int = 0,
        max_num_seqs: int = 256,
        include_process_metrics: bool = True,
        include_http_metrics: bool = True,
        include_sim_metrics: bool = True,
    ) -> None:
        if names not in ("v1", "v0"):
            raise ValueError(f"names must be 'v1' or 'v0', got {names!r}")
        self.names = names
        self.model_name = model_name
        self.registry = CollectorRegistry(auto_describe=False)
        self.content_type = CONTENT_TYPE_LATEST
        if include_process_metrics:
            GCCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            ProcessCollector(registry=self.registry)
        self._engine_index = str(engine_index)
        self._labels: tuple[str, ...] = (self._engine_index, model_name) if names == "v1" else (model_name,)
        # Filled by configure(): the token-count buckets depend on the engine's max_model_len.
        self._families: list[_Family] = []
        self.registry.register(_FamilyCollector(self._families))
        self._cache_config_base = dict(catalog.V1_CACHE_CONFIG if names == "v1" else catalog.V0_CACHE_CONFIG)
        self._prefix_queries_total = 0.0
        self._prefix_hits_total = 0.0

        self._sim_families: list[_Family] = []
        if include_sim_metrics:
            self._build(catalog.SIM, self._sim_families)
            self.registry.register(_FamilyCollector(self._sim_families))

        self._http_families: list[_Family] = []
        if include_http_metrics:
            self._build(catalog.HTTP, self._http_families)
            self.registry.register(_FamilyCollector(self._http_families))
        if max_model_len is not None:
            self.configure(max_model_len, max_num_seqs)

    @property
    def configured(self) -> bool:
        return bool(self._families)

    def configure(self, max_model_len: int, max_num_seqs: int = 256) -> None:
        """Create the vLLM families (their token buckets follow ``max_model_len``). The engine
        calls this when it is given the metrics; later calls change nothing."""
        if self._families:
            return
        if self.names == "v1":
            self._build_v1(max_model_len)
        else:
            self._build_v0(max_model_len, max_num_seqs)
        self._cache_family = self._families[-1]
        self.set_cache_config({})

    # --- the families, from the catalogs (sim/metric_catalog.py) -----------------------------

    def _build(
        self,
        specs: tuple[FamilySpec, ...],
        into: list[_Family],
        max_model_len: int = 0,
        max_num_seqs: int = 0,
    ) -> None:
        """Create ``specs``' families (in order) and the series a fresh server shows, binding the
        ones the observations fill to this object's attributes."""
        base = self._labels
        base_names = ("engine", "model_name") if self.names == "v1" else ("model_name",)
        for spec in specs:
            labelnames = (base_names if spec.base_labels else ()) + spec.labels
            family = _Family(
                spec.name,
                spec.help,
                spec.type,
                labelnames,
                self._bounds(spec, max_model_len, max_num_seqs),
                with_created=self.names == "v1",
            )
            into.append(family)
            if spec.bind_family:
                setattr(self, spec.bind_family, family)
            for child in spec.children:
                values = tuple(self.model_name if v == MODEL else v for v in child.values)
                series = family.labels(*((base if spec.base_labels else ()) + values))
                if child.value is not None:
                    series.set(child.value)  # type: ignore[union-attr]
                if child.bind:
                    setattr(self, child.bind, series)

    @staticmethod
    def _bounds(spec: FamilySpec, max_model_len: int, max_num_seqs: int) -> tuple[float, ...]:
        if spec.buckets == "tokens":
            return tuple(build_1_2_5_buckets(max_model_len))
        if spec.buckets == "capture_sizes":
            return (1, 2, 4, *(8 * i for i in range(1, 1025) if 8 * i <= max(8, max_num_seqs)))
        return spec.buckets

    def _build_v1(self, max_model_len: int) -> None:
        """vLLM 0.32, in the golden page's order."""
        self._build(catalog.V1, self._families, max_model_len)
        # Last, so set_cache_config finds it: labels are the config keys, set at construction.
        self._families.append(
            _Family("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge", ())
        )

    def _build_v0(self, max_model_len: int, max_num_seqs: int) -> None:
        """vLLM 0.6.x, in its order, plus the deprecated average-throughput gauges a real
        0.6-series page still shows. Speculative decoding families are left out: the emulator
        does not speculate."""
        self._build(catalog.V0, self._families, max_model_len, max_num_seqs)
        self._interval_start_s: float | None = None
        self._interval_prompt_tokens = 0
        self._interval_generation_tokens = 0
        self._families.append(
            _Family(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig",
                "gauge",
                (),
                with_created=False,
            )
        )

    # --- observations ------------------------------------------------------------------------

    def set_cache_config(self, info: dict[str, str]) -> None:
        """Publish the KV cache configuration (vllm:cache_config_info), merged over the defaults."""
        if not self._families:
            raise RuntimeError("SimMetrics.configure() must be called first (SimEngine does it)")
        merged = {
            **self._cache_config_base,
            **{k: v for k, v in info.items() if k in self._cache_config_base},
        }
        if self.names == "v1":
            merged["effective_attention_block_size"] = merged["block_size"]
            merged["engine"] = self._engine_index
        family = self._cache_family
        family.labelnames = tuple(merged)
        family.series.clear()
        family.gauge(*merged.values()).set(1.0)

    def set_gauges(
        self,
        num_running: int,
        num_waiting: int,
        waiting_cause: str | None,
        kv_cache_usage_ratio: float,
        num_new_arrivals: int = 0,
    ) -> None:
        """Scheduler state after a step. ``num_waiting`` counts the requests the scheduler has
        seen; ``num_new_arrivals`` (arrived since) only appear in the emulator's own gauge."""
        if not self._families:
            raise RuntimeError("SimMetrics.configure() must be called first (SimEngine does it)")
        self.running.set(num_running)
        self.waiting.set(num_waiting)
        self.kv_usage.set(kv_cache_usage_ratio)
        if self.names == "v1":
            # Every emulated wait (KV blocks, max_num_seqs, token budget) is vLLM's "capacity".
            self.waiting_capacity.set(num_waiting)
        else:
            self.lora_info.set(time.time())
        if self._sim_families:
            counts = dict.fromkeys(ALL_WAITING_CAUSES, 0)
            counts["new"] = num_new_arrivals
            if waiting_cause is not None:
                counts[waiting_cause] += num_waiting
            for cause, value in counts.items():
                self._waiting_by_cause.gauge(cause, self.model_name).set(value)

    def observe_step(self, s: StepStats) -> None:
        """Everything one engine step contributes."""
        self.set_gauges(
            s.num_running, s.num_waiting, s.waiting_cause, s.kv_cache_usage_ratio, s.num_new_arrivals
        )
        self.preemptions.inc(s.num_preemptions)
        self.generation_tokens.inc(s.num_generation_tokens)
        self.h_ttft.observe_many(s.ttfts_s)
        self.h_itl.observe_many(s.inter_token_latencies_s)
        if self._sim_families:
            self._step_seconds.observe(s.duration_s)
        if self.names == "v1":
            # V1 counts a prompt once, when its request produces the first token (recomputation
            # after preemption is not counted again), and per-step tokens the same way.
            self.prompt_tokens.inc(s.num_prompt_tokens_first_token)
            computed = s.num_prompt_tokens_first_token - s.num_cached_prompt_tokens_first_token
            self.prompt_local_compute.inc(computed)
            self.prompt_local_cache_hit.inc(s.num_cached_prompt_tokens_first_token)
            self.prompt_cached.inc(s.num_cached_prompt_tokens_first_token)
            self.prompt_cached_device.inc(s.num_cached_prompt_tokens_first_token)
            self.prefix_queries.inc(s.prefix_cache_query_tokens)
            self.prefix_hits.inc(s.prefix_cache_hit_tokens)
            self.flops.inc(s.flops)
            self.read_bytes.inc(s.read_bytes)
            self.write_bytes.inc(s.write_bytes)
            self.h_iteration_tokens.observe(s.num_prompt_tokens_first_token + s.num_generation_tokens)
        else:
            # V0 counts the prompt tokens each step actually ran, recomputation included.
            self.prompt_tokens.inc(s.num_prefill_tokens_computed)
            self.tokens.inc(s.num_prefill_tokens_computed + s.num_generation_tokens)
            self.h_iteration_tokens.observe(s.num_scheduled_tokens)
            self._observe_throughput(s)
            self._prefix_queries_total += s.prefix_cache_query_tokens
            self._prefix_hits_total += s.prefix_cache_hit_tokens
            if self._prefix_queries_total > 0:
                rate = self._prefix_hits_total / self._prefix_queries_total
                self.gpu_prefix_hit_rate.set(rate)
        L = self._labels
        for r in s.finished:
            t = r.times
            self.success.counter(*L, r.finish_reason).inc()
            self.h_e2e.observe(t.e2e_s or 0.0)
            self.h_queue.observe(t.queue_time_s or 0.0)
            self.h_prefill.observe(t.prefill_time_s or 0.0)
            self.h_decode.observe(t.decode_time_s or 0.0)
            self.h_inference.observe(t.inference_time_s or 0.0)
            self.h_prompt_tokens.observe(r.num_prompt_tokens)
            self.h_generation_tokens.observe(r.num_generation_tokens)
            self.h_max_generation_tokens.observe(r.max_tokens)
            self.h_n.observe(1)
            self.h_max_tokens.observe(r.max_tokens)
            if self.names == "v1":
                self.h_tpot.observe(r.mean_time_per_output_token_s)
                self.h_preemptions.observe(t.num_preemptions)
                self.h_prefill_kv_computed.observe(r.num_prompt_tokens - r.num_cached_tokens)
            else:
                self.h_time_in_queue.observe(t.queue_time_s or 0.0)

    def _observe_throughput(self, s: StepStats) -> None:
        """V0's average throughput gauges: tokens over each logging interval of engine time."""
        if self._interval_start_s is None:
            self._interval_start_s = s.now_s - s.duration_s
        self._interval_prompt_tokens += s.num_prefill_tokens_computed
        self._interval_generation_tokens += s.num_generation_tokens
        elapsed_s = s.now_s - self._interval_start_s
        if elapsed_s >= _V0_THROUGHPUT_INTERVAL_S:
            self.avg_prompt_throughput.set(self._interval_prompt_tokens / elapsed_s)
            self.avg_generation_throughput.set(self._interval_generation_tokens / elapsed_s)
            self._interval_start_s = s.now_s
            self._interval_prompt_tokens = 0
            self._interval_generation_tokens = 0

    def observe_abort(self) -> None:
        """A request the client abandoned. vLLM 0.32 counts it under finished_reason="abort";
        its latency histograms are not observed (the emulator has no finished timeline for it)."""
        if self.names == "v1":
            self.success.counter(*self._labels, "abort").inc()

    def observe_http(
        self,
        handler: str,
        method: str,
        status_code: int,
        duration_s: float,
        request_size_bytes: int = 0,
        response_size_bytes: int = 0,
    ) -> None:
        """One HTTP request served, for the API server's http_* families (status grouped as 2xx...)."""
        if not self._http_families:
            return
        status = f"{status_code // 100}xx"
        self._http_requests.counter(handler, method, status).inc()
        self._http_request_size.summary(handler).observe(request_size_bytes)
        self._http_response_size.summary(handler).observe(response_size_bytes)
        self._http_highr.histogram().observe(duration_s)
        self._http_duration.histogram(handler, method).observe(duration_s)

    def render(self) -> bytes:
        """The text exposition (Prometheus format 0.0.4) of everything in the registry."""
        return generate_latest(self.registry)
