"""The emulator's /metrics page: vLLM's Prometheus families with vLLM's names, types, help
texts, labels and histogram buckets, fed by the engine step by step.

``names="v1"`` reproduces vLLM 0.32 (V1 engine), copied from a real server's page
(tests/goldens/vllm-0.32-cpu-metrics.txt). ``names="v0"`` reproduces vLLM 0.6.x (V0 engine),
from vllm/engine/metrics.py of the 0.6 series (vllm-project/vllm on GitHub) and a real 0.6-series
page (tests/goldens/vllm-0.6-v0-excerpt-metrics.txt): one label (model_name), no ``_created``
series, ``gpu_cache_usage_perc`` and ``time_per_output_token_seconds``.

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

from tokenload.sim.stats import ALL_WAITING_CAUSES, StepStats

__all__ = ["SimMetrics", "build_1_2_5_buckets"]


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value``, as vLLM builds token-count buckets."""
    return _build_buckets((1, 2, 5), max_value)


# Bucket boundaries, copied from the sources named in the module docstring.
# fmt: off
_V1_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
_V1_ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
_V1_REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)
_V1_ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_V1_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
_N_BUCKETS = (1, 2, 5, 10, 20)
_V0_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)
_V0_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_V0_REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
)
_HTTP_HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
    5.0, 7.5, 10.0, 30.0, 60.0,
)
_HTTP_BUCKETS = (0.1, 0.5, 1.0)
# fmt: on

