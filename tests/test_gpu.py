"""CUDA tests (marker ``gpu``; skipped without a GPU): the tiny model's log-probs on a GPU in bfloat16 against the
CPU in float32, for the sampler, the trainer's forward pass and the scorer, and the first update's ratio.

The tolerances calibrate themselves: the same weights on the CPU in bfloat16 give bfloat16's own rounding error
against float32 (``emulated``); the GPU in bfloat16 may differ from float32 by at most twice that plus 1e-3 nats,
since a GPU kernel rounds in another order but not more coarsely. A wrong position, cache row or mask shows as an
error many times larger. ``bash scripts/gpu-check.sh`` runs them first.
"""

import pytest
import torch

from mirl.algorithms import get_preset
from mirl.config import AlgorithmConfig, Config, RolloutConfig
from mirl.policy import HFPolicy
from mirl.policy.tiny import tiny_qwen2_model, tiny_tokenizer
from mirl.rollout import collate, run_episodes
from mirl.trainer.mismatch import behaviour_logprobs, measure
from mirl.trainer.setup import build_learner
from mirl.trainer.update import UpdateInputs, accumulate_gradients
from mirl.types import EnvSpec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: torch.cuda.is_available() is False"),
]
ROLLOUT = RolloutConfig(max_turns=2, max_new_tokens=24, temperature=1.0)
SPECS = [EnvSpec("frozenlake", seed, {"success_rate": 1.0}) for seed in range(3)]


def _policy(device: str, dtype: torch.dtype) -> HFPolicy:
    return HFPolicy(
        tiny_qwen2_model(hidden_size=128, num_layers=2, seed=4), tiny_tokenizer(), device=device, dtype=dtype
    )


def _batch(policy: HFPolicy):
    return collate(run_episodes(policy, SPECS, 4, ROLLOUT, sampling_seed=3), pad_id=policy.pad_token_id)


def _trainer_logp(policy: HFPolicy, batch) -> torch.Tensor:
    with torch.no_grad():
        logp, _ = policy.token_logprobs(batch.input_ids.to(policy.device), batch.attention_mask.to(policy.device))
    return logp.float().cpu()


def _mean_gap(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float((a - b).abs()[mask].mean())


def test_trainer_logprobs_on_the_gpu_in_bfloat16_match_the_cpu_in_float32():
    reference = _policy("cpu", torch.float32)
    batch = _batch(reference)  # sampled on the CPU in float32
    mask = batch.response_mask
    emulated = _mean_gap(_trainer_logp(_policy("cpu", torch.bfloat16), batch), batch.old_logprobs, mask)
    gpu = _mean_gap(_trainer_logp(_policy("cuda", torch.bfloat16), batch), batch.old_logprobs, mask)
    assert gpu <= 2 * emulated + 1e-3, f"GPU bf16 vs CPU fp32: {gpu:.4g} nats/token; CPU bf16: {emulated:.4g}"


def test_sampler_logprobs_on_the_gpu_in_bfloat16_match_the_cpu_in_float32():
    gpu_batch = _batch(_policy("cuda", torch.bfloat16))  # the GPU sampler's tokens and log-probs
    cpu16_batch = _batch(_policy("cpu", torch.bfloat16))
    float32 = _policy("cpu", torch.float32)
    gpu = _mean_gap(gpu_batch.old_logprobs, _trainer_logp(float32, gpu_batch), gpu_batch.response_mask)
    emulated = _mean_gap(cpu16_batch.old_logprobs, _trainer_logp(float32, cpu16_batch), cpu16_batch.response_mask)
    assert gpu <= 2 * emulated + 1e-3, f"GPU bf16 sampler vs CPU fp32: {gpu:.4g} nats/token; CPU bf16: {emulated:.4g}"
    assert gpu_batch.response_mask.sum() > 0


def test_scorer_on_the_gpu_in_bfloat16_matches_the_cpu_in_float32():
    tokenizer = tiny_tokenizer()
    prefixes = [tokenizer.encode(text) for text in ("Which way? Left", "The goal is right", "Up then down")]
    continuations = [tokenizer.encode(text) for text in (" go left now", " move right", " down")]
    grid = [(p, c) for p in prefixes for c in continuations]  # every prefix with every continuation
    score = lambda policy: torch.cat(policy.score(*zip(*grid, strict=True)))  # noqa: E731
    reference = score(_policy("cpu", torch.float32))
    emulated = float((score(_policy("cpu", torch.bfloat16)) - reference).abs().mean())
    gpu = float((score(_policy("cuda", torch.bfloat16)) - reference).abs().mean())
    assert gpu <= 2 * emulated + 1e-3, f"GPU bf16 scores vs CPU fp32: {gpu:.4g}; CPU bf16: {emulated:.4g}"


def _first_update(policy: HFPolicy, batch, correction: str) -> dict:
    config = Config(rollout=ROLLOUT, algorithm=AlgorithmConfig(rollout_correction=correction))
    preset = get_preset("grpo")
    learner = build_learner(policy, config, preset)
    old, weights, mismatch = behaviour_logprobs(learner, batch, config.algorithm, iteration=1)
    mismatch = mismatch or measure(learner, batch)[1]  # no correction: measured by a pass of its own here
    advantages = torch.where(batch.response_mask, 1.0, 0.0)  # (B, T)
    inputs = UpdateInputs(batch, advantages, None, None, old, None, rollout_weights=weights)
    metrics = accumulate_gradients(learner, inputs, torch.arange(batch.num_rows), preset, 4).metrics()
    policy.model.zero_grad(set_to_none=True)
    return metrics | mismatch


def test_first_update_ratio_on_the_gpu():
    policy = _policy("cuda", torch.bfloat16)
    batch = _batch(policy)
    sampled = _first_update(policy, batch, "none")  # ratio against the sampler's bf16 log-probs
    corrected = _first_update(policy, batch, "token_tis")  # against the trainer's own, weights for the gap
    gap = sampled["rollout/logp_diff_mean"]
    assert abs(sampled["train/ratio_mean"] - 1.0) <= 2 * gap + 1e-3, sampled
    # the trainer's own old log-probs: the same bf16 forward pass up to the micro-batch layout
    assert abs(corrected["train/ratio_mean"] - 1.0) < 1e-2 and corrected["train/approx_kl"] < 1e-3, corrected
    assert corrected["train/approx_kl"] <= sampled["train/approx_kl"] + 1e-6
