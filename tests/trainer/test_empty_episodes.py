"""Iterations whose episodes all end before the model writes a token train on nothing, and do not crash."""

import pytest

from mirl.policy.tiny import tiny_policy
from mirl.trainer import train


@pytest.mark.parametrize("preset", ["ppo", "grpo"])
def test_an_iteration_of_zero_turn_episodes_skips_the_update(pick_env, run_config, preset):
    # a context budget of 8 tokens is smaller than the first observation: every episode ends with zero turns,
    # every return is 0, so every group has zero spread; with the filter off all of them are kept
    config = run_config(
        f"empty-{preset}",
        f"algorithm.preset={preset}",
        "rollout.max_context_tokens=8",
        "filter.strategy=none",
        "trainer.iterations=1",
        "diagnostics.enabled=false",
    )
    policy = tiny_policy()
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    result = train(config, policy=policy)
    assert result.iterations_done == 1 and result.stop_reason is None
    assert result.final_metrics["rollout/turns_mean"] == 0.0
    assert "train/rows" not in result.final_metrics  # no update ran
    assert all((policy.model.state_dict()[k] == v).all() for k, v in before.items())
