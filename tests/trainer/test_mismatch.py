"""The sampler/trainer mismatch on the CPU: sampling in bfloat16 and training in float32 makes a real one.

Float32 sampling on the trainer's own weights agrees with the trainer's forward pass to float precision (the KV-cache
decode and the full forward add in other orders); a bfloat16 sampler copy rounds every weight and activation, so
the same tokens get log-probs that differ by a measurable amount. The trainer measures it and, with a correction,
trains against its own log-probs with importance weights.
"""

import json

import pytest
import torch

from mirl.algorithms import get_preset
from mirl.algorithms.rollout_correction import mismatch_stats
from mirl.catalogue import unknown_keys
from mirl.config import AlgorithmConfig, Config, RolloutConfig
from mirl.config_files import load_config
from mirl.policy.tiny import tiny_policy
from mirl.rollout import collate, run_episodes
from mirl.trainer import stages, train
from mirl.trainer.mismatch import behaviour_logprobs, measured_in_update
from mirl.trainer.setup import build_learner, resolve_rollout_correction
from mirl.trainer.update import UpdateInputs, mini_batches, update
from mirl.types import EnvSpec

ROLLOUT = RolloutConfig(max_turns=2, max_new_tokens=16, temperature=1.0)


def _batch(sampler_dtype: str):
    policy = tiny_policy(seed=3)
    policy.sample_in(sampler_dtype)
    episodes = run_episodes(policy, [EnvSpec("frozenlake", 0), EnvSpec("frozenlake", 1)], 3, ROLLOUT, sampling_seed=5)
    return policy, collate(episodes, pad_id=policy.pad_token_id)


def _measure(sampler_dtype: str, correction: str = "none", cap: float = 2.0):
    policy, batch = _batch(sampler_dtype)
    config = Config(rollout=ROLLOUT, algorithm=AlgorithmConfig(rollout_correction=correction))
    learner = build_learner(policy, config, get_preset("grpo"))
    algo = AlgorithmConfig(rollout_correction=correction, rollout_correction_cap=cap)
    return batch, behaviour_logprobs(learner, batch, algo, iteration=1)


def _update_measuring(sampler_dtype: str, mini_batch_size: int = 64):
    """The update's own mismatch metrics (no correction) and how many forward passes it ran."""
    policy, batch = _batch(sampler_dtype)
    algo = AlgorithmConfig(rollout_correction="none", mini_batch_size=mini_batch_size, micro_batch_size=2)
    preset = get_preset("grpo")
    learner = build_learner(policy, Config(rollout=ROLLOUT, algorithm=algo), preset)
    explicit = stages.old_logprobs(learner, batch, recompute=True)  # the pass the update no longer needs
    passes = []
    forward = policy.token_logprobs
    policy.token_logprobs = lambda *a, **k: passes.append(1) or forward(*a, **k)
    advantages = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(0))
    inputs = UpdateInputs(batch, advantages, None, None, batch.old_logprobs, None, measure_mismatch=True)
    metrics = update(learner, inputs, preset, algo, torch.Generator().manual_seed(0))
    return batch, explicit, metrics, len(passes)


