"""The update: micro-batch invariance, mini-batch semantics, no duplication, and that learning goes uphill."""

import dataclasses

import pytest
import torch

from mirl.algorithms import get_preset
from mirl.config import AlgorithmConfig, Config, EnvEntry, RolloutConfig
from mirl.policy.hf import HFPolicy
from mirl.policy.tiny import tiny_model, tiny_tokenizer
from mirl.rollout import collate, run_episodes
from mirl.trainer import stages
from mirl.trainer.setup import build_learner
from mirl.trainer.update import UpdateInputs, accumulate_gradients, mini_batches, update
from mirl.types import EnvSpec


def _inputs(policy, env: str, preset_name: str = "grpo", seed: int = 0):
    config = RolloutConfig(max_turns=1, max_new_tokens=12)
    episodes = run_episodes(policy, [EnvSpec(env, 0), EnvSpec(env, 1)], 4, config, sampling_seed=seed)
    returns = stages.group_returns(episodes, 2, 4)
    batch = collate(episodes)
    preset = get_preset(preset_name)
    advantages, _, _ = stages.advantages(preset, batch, returns, episodes, None)
    return batch, UpdateInputs(batch, advantages, None, None, batch.old_logprobs, None)


def _float64(policy):
    model = tiny_model(dtype=torch.float64)
    model.load_state_dict({k: v.double() for k, v in policy.model.state_dict().items()})
    return HFPolicy(model, tiny_tokenizer(), device="cpu", dtype=torch.float64)


def test_micro_batch_1x8_and_8x1_give_the_same_gradient(formatted_policy, pick_env):
    policy = _float64(formatted_policy)
    batch, inputs = _inputs(formatted_policy, pick_env)
    inputs = dataclasses.replace(
        inputs, advantages=inputs.advantages.double(), old_logprobs=batch.old_logprobs.double()
    )
    assert float(inputs.advantages.abs().sum()) > 0  # the rewards differ, so the task gradient is not zero
    preset = get_preset("grpo")
    learner = build_learner(policy, Config(), preset)
    rows = torch.arange(batch.num_rows)
    grads = []
    for micro, share in ((1, False), (8, False), (8, True)):
        policy.share_prompts = share
        learner.optimizer.zero_grad(set_to_none=True)
        accumulate_gradients(learner, inputs, rows, preset, micro)
        grads.append(torch.cat([p.grad.flatten() for p in policy.model.parameters()]))
    assert grads[0].abs().max() > 0
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-12)
    # packed shared prompts: the same gradient up to the attention's float32 softmax, even in a float64 model
    assert (grads[2] - grads[0]).norm() <= 1e-6 * grads[0].norm()


def test_mini_batches_follow_the_reference_or_a_fixed_step_count():
    g = torch.Generator().manual_seed(0)
    sizes = [len(m) for m in mini_batches(128, AlgorithmConfig(mini_batch_size=32), g)]
    assert sizes == [32, 32, 32, 32]  # 128 rows -> 4 steps
    sizes = [len(m) for m in mini_batches(32, AlgorithmConfig(mini_batch_size=32), g)]
    assert sizes == [32]  # filtering to 32 rows -> 1 step (the reference's semantics)
    sizes = [len(m) for m in mini_batches(32, AlgorithmConfig(updates_per_iteration=4), g)]
    assert sizes == [8, 8, 8, 8]  # fixed updates: same step count, smaller steps
    rows = torch.cat(mini_batches(50, AlgorithmConfig(mini_batch_size=16), g))
    assert sorted(rows.tolist()) == list(range(50))  # every row exactly once: nothing is duplicated


