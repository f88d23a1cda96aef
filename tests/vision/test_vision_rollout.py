"""Rollouts with image observations: images placed once in the context, kept to the update, cache reuse exact."""

from __future__ import annotations

import pytest
import torch

from mirl.config import RolloutConfig
from mirl.rollout import run_episodes
from mirl.rollout.collate import collate
from mirl.rollout.vision import ImagesNeedVisionModel
from mirl.types import EnvSpec

SPECS = [EnvSpec("sokoban", 1, {"render": "image", "cell_size": 16}), EnvSpec("frozenlake", 2, {"render": "both"})]
CONFIG = RolloutConfig(max_turns=3, max_new_tokens=16)


def _play(policy, sharing: bool):
    policy.prefix_sharing = sharing
    policy.prefill_tokens = {"prompt": 0, "encoded": 0, "padded": 0}
    try:
        return run_episodes(policy, SPECS, 3, CONFIG, sampling_seed=0), dict(policy.prefill_tokens)
    finally:
        policy.prefix_sharing = True


def test_each_turn_places_its_observation_images(vl_policy):
    episodes, _ = _play(vl_policy, True)
    for episode in episodes:
        for t, turn in enumerate(episode.turns):
            assert len(turn.images) == t + 1  # full history: one board per user message so far
            for place in turn.images:
                span = turn.context_ids[place.start : place.start + place.image.num_tokens]
                assert set(span) == {vl_policy.image_token_id}
                block = place.image.block_ids
                begin = place.start - place.image.pad_offset
                assert turn.context_ids[begin : begin + len(block)] == block


def test_training_logprobs_equal_sampled_ones_with_and_without_cache_reuse(vl_policy):
    shared, shared_tokens = _play(vl_policy, True)
    plain, plain_tokens = _play(vl_policy, False)
    assert shared_tokens["encoded"] < plain_tokens["encoded"] == plain_tokens["prompt"]  # reuse skipped prefixes
    for episodes in (shared, plain):
        batch = collate(episodes, pad_id=vl_policy.pad_token_id)
        assert len(batch.images) == batch.num_rows and all(batch.images)
        with torch.no_grad():
            logp, _ = vl_policy.token_logprobs(
                batch.input_ids, batch.attention_mask, needed=batch.response_mask, **batch.image_args()
            )
        ratio = torch.exp(logp - batch.old_logprobs)[batch.response_mask]
        assert (ratio - 1).abs().max() < 1e-4  # PPO ratio 1 up to float rounding
    for a, b in zip(shared, plain, strict=True):  # the same samples either way
        assert [t.response_ids for t in a.turns] == [t.response_ids for t in b.turns]


def test_select_keeps_each_rows_images(vl_policy):
    episodes, _ = _play(vl_policy, True)
    batch = collate(episodes, pad_id=vl_policy.pad_token_id)
    part = batch.select(torch.tensor([False, True, False, False, True, False]))
    assert part.images == (batch.images[1], batch.images[4])
    assert part.image_args(torch.tensor([1]))["images"] == (batch.images[4],)


def test_a_text_model_refuses_image_observations():
    from mirl.policy.tiny import tiny_policy

    with pytest.raises(ImagesNeedVisionModel, match="render=text"):
        run_episodes(tiny_policy(), SPECS[:1], 1, CONFIG, sampling_seed=0)