# vLLM 0.32's cache_config_info labels (from the golden page), with the values a default GPU
# setup reports; the engine overrides the ones it knows (block size, blocks, memory, ...).
_V1_CACHE_CONFIG_DEFAULTS = {
    "_block_size_resolved": "True",
    "block_size": "16",
    "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None",
    "effective_attention_block_size": "16",
    "enable_mamba_shared_prefix_checkpoint": "False",
    "enable_prefix_caching": "False",
    "gpu_memory_utilization": "0.9",
    "hash_block_size": "None",
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_layout": "None",
    "kv_cache_max_concurrency": "None",
    "kv_cache_memory_bytes": "None",
    "kv_cache_size_tokens": "None",
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "float32",
    "num_cpu_blocks": "None",
    "num_gpu_blocks": "None",
    "num_gpu_blocks_override": "None",
    "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
    "user_specified_block_size": "False",
}
# vLLM 0.6's CacheConfig attributes as metrics_info() lists them, with the label set of a real
# 0.6-series page (tests/goldens/vllm-0.6-v0-excerpt-metrics.txt); later 0.6 patch releases
# added a few more.
_V0_CACHE_CONFIG_DEFAULTS = {
    "block_size": "16",
    "cache_dtype": "auto",
    "cpu_offload_gb": "0",
    "enable_prefix_caching": "False",
    "gpu_memory_utilization": "0.9",
    "num_cpu_blocks": "2048",
    "num_gpu_blocks": "None",
    "num_gpu_blocks_override": "None",
    "sliding_window": "None",
    "swap_space_bytes": "4294967296",
}
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
        self._cache_config_base = dict(
            _V1_CACHE_CONFIG_DEFAULTS if names == "v1" else _V0_CACHE_CONFIG_DEFAULTS
        )
        self._prefix_queries_total = 0.0
        self._prefix_hits_total = 0.0

        self._sim_families: list[_Family] = []
        if include_sim_metrics:
            self._waiting_by_cause = self._sim_family(
                "tokenload_sim:num_requests_waiting_by_cause",
                "Emulator only: waiting requests by why the queue head was not admitted (kv_cache, "
                "max_num_seqs, token_budget; new = arrived after the last step was planned).",
                "gauge",
                ("cause", "model_name"),
            )
            for cause in ALL_WAITING_CAUSES:
                self._waiting_by_cause.gauge(cause, model_name)
            self._step_seconds = self._sim_family(
                "tokenload_sim:step_duration_seconds",
                "Emulator only: modelled duration of each engine step.",
                "histogram",
                ("model_name",),
                _V1_ITL_BUCKETS,
            ).histogram(model_name)
            self.registry.register(_FamilyCollector(self._sim_families))

        self._http_families: list[_Family] = []
        if include_http_metrics:
            self._build_http()
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

    # --- family tables -----------------------------------------------------------------------

    def _family(
        self,
        name: str,
        documentation: str,
        typ: Literal["counter", "gauge", "histogram", "summary"],
        extra_labels: Sequence[str] = (),
        buckets: Sequence[float] = (),
        *,
        base_labels: bool = True,
    ) -> _Family:
        if self.names == "v1":
            labelnames = (("engine", "model_name") if base_labels else ()) + tuple(extra_labels)
        else:
            labelnames = (("model_name",) if base_labels else ()) + tuple(extra_labels)
        family = _Family(name, documentation, typ, labelnames, buckets, with_created=self.names == "v1")
        self._families.append(family)
        return family

    def _sim_family(
        self,
        name: str,
        documentation: str,
        typ: Literal["counter", "gauge", "histogram", "summary"],
        labelnames: Sequence[str],
        buckets: Sequence[float] = (),
    ) -> _Family:
        family = _Family(name, documentation, typ, labelnames, buckets, with_created=self.names == "v1")
        self._sim_families.append(family)
        return family

    def _build_v1(self, max_model_len: int) -> None:
        """vLLM 0.32, in the golden page's order. Children vLLM creates at start are created here
        too, so a fresh emulator shows the same zero-valued series."""
        L = self._labels
        f = self._family
        token_buckets = build_1_2_5_buckets(max_model_len)
        per_gpu = "(for Model Flops Utilization calculations)."
        self.flops = f(
            "vllm:estimated_flops_per_gpu_total",
            f"Estimated number of floating point operations per GPU {per_gpu}",
            "counter",
        ).counter(*L)
        self.read_bytes = f(
            "vllm:estimated_read_bytes_per_gpu_total",
            f"Estimated number of bytes read from memory per GPU {per_gpu}",
            "counter",
        ).counter(*L)
        self.write_bytes = f(
            "vllm:estimated_write_bytes_per_gpu_total",
            f"Estimated number of bytes written to memory per GPU {per_gpu}",
            "counter",
        ).counter(*L)
        self.running = f(
            "vllm:num_requests_running", "Number of requests in model execution batches.", "gauge"
        ).gauge(*L)
        self.waiting = f(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge"
        ).gauge(*L)
        by_reason = f(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: "
            "'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
            "Sum of all reasons equals vllm:num_requests_waiting.",
            "gauge",
            ("reason",),
        )
        self.waiting_capacity = by_reason.gauge(*L, "capacity")
        by_reason.gauge(*L, "deferred")  # no LoRA, KV transfer or blocked requests in the emulator
        sleep = f(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            "gauge",
            ("sleep_state",),
        )
        sleep.gauge(*L, "awake").set(1.0)
        sleep.gauge(*L, "weights_offloaded")
        sleep.gauge(*L, "discard_all")
        self.kv_usage = f(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge"
        ).gauge(*L)
        self.prefix_queries = f(
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            "counter",
        ).counter(*L)
        self.prefix_hits = f(
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            "counter",
        ).counter(*L)
        f(
            "vllm:external_prefix_cache_queries_total",
            "External prefix cache queries from KV connector cross-instance cache sharing, "
            "in terms of number of queried tokens.",
            "counter",
        ).counter(*L)
        f(
            "vllm:external_prefix_cache_hits_total",
            "External prefix cache hits from KV connector cross-instance cache sharing, "
            "in terms of number of cached tokens.",
            "counter",
        ).counter(*L)
        f(
            "vllm:mm_cache_queries_total",
            "Multi-modal cache queries, in terms of number of queried items.",
            "counter",
        ).counter(*L)
        f(
            "vllm:mm_cache_hits_total",
            "Multi-modal cache hits, in terms of number of cached items.",
            "counter",
        ).counter(*L)
        self.preemptions = f(
            "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", "counter"
        ).counter(*L)
        self.prompt_tokens = f(
            "vllm:prompt_tokens_total", "Number of prefill tokens processed.", "counter"
        ).counter(*L)
        by_source = f(
            "vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.", "counter", ("source",)
        )
        self.prompt_local_compute = by_source.counter(*L, "local_compute")
        self.prompt_local_cache_hit = by_source.counter(*L, "local_cache_hit")
        by_source.counter(*L, "external_kv_transfer")
        self.prompt_cached = f(
            "vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external).", "counter"
        ).counter(*L)
        cached_by_source = f(
            "vllm:prompt_tokens_cached_by_source_total",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) "
            "or external_unspecified. Counted at admission; "
            "sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            "counter",
            ("source",),
        )
        self.prompt_cached_device = cached_by_source.counter(*L, "device")
        for source in ("host", "p2p", "disk", "external_unspecified"):
            cached_by_source.counter(*L, source)
        self.generation_tokens = f(
            "vllm:generation_tokens_total", "Number of generation tokens processed.", "counter"
        ).counter(*L)
        self.success = f(
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            "counter",
            ("finished_reason",),
        )
        for reason in ("stop", "length", "abort", "error", "repetition"):
            self.success.counter(*L, reason)
        rejections = f(
            "vllm:admission_rejections_total",
            "Number of admission attempts rejected by a queue limit, by reason.",
            "counter",
            ("model_name", "reason"),
            base_labels=False,
        )
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            rejections.counter(self.model_name, reason)  # the emulator has no queue limits
        self.h_prompt_tokens = f(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            "histogram",
            (),
            token_buckets,
        ).histogram(*L)
        self.h_generation_tokens = f(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            "histogram",
            (),
            token_buckets,
        ).histogram(*L)
        self.h_iteration_tokens = f(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            "histogram",
            (),
            _V1_ITERATION_TOKENS_BUCKETS,
        ).histogram(*L)
        self.h_max_generation_tokens = f(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            "histogram",
            (),
            token_buckets,
        ).histogram(*L)
        self.h_n = f(
            "vllm:request_params_n", "Histogram of the n request parameter.", "histogram", (), _N_BUCKETS
        ).histogram(*L)
        self.h_max_tokens = f(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            "histogram",
            (),
            token_buckets,
        ).histogram(*L)
        self.h_ttft = f(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            "histogram",
            (),
            _V1_TTFT_BUCKETS,
        ).histogram(*L)
        self.h_itl = f(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            "histogram",
            (),
            _V1_ITL_BUCKETS,
        ).histogram(*L)
        self.h_tpot = f(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            "histogram",
            (),
            _V1_ITL_BUCKETS,
        ).histogram(*L)
        self.h_e2e = f(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            "histogram",
            (),
            _V1_REQUEST_LATENCY_BUCKETS,
        ).histogram(*L)
        self._request_phase_histograms(_V1_REQUEST_LATENCY_BUCKETS)
        self.h_preemptions = f(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            "histogram",
            (),
            _V1_PREEMPTIONS_BUCKETS,
        ).histogram(*L)
        self.h_prefill_kv_computed = f(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            "histogram",
            (),
            token_buckets,
        ).histogram(*L)
        # Last, so set_cache_config finds it: labels are the config keys, set at construction.
        self._families.append(
            _Family("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge", ())
        )

    def _request_phase_histograms(self, buckets: Sequence[float]) -> None:
        L = self._labels
        f = self._family
        self.h_queue = f(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            "histogram",
            (),
            buckets,
        ).histogram(*L)
        self.h_inference = f(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            "histogram",
            (),
            buckets,
        ).histogram(*L)
        self.h_prefill = f(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            "histogram",
            (),
            buckets,
        ).histogram(*L)
        self.h_decode = f(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            "histogram",
            (),
            buckets,
        ).histogram(*L)

    def _build_v0(self, max_model_len: int, max_num_seqs: int) -> None:
        """vLLM 0.6.x (vllm/engine/metrics.py, class Metrics), in its order, plus the deprecated
        average-throughput gauges a real 0.6-series page still shows. Speculative decoding
        families are left out: the emulator does not speculate."""
        L = self._labels
        f = self._family
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.running = f(
            "vllm:num_requests_running", "Number of requests currently running on GPU.", "gauge"
        ).gauge(*L)
        self.waiting = f(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge"
        ).gauge(*L)
        self.lora_info = f(
            "vllm:lora_requests_info",
            "Running stats on lora requests.",
            "gauge",
            ("running_lora_adapters", "max_lora", "waiting_lora_adapters"),
            base_labels=False,
        ).gauge("", "0", "")
        f("vllm:num_requests_swapped", "Number of requests swapped to CPU.", "gauge").gauge(*L)
        self.kv_usage = f(
            "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", "gauge"
        ).gauge(*L)
        f("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", "gauge").gauge(*L)
        f("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", "gauge").gauge(*L).set(-1.0)
        self.gpu_prefix_hit_rate = f(
            "vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", "gauge"
        ).gauge(*L)
        self.gpu_prefix_hit_rate.set(-1.0)
        self.preemptions = f(
            "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", "counter"
        ).counter(*L)
        self.prompt_tokens = f(
            "vllm:prompt_tokens_total", "Number of prefill tokens processed.", "counter"
        ).counter(*L)
        self.generation_tokens = f(
            "vllm:generation_tokens_total", "Number of generation tokens processed.", "counter"
        ).counter(*L)
        self.tokens = f(
            "vllm:tokens_total", "Number of prefill plus generation tokens processed.", "counter"
        ).counter(*L)
        # With CUDA graphs (the default) vLLM 0.6 uses the capture sizes as buckets: 1, 2, 4, then
        # multiples of 8 up to max_num_seqs.
        capture_sizes = [1, 2, 4] + [8 * i for i in range(1, 1025) if 8 * i <= max(8, max_num_seqs)]
        self.h_iteration_tokens = f(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            "histogram",
            (),
            capture_sizes,
        ).histogram(*L)
        self.h_ttft = f(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            "histogram",
            (),
            _V0_TTFT_BUCKETS,
        ).histogram(*L)
        self.h_itl = f(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            "histogram",
            (),
            _V0_TPOT_BUCKETS,
        ).histogram(*L)
        self.h_e2e = f(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            "histogram",
            (),
            _V0_REQUEST_LATENCY_BUCKETS,
        ).histogram(*L)
        self._request_phase_histograms(_V0_REQUEST_LATENCY_BUCKETS)
        self.h_time_in_queue = f(
            "vllm:time_in_queue_requests",
            "Histogram of the time the request spent in the queue in seconds.",
            "histogram",
            (),
            _V0_REQUEST_LATENCY_BUCKETS,
        ).histogram(*L)
        # Observed only with --collect-detailed-traces: registered, never observed, so no series.
        forward_buckets = _build_buckets((1, 2, 3, 5, 8), 3000)
        f(
            "vllm:model_forward_time_milliseconds",
            "Histogram of time spent in the model forward pass in ms.",
            "histogram",
            (),
            forward_buckets,
        )
        f(
            "vllm:model_execute_time_milliseconds",
            "Histogram of time spent in the model execute function in ms.",
            "histogram",
            (),
            forward_buckets,
        )
        self.h_prompt_tokens = f(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            "histogram",
            (),
            token_buckets,
        ).histogram(*L)
        self.h_generation_tokens = f(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            "histogram",
            (),
            token_buckets,
        ).histogram(*L)
        self.h_max_generation_tokens = f(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            "histogram",
            (),
            token_buckets,
        ).histogram(*L)
        self.h_n = f(
            "vllm:request_params_n", "Histogram of the n request parameter.", "histogram", (), _N_BUCKETS
        ).histogram(*L)
        self.h_max_tokens = f(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            "histogram",
            (),
            token_buckets,
        ).histogram(*L)
        # V0 creates a finished_reason series the first time a request finishes that way.
        self.success = f(
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            "counter",
            ("finished_reason",),
        )
        # Deprecated in 0.6 (in favour of the token counters) but still on 0.6-series pages.
        self.avg_prompt_throughput = f(
            "vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s.", "gauge"
        ).gauge(*L)
        self.avg_generation_throughput = f(
            "vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s.", "gauge"
        ).gauge(*L)
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

    def _build_http(self) -> None:
        """The API server's HTTP families (prometheus-fastapi-instrumentator in vLLM)."""
        with_created = self.names == "v1"

        def f(
            name: str,
            doc: str,
            typ: Literal["counter", "histogram", "summary"],
            labels: Sequence[str],
            buckets: Sequence[float] = (),
        ) -> _Family:
            family = _Family(name, doc, typ, labels, buckets, with_created=with_created)
            self._http_families.append(family)
            return family

        self._http_requests = f(
            "http_requests_total",
            "Total number of requests by method, status and handler.",
            "counter",
            ("handler", "method", "status"),
        )
        self._http_request_size = f(
            "http_request_size_bytes",
            "Content length of incoming requests by handler. Only value of header is "
            "respected. Otherwise ignored. No percentile calculated. ",
            "summary",
            ("handler",),
        )
        self._http_response_size = f(
            "http_response_size_bytes",
            "Content length of outgoing responses by handler. Only value of header is "
            "respected. Otherwise ignored. No percentile calculated. ",
            "summary",
            ("handler",),
        )
        self._http_highr = f(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate "
            "percentile calculations. ",
            "histogram",
            (),
            _HTTP_HIGHR_BUCKETS,
        )
        self._http_duration = f(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by "
            "handler is important. ",
            "histogram",
            ("handler", "method"),
            _HTTP_BUCKETS,
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


def _build_buckets(mantissas: Sequence[int], max_value: int) -> list[float]:
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in mantissas:
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(float(value))
        exponent += 1