@pytest.mark.parametrize("preset_name", ["ppo", "dapo", "grpo", "dr_grpo"])
def test_each_preset_changes_the_parameters(formatted_policy, pick_env, preset_name):
    preset = get_preset(preset_name)
    config = Config(algorithm=AlgorithmConfig(preset=preset_name, actor_lr=1e-3, critic_lr=1e-3))
    learner = build_learner(formatted_policy, config, preset)
    before = [p.detach().clone() for p in formatted_policy.model.parameters()]
    episodes = run_episodes(
        formatted_policy,
        [EnvSpec(pick_env, 0), EnvSpec(pick_env, 1)],
        4,
        RolloutConfig(max_turns=1, max_new_tokens=12),
        sampling_seed=1,
    )
    returns = stages.group_returns(episodes, 2, 4)
    batch = collate(episodes)
    advantages, targets, values = stages.advantages(preset, batch, returns, episodes, learner)
    inputs = UpdateInputs(batch, advantages, targets, values, batch.old_logprobs, None)
    stats = update(learner, inputs, preset, config.algorithm, torch.Generator().manual_seed(0))
    assert stats["train/optimizer_steps"] == 1.0 and stats["train/nonfinite_steps"] == 0.0
    changed = sum(not torch.equal(a, b) for a, b in zip(before, formatted_policy.model.parameters(), strict=True))
    assert changed > 0
    assert ("train/value_loss" in stats) == preset.use_critic
    # the first step is on-policy: ratios are exactly 1 up to the 1e-4 sampling/recompute agreement
    assert abs(stats["train/ratio_mean"] - 1.0) < 1e-3


def test_learning_goes_uphill(formatted_policy, pick_env):
    """GRPO on 'answer Left' (reward 1) must raise the success rate well beyond sampling noise."""
    preset = get_preset("grpo", entropy_coef=0.0)
    config = Config(envs=[EnvEntry(name=pick_env)], algorithm=AlgorithmConfig(preset="grpo", actor_lr=2e-3))
    learner = build_learner(formatted_policy, config, preset)
    rollout = RolloutConfig(max_turns=1, max_new_tokens=12)
    specs = [EnvSpec(pick_env, s) for s in range(4)]

    def success(seed: int) -> float:
        episodes = run_episodes(formatted_policy, specs, 16, rollout, sampling_seed=seed)
        return sum(e.success for e in episodes) / len(episodes)

    start = success(10_000)
    for iteration in range(8):
        episodes = run_episodes(formatted_policy, specs, 8, rollout, sampling_seed=iteration)
        returns = stages.group_returns(episodes, 4, 8)
        batch = collate(episodes)
        advantages, _, _ = stages.advantages(preset, batch, returns, episodes, learner)
        update(
            learner,
            UpdateInputs(batch, advantages, None, None, batch.old_logprobs, None),
            preset,
            config.algorithm,
            torch.Generator().manual_seed(iteration),
        )
    end = success(20_000)
    # 64 evaluation samples each: a binomial std of at most 0.0625; a rise of 0.3 is about 5 sigma
    assert end - start > 0.3, (start, end)


def test_update_through_the_gradient_buffer_equals_plain_steps(formatted_policy, pick_env):
    # two optimiser steps with gradients as views of one flat buffer, against fresh .grad tensors per step
    batch, inputs = _inputs(formatted_policy, pick_env)
    inputs = dataclasses.replace(
        inputs, advantages=inputs.advantages.double(), old_logprobs=batch.old_logprobs.double()
    )
    preset = get_preset("grpo")
    config = Config(algorithm=AlgorithmConfig(actor_lr=1e-3, mini_batch_size=4, micro_batch_size=3))
    buffered, plain = _float64(formatted_policy), _float64(formatted_policy)
    learner = build_learner(buffered, config, preset)
    update(learner, inputs, preset, config.algorithm, torch.Generator().manual_seed(0))
    assert all(p.grad is None for p in buffered.model.parameters())  # the buffer is gone with the update

    reference = build_learner(plain, config, preset)
    plain.model.train()
    params = [p for p in plain.model.parameters() if p.requires_grad]
    for rows in mini_batches(batch.num_rows, config.algorithm, torch.Generator().manual_seed(0)):
        accumulate_gradients(reference, inputs, rows, preset, config.algorithm.micro_batch_size)
        torch.nn.utils.clip_grad_norm_(params, config.algorithm.grad_clip)
        reference.optimizer.step()
        reference.optimizer.zero_grad(set_to_none=True)
    for a, b in zip(buffered.model.parameters(), plain.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(buffered.model.parameters(), _float64(formatted_policy).model.parameters(), strict=True)
    )
