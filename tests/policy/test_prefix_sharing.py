"""Group prefix sharing and multi-turn cache reuse change what is computed, never what is sampled."""

import pytest
import torch

from mirl.config import RolloutConfig
from mirl.policy.kv import PrefixStore
from mirl.policy.tiny import tiny_policy
from mirl.rollout import run_episodes
from mirl.types import EnvSpec, SamplingParams


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(seed=5)


def _generate(policy, prompts, sharing: bool, **sampling):
    policy.prefix_sharing = sharing
    try:
        params = SamplingParams(max_new_tokens=20, stop=(), seed=3, temperature=0.8, top_p=0.9, **sampling)
        return policy.generate(prompts, params)
    finally:
        policy.prefix_sharing = True


def _assert_same(with_sharing, without):
    assert [g.token_ids for g in with_sharing] == [g.token_ids for g in without]
    assert [g.finish_reason for g in with_sharing] == [g.finish_reason for g in without]
    for a, b in zip(with_sharing, without, strict=True):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-5)


def test_identical_prompts_are_encoded_once_and_sample_as_before(policy):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randint(3, 200, (n,), generator=g).tolist() for n in (30, 11))
    prompts = [a, a, b, a, b, a]  # two groups, interleaved, of different lengths (left padding)
    before = dict(policy.prefill_tokens)
    shared = _generate(policy, prompts, True)
    encoded = policy.prefill_tokens["encoded"] - before["encoded"]
    assert encoded == 30 + 11  # each distinct prompt once, not 4 * 30 + 2 * 11
    _assert_same(shared, _generate(policy, prompts, False))


def test_a_stored_turn_is_extended_not_encoded_again(policy):
    prompt = list(range(3, 40))
    with policy.prefix_cache() as store:
        first = policy.generate([prompt, prompt], SamplingParams(max_new_tokens=8, stop=(), seed=1))
        assert len(store.entries) == 2  # each row: prompt + reply without its last (never fed) token
        follow = [prompt + list(gen.token_ids) + [5, 6, 7] for gen in first]
        before = policy.prefill_tokens["encoded"]
        reused = policy.generate(follow, SamplingParams(max_new_tokens=8, stop=(), seed=2))
        assert policy.prefill_tokens["encoded"] - before == 2 * 4  # the last reply token and the 3 new ones
    assert policy._store is None  # the caches do not outlive the block
    plain = policy.generate(follow, SamplingParams(max_new_tokens=8, stop=(), seed=2))  # no store: full prefill
    _assert_same(reused, plain)


def test_prompts_of_very_different_lengths_are_encoded_in_buckets_and_sample_as_one_batch(policy, monkeypatch):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 200, (n,), generator=g).tolist() for n in (12, 150, 14, 160, 13)]
    before = dict(policy.prefill_tokens)
    bucketed = _generate(policy, prompts, True)
    padded = policy.prefill_tokens["padded"] - before["padded"]
    assert padded == 3 * 14 + 2 * 160  # two passes, not 5 * 160
    monkeypatch.setattr(policy, "_joinable", lambda: False)  # one left-padded pass, as for sliding-window caches
    before = dict(policy.prefill_tokens)
    _assert_same(bucketed, _generate(policy, prompts, True))
    assert policy.prefill_tokens["padded"] - before["padded"] == 5 * 160


def test_a_turn_mixing_stored_and_fresh_prompts_joins_their_caches(policy, monkeypatch):
    prompt = list(range(3, 40))
    with policy.prefix_cache():
        first = policy.generate([prompt, prompt], SamplingParams(max_new_tokens=8, stop=(), seed=1))
        extended = prompt + list(first[0].token_ids) + [5, 6, 7]  # 4 new tokens after the stored row
        fresh = list(range(50, 170))  # a history cut to fit the budget starts over: nothing stored matches
        sampling = SamplingParams(max_new_tokens=8, stop=(), seed=2)
        reused = policy.generate([extended, fresh], sampling)
    monkeypatch.setattr(policy, "_joinable", lambda: False)
    plain = policy.generate([extended, fresh], sampling)  # no store, one left-padded pass
    _assert_same(reused, plain)


