"""AppendLayer: a decode step writes into spare room; the keys and values are those torch.cat would build."""

import torch
from transformers import DynamicCache

from mirl.policy.kv import AppendLayer, appendable, reusable
from mirl.policy.tiny import tiny_policy
from mirl.types import SamplingParams


def _states(generator, rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(rows, 2, length, 4, generator=generator), torch.randn(rows, 2, length, 4, generator=generator)


def test_appends_in_place_and_equals_concatenation():
    g = torch.Generator().manual_seed(0)
    cache = DynamicCache()
    first = _states(g, 3, 5)
    cache.update(*first, 0)
    appendable(cache)
    layer = cache.layers[0]
    assert isinstance(layer, AppendLayer) and reusable(cache)
    keys, values = first
    pointers = set()
    for _ in range(AppendLayer.room + 3):  # fills the room once: one more buffer
        new = _states(g, 3, 1)
        cache.update(*new, 0)
        keys, values = torch.cat([keys, new[0]], dim=-2), torch.cat([values, new[1]], dim=-2)
        pointers.add(layer.keys.data_ptr())
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)
    assert len(pointers) == 2  # the first buffer (made at the first append), then one regrowth
    assert cache.get_seq_length() == 5 + AppendLayer.room + 3


def test_dropping_rows_and_cropping_keep_the_right_positions():
    g = torch.Generator().manual_seed(1)
    cache = DynamicCache()
    keys, values = _states(g, 4, 6)
    cache.update(keys, values, 0)
    appendable(cache)
    cache.batch_select_indices(torch.tensor([0, 2]))
    keys, values = keys[[0, 2]], values[[0, 2]]
    new = _states(g, 2, 2)
    cache.update(*new, 0)
    layer = cache.layers[0]
    assert torch.equal(layer.keys, torch.cat([keys, new[0]], dim=-2))
    pointer = layer.keys.data_ptr()
    cache.crop(-5)  # keeps positions 0-2 of 8; the next append overwrites what followed
    newer = _states(g, 2, 1)
    cache.update(*newer, 0)
    assert layer.keys.data_ptr() == pointer  # still the same buffer
    assert torch.equal(layer.values, torch.cat([values[:, :, :3], newer[1]], dim=-2))


def test_generation_with_append_layers_equals_a_copying_cache(monkeypatch):
    policy = tiny_policy(seed=3)
    prompts = [[5, 9, 14, 200, 31], [40, 41, 42], [5, 9, 14, 200, 31]]
    sampling = SamplingParams(max_new_tokens=20, stop=(), seed=7, temperature=1.0)
    appended = policy.generate(prompts, sampling)
    monkeypatch.setattr("mirl.policy.hf.appendable", lambda cache: cache)  # plain DynamicLayer: torch.cat per step
    copied = policy.generate(prompts, sampling)
    for a, b in zip(appended, copied, strict=True):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-6)
