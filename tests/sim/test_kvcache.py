"""Paged KV cache: allocation, freeing, usage, prefix caching on full blocks."""

from __future__ import annotations

import pytest

from tokenload.sim.kvcache import KVCache, SeqBlocks, num_gpu_blocks_for
from tokenload.sim.profile import load_profile

pytestmark = pytest.mark.simulated_time


def test_blocks_from_profile() -> None:
    profile = load_profile("a40-qwen2.5-7b")
    blocks = num_gpu_blocks_for(profile, block_size=16, gpu_memory_utilization=0.9)
    expected = (
        profile.gpu.memory_bytes * 0.9 - profile.model.weight_bytes - profile.activation_reserve_bytes
    ) // (16 * 57_344)
    assert blocks == expected
    assert num_gpu_blocks_for(profile, gpu_memory_utilization=0.5) < blocks
    with pytest.raises(ValueError, match="no memory left"):
        num_gpu_blocks_for(profile, gpu_memory_utilization=0.3)


def test_allocate_append_free_and_usage() -> None:
    kv = KVCache(num_blocks=10, block_size=16)
    seq = SeqBlocks()
    assert kv.allocate(seq, 17)  # 2 blocks
    assert len(seq.block_ids) == 2 and kv.usage_ratio == pytest.approx(0.2)
    assert kv.allocate(seq, 32)  # still 2 blocks
    assert len(seq.block_ids) == 2
    assert kv.allocate(seq, 33)
    assert kv.num_used_blocks == 3
    other = SeqBlocks()
    assert not kv.allocate(other, 16 * 8)  # needs 8, only 7 free: nothing changes
    assert other.block_ids == [] and kv.num_free_blocks == 7
    assert kv.allocate(other, 16 * 7, reserve=0)
    assert kv.usage_ratio == 1.0
    kv.free(seq)
    assert seq.block_ids == [] and kv.num_free_blocks == 3


def test_prefix_hits_only_on_full_blocks() -> None:
    kv = KVCache(num_blocks=100, block_size=16, enable_prefix_caching=True)
    shared = list(range(40))  # 2 full blocks + 8 tokens
    first = SeqBlocks()
    assert kv.find_cached_prefix(first, [*shared, 1, 2], 41) == []
    assert kv.allocate(first, 42)
    kv.cache_full_blocks(first, [*shared, 1, 2], 42)
    second = SeqBlocks()
    hits = kv.find_cached_prefix(second, [*shared, 3, 4], 41)
    assert hits == first.block_ids[:2]
    # The partial third block is never shared.
    assert kv.allocate(second, 42, hits)
    assert second.block_ids[:2] == first.block_ids[:2] and second.block_ids[2] != first.block_ids[2]
    assert kv.num_used_blocks == 4  # two shared blocks counted once


def test_cached_blocks_survive_free_until_evicted() -> None:
    kv = KVCache(num_blocks=4, block_size=4, enable_prefix_caching=True)
    tokens = list(range(8))
    seq = SeqBlocks()
    kv.allocate(seq, 8)
    kv.cache_full_blocks(seq, tokens, 8)
    kv.free(seq)
    assert kv.usage_ratio == 0.0  # cached but unreferenced blocks count as free
    again = SeqBlocks()
    assert len(kv.find_cached_prefix(again, tokens, 8)) == 2
    # Fill the cache with other content: the cached blocks are evicted, the hit is gone.
    filler = SeqBlocks()
    assert kv.allocate(filler, 16)
    kv.free(filler)
    assert kv.find_cached_prefix(SeqBlocks(), tokens, 8) == []


def test_counters_count_what_the_caller_records() -> None:
    kv = KVCache(num_blocks=10, block_size=16, enable_prefix_caching=True)
    kv.record_prefix_query(40, 32)
    assert (kv.query_tokens, kv.hit_tokens, kv.query_blocks, kv.hit_blocks) == (40, 32, 2, 2)
