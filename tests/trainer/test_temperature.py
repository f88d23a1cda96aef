"""The update optimises the policy that sampled: at the first update the PPO ratio is 1 at any temperature/top-p.

Sampling log-probs are ``log_softmax(logits / T)`` (before top-p truncation); the training, old, reference and
entropy log-probs must use the same tempered distribution, or a fresh policy already sees ratios != 1 (measured
before the fix at T = 0.7: ratio max 1.37, clip fraction 7.7 %).
"""

import pytest
import torch

from mirl.algorithms import get_preset
from mirl.config import Config, RolloutConfig
from mirl.policy.tiny import tiny_policy
from mirl.rollout import collate, run_episodes
from mirl.trainer import stages
from mirl.trainer.setup import build_learner
from mirl.trainer.update import UpdateInputs, accumulate_gradients
from mirl.types import EnvSpec

SETTINGS = [(0.7, 1.0), (0.7, 0.9), (0.4, 0.5), (1.5, 0.95), (1.0, 0.8)]


def _first_update(temperature: float, top_p: float, preset_name: str = "grpo"):
    policy = tiny_policy(seed=3)
    rollout = RolloutConfig(max_turns=2, max_new_tokens=16, temperature=temperature, top_p=top_p)
    specs = [EnvSpec("frozenlake", 0), EnvSpec("frozenlake", 1)]
    episodes = run_episodes(policy, specs, 3, rollout, sampling_seed=11)
    batch = collate(episodes, pad_id=policy.pad_token_id)
    preset = get_preset(preset_name)
    learner = build_learner(policy, Config(rollout=rollout), preset)
    return policy, learner, batch, preset


@pytest.mark.parametrize(("temperature", "top_p"), SETTINGS)
def test_ratio_is_one_at_the_first_update(temperature, top_p):
    policy, learner, batch, preset = _first_update(temperature, top_p)
    mask = batch.response_mask
    # through the update itself: ratio 1, nothing clipped, no approximate KL
    advantages = torch.where(mask, 1.0, 0.0)  # (B, T)
    inputs = UpdateInputs(batch, advantages, None, None, batch.old_logprobs, None)
    tally = accumulate_gradients(learner, inputs, torch.arange(batch.num_rows), preset, 4)
    metrics = tally.metrics()
    assert metrics["train/ratio_max"] == pytest.approx(1.0, abs=5e-5)
    assert metrics["train/ratio_mean"] == pytest.approx(1.0, abs=5e-6)
    assert metrics["train/clip_frac"] == 0.0
    assert abs(metrics["train/approx_kl"]) < 1e-9
    # token level: the update's log-probs are the sampled ones (float32 KV-cache decode vs one full forward)
    assert learner.temperature == temperature
    with torch.no_grad():
        logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask, temperature=learner.temperature)
    torch.testing.assert_close(logp[mask], batch.old_logprobs[mask], rtol=0, atol=2e-5)


def test_old_reference_and_entropy_use_the_sampling_temperature():
    temperature = 0.6
    policy, learner, batch, preset = _first_update(temperature, 0.9, preset_name="grpo")
    mask = batch.response_mask
    recomputed = stages.old_logprobs(learner, batch, recompute=True)  # (B, T)
    torch.testing.assert_close(recomputed[mask], batch.old_logprobs[mask], rtol=0, atol=2e-5)
    kl_config = Config(rollout=RolloutConfig(temperature=temperature))
    kl_learner = build_learner(policy, kl_config, get_preset("grpo", kl_coef=0.1))
    reference = stages.reference_logprobs(kl_learner, batch)  # a fresh reference equals the sampling policy
    torch.testing.assert_close(reference[mask], batch.old_logprobs[mask], rtol=0, atol=2e-5)
    ids, attn = batch.input_ids[:1], batch.attention_mask[:1]
    with torch.no_grad():
        _, entropy = policy.token_logprobs(ids, attn, with_entropy=True, temperature=temperature)
        logits = policy.model(ids).logits[0, :-1].double() / temperature  # (T-1, V): the slow obvious path
    logp = logits.log_softmax(-1)
    expected = -(logp.exp() * logp).sum(-1)  # (T-1,)
    real = attn[0, 1:] & attn[0, :-1]
    torch.testing.assert_close(entropy[0, 1:][real].double(), expected[real], rtol=1e-5, atol=1e-5)


def test_scoring_stays_at_temperature_one():
    policy, learner, batch, _ = _first_update(0.5, 1.0)
    ids = batch.input_ids[0][batch.attention_mask[0]].tolist()
    prefix, continuation = ids[:5], ids[5:12]
    scored = policy.score([prefix], [continuation])[0]
    with torch.no_grad():
        plain, _ = policy.token_logprobs(torch.tensor([ids[:12]]), torch.ones(1, 12, dtype=torch.bool))
    torch.testing.assert_close(scored, plain[0, 5:12], rtol=0, atol=2e-5)


def test_token_logprobs_refuses_a_non_positive_temperature():
    policy = tiny_policy()
    with pytest.raises(ValueError, match="temperature must be > 0"):
        policy.token_logprobs(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.bool), temperature=0)
