"""A virtual sweep's workload and the requests it makes: lengths drawn as the client draws them,
prompt token ids from the emulator's byte vocabulary, a shared prefix, and a trace row's request
built as the client builds one. Pure."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from tokenload.sim.virtual import RequestSpec
from tokenload.workload.lengths import fitting_lengths, parse_length_spec
from tokenload.workload.trace import TraceRow
from tokenload.workload.trace_prompts import row_token_ids

__all__ = ["VirtualPrompts", "VirtualWorkload"]

#: Prompt token ids are drawn from the byte vocabulary's printable range (the emulator's tokenizer).
_TOKEN_LOW, _TOKEN_HIGH = 32, 126


@dataclass(frozen=True, slots=True)
class VirtualWorkload:
    """What each request asks for: length specs as ``--prompt-tokens``/``--output-tokens`` take
    them, and an optional shared prefix (``prefix_groups`` distinct ones of ``prefix_tokens``)."""

    prompt_tokens: str = "256"
    output_tokens: str = "128"
    prefix_tokens: int = 0
    prefix_groups: int = 1
    seed: int = 0


class VirtualPrompts:
    """Each request's prompt token ids and output length: drawn from the workload's length specs
    (:meth:`make`), or a trace row's (:meth:`for_row`)."""

    def __init__(self, workload: VirtualWorkload) -> None:
        self.rng = random.Random(workload.seed)
        self.prompt_len = parse_length_spec(workload.prompt_tokens, "prompt_tokens")
        self.output_len = parse_length_spec(workload.output_tokens, "output_tokens")
        self.prefixes = [
            [self.rng.randint(_TOKEN_LOW, _TOKEN_HIGH) for _ in range(workload.prefix_tokens)]
            for _ in range(max(1, workload.prefix_groups))
        ]
        self.prefix_tokens = workload.prefix_tokens
        self.seed = workload.seed
        self._blocks: dict[int, Sequence[int]] = {}

    def make(self, max_model_len: int) -> RequestSpec:
        rng = self.rng
        # As the client draws them (workload.plan.RequestPlanner): again until they fit.
        n, out, _ = fitting_lengths(
            lambda: (self.prompt_len.sample(rng), self.output_len.sample(rng)),
            max_model_len,
            names="--prompt-tokens/--output-tokens",  # tokenload plan's (and sweep's) options
        )
        # A prompt no longer than the prefix keeps part of it; the client draws such a length
        # again (workload.plan, min_input). Kept so as not to move the verdict grid's sweeps
        # (SWEEP_VERSION 4); the two differ only for prompt lengths that reach below the prefix.
        prefix = (
            self.prefixes[rng.randrange(len(self.prefixes))][: max(0, n - 1)] if self.prefix_tokens else []
        )
        body = [rng.randint(_TOKEN_LOW, _TOKEN_HIGH) for _ in range(n - len(prefix))]
        return RequestSpec(prefix + body, out, ignore_eos=True)

    def for_row(self, row: TraceRow, index: int, block_size: int, max_model_len: int) -> RequestSpec:
        """A trace row's request, its ids made by the client's rule for token ids
        (workload/trace_prompts.row_token_ids) from the emulator's byte vocabulary: its hash
        blocks' seeded ids in order, cut to its length, then ids of its own; ``max_tokens`` the
        row's output length. Rows sharing hashes share those tokens, so the trace's prefix reuse
        reaches the emulated prefix cache. (A row's own
        ``prompt`` text is counted as its input length: the emulator's byte tokenizer is not
        the server's.) A row the context cannot hold is refused: a real server answers it 400."""
        if row.input_tokens + row.output_tokens > max_model_len:
            raise ValueError(
                f"--trace: row {index} asks for {row.input_tokens} prompt + {row.output_tokens} output "
                f"tokens, more than the emulated server's context ({max_model_len}; --max-model-len in "
                "--sim-args)"
            )
        ids = row_token_ids(row, index, block_size, self.seed, _byte_ids, self._blocks)
        return RequestSpec(ids, row.output_tokens, ignore_eos=True)


def _byte_ids(n: int, seed: int) -> list[int]:
    """``n`` seeded token ids from the byte vocabulary's printable range."""
    r = random.Random(seed)
    return [r.randint(_TOKEN_LOW, _TOKEN_HIGH) for _ in range(n)]
