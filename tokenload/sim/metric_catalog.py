"""The emulator's /metrics catalogs as data: one table per vLLM version (names, types, help
texts, labels, buckets, the series a fresh server shows), read by :mod:`tokenload.sim.metrics`,
which only builds and fills them. tests/sim/test_metrics.py checks every family against the
golden pages (tests/goldens/).

``V1`` is vLLM 0.32 (V1 engine), in the order of a real server's page
(tests/goldens/vllm-0.32-cpu-metrics.txt); ``V0`` is vLLM 0.6.x (vllm/engine/metrics.py, class
Metrics, of the 0.6 series, and a real 0.6-series page, tests/goldens/vllm-0.6-v0-excerpt-
metrics.txt); ``HTTP`` the API server's families (prometheus-fastapi-instrumentator in vLLM).

A family's *base labels* are the version's (V1: engine, model_name; V0: model_name), then its own
``labels``. Each :class:`Child` is a series created at start (as vLLM creates it), with the
values of the family's own labels; ``bind`` names the :class:`~tokenload.sim.metrics.SimMetrics`
attribute the engine's observations go to.
"""

# ruff: noqa: E501  (a table: one family a line)
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tokenload.sim.stats import ALL_WAITING_CAUSES

__all__ = [
    "HTTP",
    "MODEL",
    "SIM",
    "V0",
    "V0_CACHE_CONFIG",
    "V1",
    "V1_CACHE_CONFIG",
    "Child",
    "FamilySpec",
    "token_count_buckets",
]

Kind = Literal["counter", "gauge", "histogram", "summary"]
#: Buckets: the bounds, or one of the names resolved when the engine's limits are known:
#: ``tokens`` (1, 2, 5, 10, ... up to max_model_len), ``capture_sizes`` (V0's CUDA graph sizes:
#: 1, 2, 4, then multiples of 8 up to max_num_seqs).
Buckets = tuple[float, ...] | Literal["tokens", "capture_sizes"]
#: In a child's label values: the served model's name.
MODEL = "\0model"


@dataclass(frozen=True, slots=True)
class Child:
    values: tuple[str, ...] = ()
    bind: str | None = None
    #: Set at start (a gauge vLLM initialises, e.g. sleep state awake = 1).
    value: float | None = None


@dataclass(frozen=True, slots=True)
class FamilySpec:
    name: str
    help: str
    type: Kind
    labels: tuple[str, ...] = ()
    buckets: Buckets = ()
    children: tuple[Child, ...] = (Child(),)
    #: The SimMetrics attribute holding the family itself (series made as they occur).
    bind_family: str | None = None
    #: False: the family's labels are only ``labels`` (no engine/model_name in front).
    base_labels: bool = True


def one(
    name: str,
    help: str,
    type: Kind,
    bind: str | None = None,
    buckets: Buckets = (),
    value: float | None = None,
) -> FamilySpec:
    """A family with one series, the base labels' own."""
    return FamilySpec(name, help, type, buckets=buckets, children=(Child((), bind, value),))


def token_count_buckets(mantissas: tuple[int, ...], max_value: int) -> list[float]:
    """``mantissas`` x 10^k up to ``max_value``, as vLLM builds its token-count buckets."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in mantissas:
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(float(value))
        exponent += 1


# Bucket boundaries, copied from the sources named in the module docstring.
# fmt: off
V1_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
V1_ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
V1_REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)
V1_ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
V1_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
N_BUCKETS = (1, 2, 5, 10, 20)
V0_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)
V0_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
V0_REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
)
V0_FORWARD_BUCKETS = tuple(token_count_buckets((1, 2, 3, 5, 8), 3000))
HTTP_HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
    5.0, 7.5, 10.0, 30.0, 60.0,
)
HTTP_BUCKETS = (0.1, 0.5, 1.0)
# fmt: on

_PER_GPU = "(for Model Flops Utilization calculations)."


def _phases(buckets: tuple[float, ...]) -> tuple[FamilySpec, ...]:
    """A request's time in each phase (both versions)."""
    return (
        one(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            "histogram",
            "h_queue",
            buckets,
        ),
        one(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            "histogram",
            "h_inference",
            buckets,
        ),
        one(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            "histogram",
            "h_prefill",
            buckets,
        ),
        one(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            "histogram",
            "h_decode",
            buckets,
        ),
    )


