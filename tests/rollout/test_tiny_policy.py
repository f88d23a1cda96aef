"""Token-in, token-out with a real sampler: the tiny random Llama through HFPolicy.

Re-scoring the collated batch with the same weights must give back the sampled log-probs: the training sequence
is exactly the token stream the model sampled from.
"""

import pytest
import torch

from mirl.config import RolloutConfig
from mirl.policy.tiny import tiny_policy
from mirl.rollout import collate, run_episodes
from mirl.types import EnvSpec

SPECS = [EnvSpec("frozenlake", 0), EnvSpec("sokoban", 1)]


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(seed=0)


def rollout(policy, seed=11, **overrides):
    cfg = RolloutConfig(**{"max_turns": 2, "max_new_tokens": 12, **overrides})
    return run_episodes(policy, SPECS, 2, cfg, sampling_seed=seed)


def recomputed_gap(policy, episodes) -> tuple[float, torch.Tensor]:
    batch = collate(episodes, pad_id=policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask)  # (B, T)
    gap = (logp - batch.old_logprobs)[batch.response_mask].abs().max()
    return float(gap), batch


def test_full_mode_relogprobs_match_the_sampled_ones(policy):
    episodes = rollout(policy)
    assert all(ep.num_turns == 2 for ep in episodes)
    gap, batch = recomputed_gap(policy, episodes)
    assert gap < 1e-4
    assert batch.num_rows == len(episodes)  # contexts nest: one row per trajectory
    for b, ep in enumerate(episodes):
        for turn in ep.turns:
            assert batch.input_ids[b, : len(turn.context_ids)].tolist() == list(turn.context_ids)


def test_window_mode_rows_per_turn_also_match(policy):
    episodes = rollout(policy, context_mode="window", context_window=1)
    gap, batch = recomputed_gap(policy, episodes)
    assert gap < 1e-4
    assert batch.num_rows == sum(ep.num_turns for ep in episodes)


def test_sampling_seed_reproduces_the_rollout(policy):
    assert rollout(policy, seed=5, max_turns=1) == rollout(policy, seed=5, max_turns=1)
