"""The time one engine step takes, from the batch it runs: a roofline over the profile's GPU.

Compute: linear layers cost 2 FLOPs per non-embedding parameter per token (the embedding is a
gather, not a matmul), the LM head 2 x vocab x hidden per sampled sequence, and attention
4 x layers x heads x head_dim FLOPs per (query token, attended token) pair; a prefill chunk of
n tokens after c cached ones attends to n*c + n(n+1)/2 pairs (causal).
Memory: the weights are read once per step, every token's attention reads the KV cache of its
context, and every new token's K and V are written.
Step time = max(compute, memory) + (1 - overlap) x min(compute, memory) + fixed overhead + a
per-sampled-sequence overhead. The first two terms are the ideal roofline when overlap = 1, the
sum when overlap = 0 (see the A40 profile for why); the per-sequence overhead (output
processing, ``output_token_overhead_s``) is zero in the built-in GPU profiles.
The API server's time on a request (``frontend_request_s``) is not a step cost: a latency the
request spends before the engine sees it (20.5 ms fitted in the H200 profile, zero in the others).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tokenload.sim.profile import Profile

__all__ = ["BatchShape", "CostModel", "PrefillChunk", "StepCost", "step_cost"]


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """Part of one sequence's prompt computed in a step."""

    num_new_tokens: int
    num_context_tokens: int = 0  # tokens already in the KV cache before this chunk
    samples: bool = True  # whether the chunk ends the prompt, so the step samples a token for it


@dataclass(slots=True)
class BatchShape:
    """What one step computes: decode sequences (one token each) and prefill chunks."""

    num_decode_seqs: int = 0
    decode_context_tokens: int = 0  # sum over decode sequences of the tokens each attends to
    prefill_chunks: Sequence[PrefillChunk] = field(default_factory=tuple)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c.num_new_tokens for c in self.prefill_chunks)

    @property
    def num_tokens(self) -> int:
        return self.num_decode_seqs + self.num_prefill_tokens


@dataclass(frozen=True, slots=True)
class StepCost:
    """A step's time and the work behind it."""

    duration_s: float
    compute_s: float
    memory_s: float
    flops: float
    read_bytes: float
    write_bytes: float


@dataclass(frozen=True, slots=True)
class CostModel:
    """Per-profile constants, so costing a step is a handful of multiplications."""

    matmul_flops_per_token: float
    lm_head_flops_per_sample: float
    attention_flops_per_pair: float
    weight_bytes: float
    kv_bytes_per_token: float
    matmul_flops_per_s: float
    attention_flops_per_s: float
    stream_bytes_per_s: float
    kv_read_bytes_per_s: float
    overlap: float
    overhead_s: float
    per_sample_s: float = 0.0

    @classmethod
    def from_profile(cls, profile: Profile) -> CostModel:
        m, g, e = profile.model, profile.gpu, profile.efficiency
        if m.matmul_dtype == "fp8":
            if g.peak_fp8_flops_per_s is None:
                raise ValueError(f"{m.name} runs FP8 matmuls but {g.name} has no FP8 peak in the profile")
            matmul_peak = g.peak_fp8_flops_per_s
        else:
            matmul_peak = g.peak_bf16_flops_per_s
        lm_head_params = m.vocab_size * m.hidden_size
        return cls(
            matmul_flops_per_token=2.0 * (m.params - m.embedding_params),
            lm_head_flops_per_sample=2.0 * lm_head_params,
            attention_flops_per_pair=4.0 * m.num_layers * m.num_attention_heads * m.head_dim,
            weight_bytes=m.weight_bytes,
            kv_bytes_per_token=m.kv_bytes_per_token,
            matmul_flops_per_s=matmul_peak * e.prefill_matmul,
            attention_flops_per_s=g.peak_bf16_flops_per_s * e.attention,
            stream_bytes_per_s=g.memory_bandwidth_bytes_per_s * e.decode_bandwidth,
            kv_read_bytes_per_s=g.memory_bandwidth_bytes_per_s * e.kv_read,
            overlap=e.compute_memory_overlap,
            overhead_s=profile.step_overhead_s,
            per_sample_s=profile.output_token_overhead_s,
        )

    def cost(
        self,
        num_decode_seqs: int,
        decode_context_tokens: int,
        num_prefill_tokens: int = 0,
        prefill_attention_pairs: float = 0.0,
        prefill_context_tokens: int = 0,
        num_prefill_samples: int = 0,
    ) -> StepCost:
        """Cost from aggregates (what the engine accumulates while scheduling)."""
        num_tokens = num_decode_seqs + num_prefill_tokens
        if num_tokens == 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        matmul_flops = self.matmul_flops_per_token * num_tokens + self.lm_head_flops_per_sample * (
            num_decode_seqs + num_prefill_samples
        )
        attention_flops = self.attention_flops_per_pair * (decode_context_tokens + prefill_attention_pairs)
        compute_s = matmul_flops / self.matmul_flops_per_s + attention_flops / self.attention_flops_per_s
        kv_read_bytes = self.kv_bytes_per_token * (decode_context_tokens + prefill_context_tokens)
        write_bytes = self.kv_bytes_per_token * num_tokens
        memory_s = (
            self.weight_bytes + write_bytes
        ) / self.stream_bytes_per_s + kv_read_bytes / self.kv_read_bytes_per_s
        if compute_s >= memory_s:
            busy_s = compute_s + (1.0 - self.overlap) * memory_s
        else:
            busy_s = memory_s + (1.0 - self.overlap) * compute_s
        return StepCost(
            duration_s=busy_s + self.overhead_s + self.per_sample_s * (num_decode_seqs + num_prefill_samples),
            compute_s=compute_s,
            memory_s=memory_s,
            flops=matmul_flops + attention_flops,
            read_bytes=self.weight_bytes + kv_read_bytes,
            write_bytes=write_bytes,
        )

    def batch_cost(self, batch: BatchShape) -> StepCost:
        """Cost of a described batch."""
        pairs = 0.0
        context = 0
        samples = 0
        for chunk in batch.prefill_chunks:
            n, c = chunk.num_new_tokens, chunk.num_context_tokens
            pairs += n * c + n * (n + 1) / 2
            context += c
            samples += chunk.samples
        return self.cost(
            batch.num_decode_seqs,
            batch.decode_context_tokens,
            batch.num_prefill_tokens,
            pairs,
            context,
            samples,
        )


def step_cost(profile: Profile, batch: BatchShape) -> StepCost:
    """Time and work of one step running ``batch`` on ``profile``'s GPU."""
    return CostModel.from_profile(profile).batch_cost(batch)
