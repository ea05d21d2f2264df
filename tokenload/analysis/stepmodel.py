"""What one engine step costs, and how that changes when the batch, the FLOP/s or the bandwidth
change: the diagnosis' counterfactuals, from what a real server shows. Pure.

A step's time is a roofline with partial overlap plus a fixed time:
``t = o + max(c, m) + (1 - overlap) * min(c, m)``, ``c`` its compute time, ``m`` its memory time,
``m = m_fixed + m_batch`` (the weights, read once a step whatever the batch, and the KV-cache
reads, which grow with the running batch), ``o`` what the step spends outside its kernels.
Relaxing a resource 2x halves its term; letting the batch grow by ``r`` multiplies ``c`` and
``m_batch`` by ``r``. Throughput at the same load is tokens per step over step time, so a
change's gain is ``r * t / t' - 1``. Only the terms' *ratios* matter, so they may be in any unit.

Where the terms come from, the better first (tokenload.analysis.headroom picks):

* **FLOP and byte counters** (``vllm:estimated_flops_per_gpu_total`` and
  ``vllm:estimated_read_bytes_per_gpu_total``, vLLM V1): per engine step ``F`` FLOPs and ``B``
  bytes. ``c : m = F / balance : B`` where ``balance`` is the GPU's FLOP/byte machine balance
  (``--gpu-peaks``, else :data:`MACHINE_BALANCE`). ``m_fixed`` is the bytes read whatever the
  batch: the intercept of ``B`` against the running batch across the series' steps.
* **The step-time line** ``s(n) = a + b*n`` (n: tokens per step) through two steps of the series:
  ``a`` is memory (the weights) and the fixed time, ``b*n`` per-token work, split between matmuls
  (compute) and KV reads (memory) by the mean context a decode token reads
  (``kv_read_equiv_tokens``). A sum, no overlap: the line is additive. Not used when ``a`` is
  worth more than :data:`WEIGHTS_READ_MAX_TOKENS` tokens of ``b`` (two steps on either side of
  the roofline's corner) or ``b`` is 0 (no growth seen).
* **Tokens per step** alone against the machine balance: a prior, for the split only.

``o`` is found from two steps of a series where their work differs, never below a floor
(``Thresholds.step_overhead_ms``, by default :data:`STEP_OVERHEAD_MS`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["MACHINE_BALANCE", "OVERLAP", "STEP_OVERHEAD_MS", "WEIGHTS_READ_MAX_TOKENS", "StepModel"]

#: FLOP/byte at which a GPU's compute time equals its memory time (dense BF16 peak over memory
#: bandwidth), used when the user gives no --gpu-peaks. Datasheet figures: A100 SXM 312 T / 2.04
#: TB/s = 153; A40 150 T / 696 GB/s = 215; MI300X 1307 T / 5.3 TB/s = 247; H100 SXM 989 T /
#: 3.35 TB/s = 295; L4 121 T / 300 GB/s = 403; H200 FP8 1979 T / 4.8 TB/s = 412. Their
#: geometric mean, rounded: 270. A definition from datasheets, not fitted to any run.
MACHINE_BALANCE = 270.0

#: The most tokens of matmuls that one read of the weights can take as long as: the largest
#: datasheet balance above (H200 FP8, 412 FLOP/byte; 2 FLOPs a parameter a token against at
#: least 1 byte a parameter), doubled for matmuls at half their peak while the weights stream at
#: full bandwidth. A step-time line whose intercept is worth more tokens of its slope than this is
#: not "the weights' read plus a fixed time": its two steps lie on either side of the roofline's
#: corner (a memory-bound step below, a compute-bound one above), and its split is not used.
WEIGHTS_READ_MAX_TOKENS = 2 * 412.0

#: Share of the shorter of compute and memory time hidden under the longer one. Kernels overlap
#: some (weights stream while tensor cores work) but not all (attention, norms, sampling): the
#: middle of the range, 0 (a sum) to 1 (the ideal roofline).
OVERLAP = 0.5


#: The least time an engine step takes outside its kernels (scheduling, input preparation,
#: sampling, launches): about 1 ms for vLLM V1 with CUDA graphs. An assumption, not fitted; it
#: matters where it decides between two otherwise equal gains: more bandwidth shortens the
#: kernels only, a larger batch shares this time among more tokens. The default of
#: ``Thresholds.step_overhead_ms``, which the diagnosis passes to the methods below.
STEP_OVERHEAD_MS = 1.0


@dataclass(frozen=True, slots=True)
class StepModel:
    """An engine step's compute and memory terms (any one unit) and how they combine."""

    compute: float
    memory_fixed: float
    memory_batch: float
    overlap: float
    how: str
    #: Time a step takes whatever its work (scheduling, launches, sampling), in the terms' unit.
    overhead: float = 0.0
    #: Whether the series measured how the step grows with its batch (else ``memory_batch`` is
    #: a prior): a model that did not is not asked whether more load would pay.
    measured_growth: bool = True

    def time(self, batch: float = 1.0, flops: float = 1.0, bandwidth: float = 1.0) -> float:
        """The step's time with the running batch ``batch`` times as large and FLOP/s and
        bandwidth ``flops`` and ``bandwidth`` times as high (same unit as the terms)."""
        c = self.compute * batch / flops
        m = (self.memory_fixed + self.memory_batch * batch) / bandwidth
        return self.overhead + max(c, m) + (1.0 - self.overlap) * min(c, m)

    def gain(self, batch: float = 1.0, flops: float = 1.0, bandwidth: float = 1.0) -> float:
        """Throughput gain at the same load: ``batch`` times the tokens per step, over the
        changed step time."""
        t0 = self.time()
        t1 = self.time(batch, flops, bandwidth)
        return batch * t0 / t1 - 1.0 if t1 > 0 else 0.0

    @property
    def compute_share(self) -> float:
        """Of the step's time, how much halving the compute would save, doubled: 1.0 when the
        step is all compute."""
        t = self.time()
        return 2.0 * (t - self.time(flops=2.0)) / t if t > 0 else 0.0

    @property
    def memory_share(self) -> float:
        t = self.time()
        return 2.0 * (t - self.time(bandwidth=2.0)) / t if t > 0 else 0.0

    def with_overhead(
        self,
        step_ms: float,
        other: StepModel | None = None,
        other_ms: float | None = None,
        *,
        floor_ms: float,
    ) -> StepModel:
        """The same terms plus the step's fixed time: found from a second step of the series
        (another batch, another time: ``ms = overhead + scale * roofline`` through both), and
        never below ``floor_ms`` nor above half the step."""
        if not step_ms:
            return self
        r2 = self.time()
        overhead_ms = 0.0
        if other is not None and other_ms and step_ms > other_ms:
            r1 = other.time()
            if r2 > 1.1 * r1:
                overhead_ms = step_ms - (step_ms - other_ms) / (r2 - r1) * r2
        overhead_ms = min(max(overhead_ms, floor_ms), 0.5 * step_ms)
        return replace(self, overhead=overhead_ms * r2 / (step_ms - overhead_ms))

    @classmethod
    def from_counters(
        cls, flops: float, read_bytes: float, fixed_bytes: float | None, balance: float, how: str
    ) -> StepModel:
        """From one engine step's FLOPs and bytes read, the bytes read whatever the batch (None:
        not measured, all of them), and the machine balance (FLOP/byte)."""
        fixed = min(max(0.0, fixed_bytes if fixed_bytes is not None else read_bytes), read_bytes)
        return cls(
            flops / balance, fixed, read_bytes - fixed, OVERLAP, how, measured_growth=fixed_bytes is not None
        )

    @classmethod
    def from_tokens(
        cls, n: float, decode_seqs: float, context: float, kv_read_equiv_tokens: float, how: str
    ) -> StepModel:
        """Without counters or a line: in units of one token's matmuls, ``n`` tokens per step,
        the weights' read worth :data:`MACHINE_BALANCE` tokens (2 FLOPs per parameter per token
        against 2 bytes per BF16 parameter), and each of ``decode_seqs`` reading its
        ``context`` of KV cache, ``context / kv_read_equiv_tokens`` units each."""
        kv = decode_seqs * context / kv_read_equiv_tokens
        return cls(n, MACHINE_BALANCE, kv, OVERLAP, how, measured_growth=False)

    @classmethod
    def from_line(cls, a: float, b: float, n: float, kv_share: float, how: str, floor_ms: float) -> StepModel:
        """From the step-time line ``a + b*n`` (ms) at ``n`` tokens per step, with ``kv_share``
        of the per-token time spent reading the KV cache; the fixed ``a`` is the weights' read
        and the step's overhead (``floor_ms``, at most half of ``a``)."""
        per_token = b * n
        overhead = min(floor_ms, 0.5 * a)
        return cls(per_token * (1.0 - kv_share), a - overhead, per_token * kv_share, 0.0, how, overhead)