def test_float32_sampling_matches_the_trainer_to_float_precision():
    batch, explicit, metrics, passes = _update_measuring("same")
    assert metrics["rollout/logp_diff_max"] < 5e-5
    assert metrics["rollout/ratio_outside_frac"] == 0.0
    assert 0.0 <= metrics["rollout/mismatch_kl"] < 1e-6
    assert passes == -(-batch.num_rows // 2)  # one training pass per micro-batch of 2 and no measuring pass


def test_the_update_measures_what_a_separate_pass_would():
    batch, explicit, metrics, _ = _update_measuring("bfloat16")
    mask = batch.response_mask
    expected = mismatch_stats(explicit, batch.old_logprobs, mask)
    for name, value in expected.items():  # the whole batch fits the first optimiser step
        assert metrics[f"rollout/{name}"] == pytest.approx(float(value), rel=1e-4, abs=1e-7)
    assert metrics["rollout/logp_diff_mean"] > 1e-3  # a real mismatch, not two zeros


def test_with_several_mini_batches_the_first_step_rows_are_measured():
    batch, explicit, metrics, _ = _update_measuring("bfloat16", mini_batch_size=2)
    # the update draws its mini-batches from a generator seeded 0: the first one is these rows
    rows = mini_batches(batch.num_rows, AlgorithmConfig(mini_batch_size=2), torch.Generator().manual_seed(0))[0]
    assert len(rows) == 2 < batch.num_rows
    expected = mismatch_stats(explicit[rows], batch.old_logprobs[rows], batch.response_mask[rows])
    for name, value in expected.items():
        assert metrics[f"rollout/{name}"] == pytest.approx(float(value), rel=1e-4, abs=1e-7)
    whole = mismatch_stats(explicit, batch.old_logprobs, batch.response_mask)["logp_diff_mean"]
    assert metrics["rollout/logp_diff_mean"] != pytest.approx(float(whole), rel=1e-4)  # those rows, not all


def test_bfloat16_sampling_gives_a_real_mismatch_and_the_correction_reweights_it():
    batch, (old, weights, metrics) = _measure("bfloat16", "token_tis", cap=1.02)
    mask = batch.response_mask
    # bfloat16 keeps 8 mantissa bits: log-probs move by about 1e-2, far above float32's 1e-5
    assert metrics["rollout/logp_diff_mean"] > 1e-3 and metrics["rollout/logp_diff_max"] > 1e-2
    assert metrics["rollout/mismatch_kl"] > 1e-5
    # the ratio is taken against the trainer's own log-probs, and the weights are pi_old / mu truncated at 1.02
    assert not torch.equal(old[mask], batch.old_logprobs[mask])
    expected = (old - batch.old_logprobs).exp().clamp(max=1.02)
    torch.testing.assert_close(weights[mask], expected[mask], rtol=1e-6, atol=0)
    assert 0.0 < metrics["rollout/correction_frac"] < 1.0  # some tokens' ratios exceed 1.02, not all


def test_auto_correction_follows_the_sampler():
    policy = tiny_policy()
    config = load_config(None, [])
    assert resolve_rollout_correction(config, policy) == "none"  # float32 sampler: measured mismatch ~1e-6
    policy.sample_in("bfloat16")
    assert resolve_rollout_correction(config, policy) == "token_tis"
    assert resolve_rollout_correction(load_config(None, ["algorithm.rollout_correction=none"]), policy) == "none"


def test_mismatch_is_measured_only_when_scheduled():
    policy, batch = _batch("same")
    learner = build_learner(policy, Config(rollout=ROLLOUT), get_preset("grpo"))
    off = AlgorithmConfig(mismatch_every=0, rollout_correction="none")
    # no correction: no pass before the update, whatever the schedule
    assert behaviour_logprobs(learner, batch, off, iteration=1) == (batch.old_logprobs, None, {})
    assert not measured_in_update(learner, off, iteration=1)
    every_two = AlgorithmConfig(mismatch_every=2)
    assert not measured_in_update(learner, every_two, iteration=3)
    assert measured_in_update(learner, every_two, iteration=4)
    recompute = AlgorithmConfig(mismatch_every=1, recompute_old_logprobs=True)
    assert "rollout/mismatch_kl" in behaviour_logprobs(learner, batch, recompute, iteration=1)[2]
    assert not measured_in_update(learner, recompute, iteration=1)  # the pass measured it already


def test_a_bfloat16_sampling_run_logs_the_mismatch_and_the_correction(tmp_path, pick_env, run_config):
    config = run_config(
        "bf16",
        "model.sampler_dtype=bfloat16",
        "trainer.iterations=2",
        "diagnostics.enabled=false",
        "filter.strategy=none",
    )
    policy = tiny_policy(seed=2)
    policy.sample_in(config.model.sampler_dtype)
    train(config, policy=policy)
    lines = [json.loads(line) for line in (tmp_path / "bf16" / "metrics.jsonl").read_text().splitlines()]
    assert unknown_keys({k for line in lines for k in line}) == []
    for line in lines:
        assert line["rollout/logp_diff_mean"] > 1e-3 and "rollout/correction_frac" in line  # auto: token_tis
    yaml = (tmp_path / "bf16" / "config.yaml").read_text()
    assert "sampler_dtype: bfloat16" in yaml and "rollout_correction: auto" in yaml


def test_sampler_dtype_is_checked():
    with pytest.raises(ValueError, match="model.sampler_dtype"):
        load_config(None, ["model.sampler_dtype=int8"])
    with pytest.raises(ValueError, match="set model.sampler_dtype=same"):
        load_config(None, ["model.sampler_dtype=bfloat16", "model.backend=vllm"])
    with pytest.raises(ValueError, match="algorithm.rollout_correction_cap"):
        load_config(None, ["algorithm.rollout_correction_cap=0.5"])


def test_the_sampler_copy_follows_the_trained_weights():
    policy = tiny_policy(seed=1)
    policy.sample_in("bfloat16")
    copy = policy.sampler_copy.model_for(policy.model)
    assert next(copy.parameters()).dtype == torch.bfloat16
    assert next(policy.model.parameters()).dtype == torch.float32  # training weights stay float32
    with torch.no_grad():
        policy.model.model.embed_tokens.weight.add_(1.0)  # an in-place change, as an optimiser step makes
    again = policy.sampler_copy.model_for(policy.model)
    assert again is copy
    torch.testing.assert_close(
        again.model.embed_tokens.weight.float(), policy.model.model.embed_tokens.weight, rtol=1e-2, atol=1e-2
    )
