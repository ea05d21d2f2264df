"""A paged KV cache as vLLM keeps it: fixed-size blocks, allocated as sequences grow, freed when
they finish or are preempted, with optional prefix caching of full blocks.

Every operation costs O(blocks it touches); nothing scans the whole pool per step.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from tokenload.sim.profile import Profile

__all__ = ["KVCache", "SeqBlocks", "num_gpu_blocks_for"]


def num_gpu_blocks_for(profile: Profile, block_size: int = 16, gpu_memory_utilization: float = 0.9) -> int:
    """Blocks vLLM would allocate: memory it may use, less weights and the activation reserve,
    divided by one block's KV bytes."""
    usable_bytes = (
        profile.gpu.memory_bytes * gpu_memory_utilization
        - profile.model.weight_bytes
        - profile.activation_reserve_bytes
    )
    block_bytes = block_size * profile.model.kv_bytes_per_token
    blocks = int(usable_bytes // block_bytes)
    if blocks <= 0:
        raise ValueError(
            f"no memory left for the KV cache on {profile.gpu.name} with {profile.model.name} "
            f"at gpu_memory_utilization={gpu_memory_utilization}"
        )
    return blocks


class SeqBlocks:
    """The blocks one sequence holds, in order, and the hash chain of its full blocks."""

    __slots__ = ("block_hashes", "block_ids", "num_registered", "num_slots")

    def __init__(self) -> None:
        self.block_ids: list[int] = []
        self.num_slots = 0  # tokens the blocks can hold: len(block_ids) * block_size
        self.block_hashes: list[int] = []  # hashes of its leading full blocks, computed once each
        self.num_registered = 0  # leading blocks already offered to the prefix cache


class KVCache:
    """The block pool. Usage counts blocks held by sequences; blocks that only keep a cached
    prefix (nobody references them) are free for allocation, evicted least recently used first,
    and are not counted as used, as in vLLM."""

    def __init__(self, num_blocks: int, block_size: int = 16, enable_prefix_caching: bool = False) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        # Popping from the end hands out low block ids first; only a convenience for debugging.
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._ref_count = [0] * num_blocks
        self._block_hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}  # block hash -> block id holding that content
        # Prefix-cache counters, in tokens as vLLM exports them, plus blocks for V0's hit rate.
        self.query_tokens = 0
        self.hit_tokens = 0
        self.query_blocks = 0
        self.hit_blocks = 0

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take (never used, or holding only an evictable cached prefix)."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def usage_ratio(self) -> float:
        """Fraction of blocks held by sequences: vLLM's kv_cache_usage_perc (1.0 = full)."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def find_cached_prefix(self, seq: SeqBlocks, token_ids: Sequence[int], max_tokens: int) -> list[int]:
        """Block ids of the longest cached prefix of ``token_ids``: full blocks only, at most
        ``max_tokens`` tokens. Hashes computed here are kept in ``seq``, so each block of a
        sequence is hashed once however often the lookup is retried."""
        if not self.enable_prefix_caching:
            return []
        bs = self.block_size
        hashes = seq.block_hashes
        num_full = min(len(token_ids), max_tokens) // bs
        parent = hashes[-1] if hashes else 0
        for i in range(len(hashes), num_full):
            parent = hash((parent, tuple(token_ids[i * bs : (i + 1) * bs])))
            hashes.append(parent)
        hits: list[int] = []
        cached = self._cached
        for i in range(num_full):
            block = cached.get(hashes[i])
            if block is None:
                break
            hits.append(block)
        return hits

    def record_prefix_query(self, num_query_tokens: int, num_hit_tokens: int) -> None:
        """Count one admitted request's lookup (tokens queried, tokens found), as vLLM does."""
        self.query_tokens += num_query_tokens
        self.hit_tokens += num_hit_tokens
        self.query_blocks += num_query_tokens // self.block_size
        self.hit_blocks += num_hit_tokens // self.block_size

    def can_allocate(
        self, seq: SeqBlocks, num_tokens: int, cached_blocks: Sequence[int] = (), reserve: int = 0
    ) -> bool:
        """Whether ``seq`` can grow to hold ``num_tokens`` tokens, taking ``cached_blocks`` as its
        prefix, and still leave ``reserve`` blocks free."""
        needed = self.blocks_for_tokens(num_tokens) - len(seq.block_ids) - len(cached_blocks)
        # Cached blocks nobody holds are counted as free; taking them removes them from the pool.
        revived = sum(1 for b in cached_blocks if self._ref_count[b] == 0)
        return needed <= self.num_free_blocks - revived - reserve

    def allocate(
        self, seq: SeqBlocks, num_tokens: int, cached_blocks: Sequence[int] = (), reserve: int = 0
    ) -> bool:
        """Grow ``seq`` to hold ``num_tokens`` tokens (taking ``cached_blocks`` first); False, with
        nothing changed, when the free blocks do not suffice."""
        ids = seq.block_ids
        if not cached_blocks and num_tokens <= seq.num_slots:
            return True
        if not self.can_allocate(seq, num_tokens, cached_blocks, reserve):
            return False
        ref = self._ref_count
        for block in cached_blocks:
            if ref[block] == 0:
                del self._evictable[block]
            ref[block] += 1
            ids.append(block)
        for _ in range(self.blocks_for_tokens(num_tokens) - len(ids)):
            block = self._take_block()
            ref[block] = 1
            ids.append(block)
        seq.num_slots = len(ids) * self.block_size
        return True

    def _take_block(self) -> int:
        if self._free:
            return self._free.pop()
        # Evict the least recently freed cached block: its content can no longer be hit.
        block, _ = self._evictable.popitem(last=False)
        h = self._block_hash[block]
        if h is not None and self._cached.get(h) == block:
            del self._cached[h]
        self._block_hash[block] = None
        return block

    def cache_full_blocks(self, seq: SeqBlocks, token_ids: Sequence[int], num_tokens: int) -> None:
        """Register the full blocks among the first ``num_tokens`` tokens for prefix reuse."""
        bs = self.block_size
        num_full = min(num_tokens // bs, len(seq.block_ids))
        if not self.enable_prefix_caching or num_full <= seq.num_registered:
            return
        hashes = seq.block_hashes
        parent = hashes[-1] if hashes else 0
        for i in range(len(hashes), num_full):
            parent = hash((parent, tuple(token_ids[i * bs : (i + 1) * bs])))
            hashes.append(parent)
        block_hash = self._block_hash
        for i in range(seq.num_registered, num_full):
            block = seq.block_ids[i]
            if block_hash[block] is not None:
                continue
            h = hashes[i]
            block_hash[block] = h
            # Same content already cached in another block: keep the first, as vLLM does.
            self._cached.setdefault(h, block)
        seq.num_registered = num_full

    def free(self, seq: SeqBlocks) -> None:
        """Release all of ``seq``'s blocks; cached ones stay reusable until evicted."""
        ref = self._ref_count
        block_hash = self._block_hash
        # Tail blocks first, so a prefix's later blocks are evicted before its earlier ones.
        for block in reversed(seq.block_ids):
            ref[block] -= 1
            if ref[block] == 0:
                if block_hash[block] is not None and self._cached.get(block_hash[block]) == block:
                    self._evictable[block] = None
                else:
                    block_hash[block] = None
                    self._free.append(block)
        seq.block_ids = []
        seq.num_slots = 0
        seq.num_registered = 0