@pytest.mark.parametrize("context_mode", ["full", "window", "memory"])
def test_rollouts_with_and_without_sharing_are_identical(policy, context_mode):
    config = RolloutConfig(max_turns=3, max_new_tokens=16, temperature=0.9, top_p=0.95, context_mode=context_mode)
    specs = [EnvSpec("frozenlake", 0), EnvSpec("frozenlake", 1)]
    runs, encoded = [], []
    for sharing in (True, False):
        policy.prefix_sharing = sharing
        before = policy.prefill_tokens["encoded"]
        runs.append(run_episodes(policy, specs, 3, config, sampling_seed=7))
        encoded.append(policy.prefill_tokens["encoded"] - before)
    policy.prefix_sharing = True
    shared, plain = runs
    assert sum(e.num_turns for e in shared) > len(shared)  # several turns were played
    for a, b in zip(shared, plain, strict=True):
        assert [t.context_ids for t in a.turns] == [t.context_ids for t in b.turns]
        assert [t.response_ids for t in a.turns] == [t.response_ids for t in b.turns]
        for ta, tb in zip(a.turns, b.turns, strict=True):
            torch.testing.assert_close(
                torch.tensor(ta.response_logprobs), torch.tensor(tb.response_logprobs), rtol=0, atol=1e-5
            )
    assert encoded[0] < encoded[1] / (3 if context_mode == "full" else 1.1)  # window, memory: turn 0 only


def test_store_takes_the_longest_prefix_and_keeps_one_token_to_encode():
    kv = lambda n: [(torch.zeros(2, n, 4), torch.zeros(2, n, 4))]  # noqa: E731
    store = PrefixStore(max_bytes=10**6)
    store.add((1, 2), kv(2))
    store.add((1, 2, 3, 4), kv(4))
    store.add((9,), kv(1))
    taken = store.take((1, 2, 3, 4))  # the whole prompt is stored: all but its last token are reused
    assert taken[0][0].shape[1] == 3 and (1, 2, 3, 4) not in store.entries
    assert store.take((1, 2, 5))[0][0].shape[1] == 2
    assert store.take((7, 7)) is None
    small = PrefixStore(max_bytes=150)
    small.add((1,), kv(1))  # 2 tensors x 8 floats x 4 bytes = 64 bytes
    small.add((2,), kv(2))  # 128 more bytes: over budget, the oldest entry goes
    assert list(small.entries) == [(2,)]


def _score_rollout(policy, episodes):
    """Every turn's reasoning under every turn's context: the cells the trajectory scope scores."""
    turns = [t for e in episodes for t in e.turns]
    prefixes = [t.context_ids for t in turns for _ in turns]
    continuations = [u.response_ids for _ in turns for u in turns]
    encoded = []
    forward = policy._backbone
    policy._backbone = lambda ids, *a, **k: encoded.append(ids.shape[-1]) or forward(ids, *a, **k)
    try:
        return policy.score(prefixes, continuations), encoded
    finally:
        policy._backbone = forward


def test_scoring_right_after_a_rollout_takes_the_contexts_from_its_caches(policy):
    config = RolloutConfig(max_turns=2, max_new_tokens=12, temperature=1.0)
    specs = [EnvSpec("frozenlake", 0), EnvSpec("frozenlake", 1)]
    episodes = run_episodes(policy, specs, 2, config, sampling_seed=3)
    fresh, fresh_passes = _score_rollout(policy, episodes)
    with policy.keep_rollout_caches():
        again = run_episodes(policy, specs, 2, config, sampling_seed=3)
        assert policy._kept is not None and policy._kept.entries  # the rollout's caches outlived it
        kept, kept_passes = _score_rollout(policy, again)
    assert policy._kept is None  # dropped with the block: a weight update would make them stale
    assert [t.response_ids for e in again for t in e.turns] == [t.response_ids for e in episodes for t in e.turns]
    for a, b in zip(kept, fresh, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)  # the same scores up to float rounding
    # the contexts are not encoded again, only their last token each: the model sees far fewer positions
    assert kept_passes.count(1) >= len({tuple(t.context_ids) for e in episodes for t in e.turns})
    assert sum(kept_passes) < sum(fresh_passes) / 2


def test_a_sampler_copy_in_another_dtype_keeps_nothing():
    policy = tiny_policy(seed=6)
    policy.sample_in("bfloat16")
    with policy.keep_rollout_caches():
        config = RolloutConfig(max_turns=2, max_new_tokens=8)
        run_episodes(policy, [EnvSpec("frozenlake", 0)], 2, config, sampling_seed=1)
        assert policy._kept is None  # its keys and values are the bfloat16 copy's, not the scorer's


def test_peek_leaves_the_entry_and_the_last_token_to_encode():
    kv = [(torch.arange(5.0).view(1, 5, 1), torch.zeros(1, 5, 1))]
    store = PrefixStore(max_bytes=10**6)
    store.add((1, 2, 3, 4, 5), kv)
    assert store.peek((1, 2, 3))[0][0].flatten().tolist() == [0.0, 1.0]  # keys of (1, 2): token 3 is encoded
    assert store.peek((1, 2, 3, 4, 5)) is not None and (1, 2, 3, 4, 5) in store.entries
    assert store.peek((1, 2, 9)) is None and store.peek((1,)) is None and store.peek((1, 2, 3, 4, 5, 6)) is None
