"""One worker's requests from a :class:`~tokenload.workload.spec.WorkloadSpec`.

The Locust user builds a :class:`RequestPlanner` once per worker (with the server-backed token
counter, when the target has ``/tokenize``) and asks it for each request's prompt and
``max_tokens``; for ``kind: conversation`` it asks for whole conversations instead. Every random
choice draws from the worker's own stream, so runs repeat and workers do not echo each other.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from tokenload.workload.conversation import Conversation
from tokenload.workload.datasets import DatasetStats, PromptPool, load_dataset
from tokenload.workload.errors import WorkloadError
from tokenload.workload.frames import PLAIN, Chat, Message, TokenCounter
from tokenload.workload.lengths import Fixed, fitting_lengths
from tokenload.workload.maker import PromptMaker
from tokenload.workload.prefix import SharedPrefixes
from tokenload.workload.seeds import derive_seed, stream_for
from tokenload.workload.spec import WorkloadSpec

__all__ = ["FIT_COUNTS", "PlannedRequest", "RequestPlanner", "merge_fit"]

#: What a planner did to the workload's draws, counted per process and summed over a run's
#: workers into summary.json's ``workload_fit``: requests planned; (input, output) draws drawn
#: again because they did not fit (prompt + output over the server's max_model_len, or a prompt
#: no longer than the shared prefix); dataset outputs cut to fit; dataset items left out.
FIT_COUNTS = (
    "planned",
    "redrawn_lengths",
    "clamped_output",
    "dataset_skipped_too_long",
    "dataset_skipped_empty",
)


def merge_fit(blocks: Sequence[dict[str, int | None] | None]) -> dict[str, int | None] | None:
    """The counts of several planners (or workers) added; ``max_model_len`` the largest seen.
    Empty or None blocks are left out; None when every block is."""
    blocks = [b for b in blocks if b]
    if not blocks:
        return None
    out: dict[str, int | None] = {k: sum(int(b.get(k) or 0) for b in blocks) for k in FIT_COUNTS}
    lens = [int(v) for b in blocks if (v := b.get("max_model_len")) is not None]
    out["max_model_len"] = max(lens) if lens else None
    return out


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """What one request asks for. ``prompt`` goes to the body's ``prompt`` (a string or token
    ids) or, for chat, ``messages``; ``input_tokens`` is its length when known."""

    prompt: str | list[Message] | list[int]
    max_tokens: int
    input_tokens: int | None
    exact: bool
    group: int | None = None
    source: str | None = None


class RequestPlanner:
    """Requests for worker ``worker_index`` of ``n_workers``.

    ``count_tokens`` is the server's ``/tokenize`` (a
    :class:`~tokenload.workload.tokenize_api.TokenizeClient`), or None to estimate lengths;
    ``max_model_len`` (e.g. the client's, after its first call) bounds every request.
    """

    def __init__(
        self,
        spec: WorkloadSpec,
        *,
        chat: bool,
        worker_index: int = 0,
        n_workers: int = 1,
        count_tokens: TokenCounter | None = None,
        max_model_len: int | None = None,
        model: str = "",
        render_chat: Callable[[Sequence[Message]], str] | None = None,
        reserved_ids: Collection[int] = (),
    ) -> None:
        self.spec = spec
        self.chat = chat
        self.max_model_len = max_model_len
        if chat and spec.length_method == "token_ids":
            raise WorkloadError("length_method: token_ids needs the completions API, not chat")
        self.maker = PromptMaker(
            model=model,
            method=spec.length_method,
            count_tokens=count_tokens,
            tokenizer_file=spec.resolve_path(spec.tokenizer_file) if spec.tokenizer_file else None,
            render_chat=render_chat,
            vocab_size=spec.vocab_size,
            reserved_ids=reserved_ids,
        )
        seed = spec.seed
        self._inputs = stream_for(worker_index, seed, "input")
        self._outputs = stream_for(worker_index, seed, "output")
        self._prompts = stream_for(worker_index, seed, "prompt")
        self.input_dist = spec.input_distribution()
        self.output_dist = spec.output_distribution()
        self.stats = DatasetStats()
        self.planned = 0
        self.redrawn_lengths = 0
        self.clamped_output = 0
        self.prefixes: SharedPrefixes | None = None
        self.pool: PromptPool | None = None
        fixed = isinstance(self.input_dist, Fixed) and isinstance(self.output_dist, Fixed)
        if fixed and spec.kind in ("synthetic", "shared_prefix"):
            self._check_fits(int(self.input_dist.value), int(self.output_dist.value))
        if spec.kind == "shared_prefix":
            p = spec.prefix_spec
            self.prefixes = SharedPrefixes(
                self.maker,
                groups=p.groups,
                prefix_tokens=p.tokens,
                chat=chat,
                selection=p.selection,
                seed=seed,
                first_group=worker_index,
            )
        uses_dataset = spec.kind == "dataset" or spec.conversation_spec.source == "dataset"
        if spec.dataset is not None and uses_dataset:
            d = spec.dataset
            items = load_dataset(
                spec.resolve_path(d.path),
                d.format,
                d.column,
                worker_index=worker_index,
                n_workers=n_workers,
                shard_mode=d.shard,
                shuffle_seed=derive_seed(seed, "dataset") if d.shuffle else None,
                limit=d.limit,
                stats=self.stats,
            )
            self.pool = PromptPool(
                items,
                chat=chat,
                count_tokens=self.maker.count if self.maker.exact and spec.kind == "dataset" else None,
                max_model_len=max_model_len,
                stats=self.stats,
                shuffle_seed=derive_seed(seed, "dataset-pass", worker_index) if d.shuffle else None,
            )

    def _check_fits(self, n_in: int, n_out: int) -> None:
        if self.max_model_len is not None and n_in + n_out > self.max_model_len:
            raise WorkloadError(
                f"input_tokens/output_tokens: {n_in} + {n_out} tokens exceed the model's max_model_len of "
                f"{self.max_model_len}"
            )

    def _lengths(self) -> tuple[int, int]:
        n_in, n_out, redrawn = fitting_lengths(
            lambda: (self.input_dist.sample(self._inputs), self.output_dist.sample(self._outputs)),
            self.max_model_len,
            # Every prompt is its group's prefix and a part of its own (SharedPrefixes.next).
            self.prefixes.prefix_tokens + 1 if self.prefixes is not None else 1,
        )
        self.redrawn_lengths += redrawn
        return n_in, n_out

    def fit_counts(self) -> dict[str, int | None]:
        """What this planner did to the workload's draws so far (:data:`FIT_COUNTS`), and the
        max_model_len it fitted them to."""
        return {
            "planned": self.planned,
            "redrawn_lengths": self.redrawn_lengths,
            "clamped_output": self.clamped_output,
            "dataset_skipped_too_long": self.stats.skipped_too_long,
            "dataset_skipped_empty": self.stats.skipped_empty,
            "max_model_len": self.max_model_len,
        }

    def next(self) -> PlannedRequest:
        """The next request (kinds synthetic, dataset and shared_prefix)."""
        kind = self.spec.kind
        if kind == "conversation":
            raise WorkloadError(
                "kind conversation: run it with a ConversationUser (locustfiles/conversation.py); "
                "this user sends single requests (the planner's new_conversation() drives turns)"
            )
        self.planned += 1
        if kind == "dataset":
            assert self.pool is not None
            item, n = self.pool.next()
            n_out = self.output_dist.sample(self._outputs)
            if n is not None and self.max_model_len is not None and n + n_out > self.max_model_len:
                n_out = self.max_model_len - n
                self.clamped_output += 1
            return PlannedRequest(item.request(self.chat), n_out, n, n is not None, source=item.source)
        n_in, n_out = self._lengths()
        if self.prefixes is not None:
            req = self.prefixes.next(n_in, self._prompts)
            return PlannedRequest(req.prompt.render(), n_out, n_in, req.prompt.exact, group=req.group)
        frame = Chat() if self.chat else PLAIN
        prompt = self.maker.variant(n_in, self._prompts.getrandbits(63), frame)
        return PlannedRequest(prompt.render(), n_out, n_in, prompt.exact)

    def output_tokens(self) -> int:
        """A ``max_tokens`` draw, e.g. for a conversation's next turn."""
        return self.output_dist.sample(self._outputs)

    def new_conversation(self, conversation_id: str = "") -> Conversation:
        """A fresh conversation (kind conversation): synthetic turns or the next dataset one."""
        c = self.spec.conversation_spec
        think = self.spec.think_time_distribution()
        if c.source == "dataset":
            assert self.pool is not None
            item, _ = self.pool.next()
            return Conversation.from_item(item, think_time=think, max_turns=c.turns)
        return Conversation.synthetic(
            c.turns,
            self.spec.user_tokens_distribution(),
            self._prompts,
            make_text=self.maker.content_text,
            think_time=think,
            conversation_id=conversation_id,
        )

    @property
    def requested_hit_rate(self) -> float | None:
        """Shared-prefix tokens over prompt tokens requested so far (kind shared_prefix)."""
        return self.prefixes.requested_hit_rate if self.prefixes is not None else None
