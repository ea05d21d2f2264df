"""Each trace row's request: a prompt of the row's input length, built from the row's prefix
blocks so that rows sharing block hashes share those tokens (the trace's prefix reuse reaches
the server's prefix cache), and ``max_tokens`` = the row's output length.

* ``token_ids`` lengths: block ``h`` is ``block_size`` seeded token ids (seeded by ``h``); a
  row's prompt is its blocks' ids in order, cut to its length (a partial last block is that
  block's first ids), then ids of its own where its hashes do not cover its length. Exact.
* text lengths (``/tokenize``, a tokenizer file, an estimate): block ``h`` is a text of
  ``block_size`` tokens (seeded by ``h``); the row's full blocks but the last form a fixed
  prefix, and the rest (its last block, or its own text) is searched to make the whole request
  exactly the row's length, seeded by the last block's hash, so rows ending in the same block
  end alike. Block boundaries may merge tokens in a BPE tokenizer; the total is exact anyway.
* a row with its own ``prompt`` text sends it as it is (its length is what the server counts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tokenload.workload.errors import WorkloadError
from tokenload.workload.exact import token_id_prompt
from tokenload.workload.frames import PLAIN, Chat, Completion, Frame
from tokenload.workload.maker import PromptMaker
from tokenload.workload.plan import PlannedRequest
from tokenload.workload.seeds import derive_seed
from tokenload.workload.trace import TraceRow

__all__ = ["TracePrompts", "row_token_ids"]


def row_token_ids(
    row: TraceRow,
    index: int,
    block_size: int,
    seed: int,
    make_ids: Callable[[int, int], Sequence[int]],
    blocks: dict[int, Sequence[int]],
) -> list[int]:
    """Row ``index``'s prompt as token ids: its hash blocks' ids in order, cut to its input length
    (a partial last block is that block's first ids), then ids of its own where its hashes do not
    cover it. Block ``h`` is ``make_ids(block_size, derive_seed(seed, "trace-block", h))``, kept in
    ``blocks`` (one cache per id maker); the row's own ids ``make_ids(n, derive_seed(seed,
    "trace-row", index))``. ``make_ids(n, seed)``: ``n`` seeded ids of the target's vocabulary.
    The one rule for the client's replay (:class:`TracePrompts`) and the emulator's simulated one
    (``tokenload.sim.virtual_prompts``): rows sharing hashes share those tokens in both."""
    n = row.input_tokens
    ids: list[int] = []
    for h in row.hash_ids:
        if len(ids) >= n:
            break
        block = blocks.get(h)
        if block is None:
            block = blocks[h] = make_ids(block_size, derive_seed(seed, "trace-block", h))
        ids.extend(block[: n - len(ids)])
    if len(ids) < n:
        ids.extend(make_ids(n - len(ids), derive_seed(seed, "trace-row", index)))
    return ids


class TracePrompts:
    def __init__(self, maker: PromptMaker, *, chat: bool, block_size: int, seed: int = 0) -> None:
        self.maker = maker
        self.chat = chat
        self.block_size = block_size
        self.seed = seed
        self._id_blocks: dict[int, Sequence[int]] = {}
        self._text_blocks: dict[int, str] = {}

    def request(self, row: TraceRow, index: int) -> PlannedRequest:
        """The request for row ``index`` of the trace."""
        if row.prompt is not None:
            prompt = [{"role": "user", "content": row.prompt}] if self.chat else row.prompt
            return PlannedRequest(prompt, row.output_tokens, None, False, source="trace")
        if self.maker.method == "token_ids":
            if self.chat:
                raise WorkloadError("length_method token_ids: a trace replayed over chat needs text lengths")
            return PlannedRequest(
                row_token_ids(row, index, self.block_size, self.seed, self._make_ids, self._id_blocks),
                row.output_tokens,
                row.input_tokens,
                True,
                source="trace",
            )
        n, bs = row.input_tokens, self.block_size
        needed = -(-n // bs)  # blocks that hold the row's tokens
        if len(row.hash_ids) >= needed:  # the hashes cover the row: its last block is searched
            full, tail_seed = (
                row.hash_ids[: needed - 1],
                derive_seed(self.seed, "trace-tail", row.hash_ids[needed - 1]),
            )
        else:  # every hash is a whole block, then text of the row's own
            full, tail_seed = row.hash_ids, derive_seed(self.seed, "trace-row", index)
        prefix = "".join(self._text(h) for h in full)
        frame: Frame
        if self.chat:
            frame = Chat(system=prefix) if prefix else Chat()
        else:
            frame = Completion(prefix=prefix) if prefix else PLAIN
        if len(row.hash_ids) >= needed:
            made = self.maker.make(n, tail_seed, frame)  # shared blocks: the same text for the same hashes
        else:  # a row of its own: the cached prompt of its length, reshuffled (one count, not a search)
            made = self.maker.variant(n, tail_seed, frame)
        return PlannedRequest(made.render(), row.output_tokens, n, made.exact, source="trace")

    def _make_ids(self, n: int, seed: int) -> tuple[int, ...]:
        assert self.maker.vocab_size is not None
        made = token_id_prompt(n, seed, self.maker.vocab_size, reserved_ids=self.maker.reserved_ids)
        assert made.ids is not None
        return made.ids

    def _text(self, h: int) -> str:
        text = self._text_blocks.get(h)
        if text is None:
            text = self._text_blocks[h] = self.maker.content_text(
                self.block_size, derive_seed(self.seed, "trace-block", h)
            )
        return text
