"""``seqmap.nn.kv_cache``: the cache's storage on its own (its use by attention is tested in test_multihead)."""

import torch

from seqmap.nn.kv_cache import KVCache

B, H, DH = 2, 4, 4


def test_cache_append_returns_everything_so_far():
    cache = KVCache()
    k1, v1 = torch.randn(B, 2, 3, DH), torch.randn(B, 2, 3, DH)
    k2, v2 = torch.randn(B, 2, 20, DH), torch.randn(B, 2, 20, DH)
    cache.append(k1, v1)
    k, v = cache.append(k2, v2)
    assert torch.equal(k, torch.cat([k1, k2], dim=2)) and torch.equal(v, torch.cat([v1, v2], dim=2))


def test_whole_storage_bias_hides_exactly_the_unused_slots():
    cache = KVCache()
    cache.append(torch.randn(2, H, 3, DH), torch.randn(2, H, 3, DH))
    cache.k[:, :, 3:], cache.v[:, :, 3:] = float("nan"), float("inf")  # what new memory may hold
    keys, values, bias = cache.whole()
    assert keys is cache.k and values is cache.v and bias.shape == (1, 1, 1, cache.k.size(2))
    assert torch.equal(bias[0, 0, 0, :3], torch.zeros(3)) and bool((bias[0, 0, 0, 3:] == float("-inf")).all())
    assert not keys[:, :, 3:].any() and not values[:, :, 3:].any()