# fmt: off
V1: tuple[FamilySpec, ...] = (
    one("vllm:estimated_flops_per_gpu_total", f"Estimated number of floating point operations per GPU {_PER_GPU}", "counter", "flops"),
    one("vllm:estimated_read_bytes_per_gpu_total", f"Estimated number of bytes read from memory per GPU {_PER_GPU}", "counter", "read_bytes"),
    one("vllm:estimated_write_bytes_per_gpu_total", f"Estimated number of bytes written to memory per GPU {_PER_GPU}", "counter", "write_bytes"),
    one("vllm:num_requests_running", "Number of requests in model execution batches.", "gauge", "running"),
    one("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", "waiting"),
    FamilySpec(
        "vllm:num_requests_waiting_by_reason",
        "Number of waiting requests by reason. Reason labels: "
        "'capacity' = waiting for scheduling capacity; "
        "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
        "Sum of all reasons equals vllm:num_requests_waiting.",
        "gauge",
        ("reason",),
        # no LoRA, KV transfer or blocked requests in the emulator: "deferred" stays 0
        children=(Child(("capacity",), "waiting_capacity"), Child(("deferred",))),
    ),
    FamilySpec(
        "vllm:engine_sleep_state",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
        "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        "gauge",
        ("sleep_state",),
        children=(Child(("awake",), value=1.0), Child(("weights_offloaded",)), Child(("discard_all",))),
    ),
    one("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge", "kv_usage"),
    one("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", "counter", "prefix_queries"),
    one("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", "counter", "prefix_hits"),
    one("vllm:external_prefix_cache_queries_total", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.", "counter"),
    one("vllm:external_prefix_cache_hits_total", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.", "counter"),
    one("vllm:mm_cache_queries_total", "Multi-modal cache queries, in terms of number of queried items.", "counter"),
    one("vllm:mm_cache_hits_total", "Multi-modal cache hits, in terms of number of cached items.", "counter"),
    one("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", "counter", "preemptions"),
    one("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "counter", "prompt_tokens"),
    FamilySpec(
        "vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.", "counter", ("source",),
        children=(
            Child(("local_compute",), "prompt_local_compute"),
            Child(("local_cache_hit",), "prompt_local_cache_hit"),
            Child(("external_kv_transfer",)),
        ),
    ),
    one("vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external).", "counter", "prompt_cached"),
    FamilySpec(
        "vllm:prompt_tokens_cached_by_source_total",
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
        "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) "
        "or external_unspecified. Counted at admission; "
        "sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
        "counter",
        ("source",),
        children=(
            Child(("device",), "prompt_cached_device"),
            *(Child((source,)) for source in ("host", "p2p", "disk", "external_unspecified")),
        ),
    ),
    one("vllm:generation_tokens_total", "Number of generation tokens processed.", "counter", "generation_tokens"),
    FamilySpec(
        "vllm:request_success_total", "Count of successfully processed requests.", "counter", ("finished_reason",),
        children=tuple(Child((reason,)) for reason in ("stop", "length", "abort", "error", "repetition")),
        bind_family="success",
    ),
    FamilySpec(
        "vllm:admission_rejections_total",
        "Number of admission attempts rejected by a queue limit, by reason.",
        "counter",
        ("model_name", "reason"),
        # the emulator has no queue limits: both stay 0
        children=(Child((MODEL, "max_num_queued_reqs")), Child((MODEL, "max_num_queued_tokens"))),
        base_labels=False,
    ),
    one("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "histogram", "h_prompt_tokens", "tokens"),
    one("vllm:request_generation_tokens", "Number of generation tokens processed.", "histogram", "h_generation_tokens", "tokens"),
    one("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "histogram", "h_iteration_tokens", V1_ITERATION_TOKENS_BUCKETS),
    one("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", "histogram", "h_max_generation_tokens", "tokens"),
    one("vllm:request_params_n", "Histogram of the n request parameter.", "histogram", "h_n", N_BUCKETS),
    one("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "histogram", "h_max_tokens", "tokens"),
    one("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "histogram", "h_ttft", V1_TTFT_BUCKETS),
    one("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "histogram", "h_itl", V1_ITL_BUCKETS),
    one("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", "histogram", "h_tpot", V1_ITL_BUCKETS),
    one("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "histogram", "h_e2e", V1_REQUEST_LATENCY_BUCKETS),
    *_phases(V1_REQUEST_LATENCY_BUCKETS),
    one("vllm:request_num_preemptions", "Histogram of the number of times a request was preempted.", "histogram", "h_preemptions", V1_PREEMPTIONS_BUCKETS),
    one("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", "histogram", "h_prefill_kv_computed", "tokens"),
)

V0: tuple[FamilySpec, ...] = (
    one("vllm:num_requests_running", "Number of requests currently running on GPU.", "gauge", "running"),
    one("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", "waiting"),
    FamilySpec(
        "vllm:lora_requests_info", "Running stats on lora requests.", "gauge",
        ("running_lora_adapters", "max_lora", "waiting_lora_adapters"),
        children=(Child(("", "0", ""), "lora_info"),),
        base_labels=False,
    ),
    one("vllm:num_requests_swapped", "Number of requests swapped to CPU.", "gauge"),
    one("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", "gauge", "kv_usage"),
    one("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", "gauge"),
    one("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", "gauge", value=-1.0),
    one("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", "gauge", "gpu_prefix_hit_rate", value=-1.0),
    one("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", "counter", "preemptions"),
    one("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "counter", "prompt_tokens"),
    one("vllm:generation_tokens_total", "Number of generation tokens processed.", "counter", "generation_tokens"),
    one("vllm:tokens_total", "Number of prefill plus generation tokens processed.", "counter", "tokens"),
    # With CUDA graphs (the default) vLLM 0.6 uses the capture sizes as buckets.
    one("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "histogram", "h_iteration_tokens", "capture_sizes"),
    one("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "histogram", "h_ttft", V0_TTFT_BUCKETS),
    one("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", "histogram", "h_itl", V0_TPOT_BUCKETS),
    one("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", "histogram", "h_e2e", V0_REQUEST_LATENCY_BUCKETS),
    *_phases(V0_REQUEST_LATENCY_BUCKETS),
    one("vllm:time_in_queue_requests", "Histogram of the time the request spent in the queue in seconds.", "histogram", "h_time_in_queue", V0_REQUEST_LATENCY_BUCKETS),
    # Observed only with --collect-detailed-traces: registered, never observed, so no series.
    FamilySpec("vllm:model_forward_time_milliseconds", "Histogram of time spent in the model forward pass in ms.", "histogram", buckets=V0_FORWARD_BUCKETS, children=()),
    FamilySpec("vllm:model_execute_time_milliseconds", "Histogram of time spent in the model execute function in ms.", "histogram", buckets=V0_FORWARD_BUCKETS, children=()),
    one("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "histogram", "h_prompt_tokens", "tokens"),
    one("vllm:request_generation_tokens", "Number of generation tokens processed.", "histogram", "h_generation_tokens", "tokens"),
    one("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", "histogram", "h_max_generation_tokens", "tokens"),
    one("vllm:request_params_n", "Histogram of the n request parameter.", "histogram", "h_n", N_BUCKETS),
    one("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "histogram", "h_max_tokens", "tokens"),
    # V0 creates a finished_reason series the first time a request finishes that way.
    FamilySpec("vllm:request_success_total", "Count of successfully processed requests.", "counter", ("finished_reason",), children=(), bind_family="success"),
    # Deprecated in 0.6 (in favour of the token counters) but still on 0.6-series pages.
    one("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s.", "gauge", "avg_prompt_throughput"),
    one("vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s.", "gauge", "avg_generation_throughput"),
)

#: The emulator's own families (not vLLM's): why requests wait, and each step's modelled time.
SIM: tuple[FamilySpec, ...] = (
    FamilySpec(
        "tokenload_sim:num_requests_waiting_by_cause",
        "Emulator only: waiting requests by why the queue head was not admitted (kv_cache, "
        "max_num_seqs, token_budget; new = arrived after the last step was planned).",
        "gauge",
        ("cause", "model_name"),
        children=tuple(Child((cause, MODEL)) for cause in ALL_WAITING_CAUSES),
        bind_family="_waiting_by_cause",
        base_labels=False,
    ),
    FamilySpec(
        "tokenload_sim:step_duration_seconds", "Emulator only: modelled duration of each engine step.", "histogram",
        ("model_name",), V1_ITL_BUCKETS, children=(Child((MODEL,), "_step_seconds"),), base_labels=False,
    ),
)

HTTP: tuple[FamilySpec, ...] = (
    FamilySpec("http_requests_total", "Total number of requests by method, status and handler.", "counter", ("handler", "method", "status"), children=(), bind_family="_http_requests", base_labels=False),
    FamilySpec("http_request_size_bytes", "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ", "summary", ("handler",), children=(), bind_family="_http_request_size", base_labels=False),
    FamilySpec("http_response_size_bytes", "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ", "summary", ("handler",), children=(), bind_family="_http_response_size", base_labels=False),
    FamilySpec("http_request_duration_highr_seconds", "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ", "histogram", (), HTTP_HIGHR_BUCKETS, children=(), bind_family="_http_highr", base_labels=False),
    FamilySpec("http_request_duration_seconds", "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ", "histogram", ("handler", "method"), HTTP_BUCKETS, children=(), bind_family="_http_duration", base_labels=False),
)
# fmt: on

# vLLM 0.32's cache_config_info labels (from the golden page), with the values a default GPU
# setup reports; the engine overrides the ones it knows (block size, blocks, memory, ...).
V1_CACHE_CONFIG = {
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
V0_CACHE_CONFIG = {
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
