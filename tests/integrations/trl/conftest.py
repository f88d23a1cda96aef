"""Shared pieces of the TRL integration tests: a scripted rollout with fixed token ids and rewards.

The scripted rollout makes both trainers of a comparison see exactly the same sequences, whatever order TRL's
sampler draws the prompts in: prompt ``g<p>`` always has the same prompt ids, and its k-th copy in a batch the same
completion ids and the reward ``REWARDS[p][k]``.
"""

from __future__ import annotations

import pytest
import torch

from mirl.policy.tiny import tiny_model, tiny_tokenizer

K = 4
# group 0 and 2 have spread; 1 and 3 have none (dropped with include_zero=False)
REWARDS = {"g0": [0.0, 1.0, 0.0, 1.0], "g1": [0.0, 0.0, 0.0, 0.0], "g2": [1.0, 0.5, 0.0, 0.2], "g3": [1.0] * 4}


def scripted_rollout(rewards: dict[str, list[float]]):
    """A TRL ``rollout_func`` returning fixed ids (6 prompt tokens, 3..6 completion tokens ending in eos)."""
    tok = tiny_tokenizer()

    def rollout(prompts, trainer):
        seen: dict[str, int] = {}
        prompt_ids, completion_ids, logprobs, reward = [], [], [], []
        for key in prompts:
            k = seen.get(key, 0)
            seen[key] = k + 1
            p = int(key[1:])
            prompt_ids.append([40 + p, 41, 42, 43, 44 + k % 2, 45])
            length = 2 + (p + 2 * k) % 4
            completion_ids.append([100 + 7 * p + 3 * k + j for j in range(length)] + [tok.eos_token_id])
            logprobs.append([0.0] * (length + 1))
            reward.append(rewards[key][k])
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs, "reward": reward}

    return rollout


def scripted_reward(completions, reward, **kwargs):
    return list(reward)


def grpo_args(tmp_path, filter: dict | None = None, **overrides):
    """A ``GRPOConfig``, or with ``filter`` (mirl filter keys) an ``SNRFilterGRPOConfig`` with ``filter_*`` set."""
    import trl  # only in .venv-trl; the test modules skip without it

    from mirl.integrations.trl import SNRFilterGRPOConfig

    kwargs = dict(
        output_dir=str(tmp_path),
        num_generations=K,
        max_steps=1,
        learning_rate=0.05,
        optim="sgd",
        bf16=False,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        beta=0.0,
        max_completion_length=8,
        max_grad_norm=0.0,  # no clipping: a clipped step would hide a wrong loss scale
    )
    kwargs.update(overrides)
    if filter is None:
        return trl.GRPOConfig(**kwargs)
    return SNRFilterGRPOConfig(**kwargs, **{f"filter_{key}": value for key, value in filter.items()})


def build(cls, tmp_path, groups, *, rewards=REWARDS, dtype=torch.float64, **kwargs):
    """A trainer of class ``cls`` over prompts ``groups`` (e.g. ["g0", "g2"]) with one generation = one step;
    ``filter={...}`` (mirl filter keys) makes its arguments an ``SNRFilterGRPOConfig``."""
    from datasets import Dataset

    kwargs.setdefault("per_device_train_batch_size", len(groups) * K)
    args = grpo_args(tmp_path, **kwargs)
    return cls(
        model=tiny_model(seed=0, dtype=dtype),
        reward_funcs=scripted_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": list(groups)}),
        processing_class=tiny_tokenizer(),
        rollout_func=scripted_rollout(rewards),
    )


def params(trainer) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


@pytest.fixture
def trl_build():
    return build


@pytest.fixture
def trl_args():
    return grpo_args


@pytest.fixture
def trl_params():
    return params
