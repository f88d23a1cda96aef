"""No second copy of the model unless the KL penalty needs one: a full copy for kl_coef > 0, the LoRA base (adapters
disabled) under LoRA, nothing at kl_coef = 0."""

import pytest
import torch

from mirl.algorithms import get_preset
from mirl.config import Config, ModelConfig
from mirl.policy.tiny import tiny_policy
from mirl.trainer.setup import build_learner


def _storages(module) -> set[int]:
    return {p.untyped_storage().data_ptr() for p in module.parameters()}


def test_no_reference_model_at_kl_zero():
    policy = tiny_policy(seed=1)
    learner = build_learner(policy, Config(), get_preset("grpo", kl_coef=0.0))
    assert learner.reference is None


def test_full_copy_only_when_kl_is_on():
    policy = tiny_policy(seed=1)
    learner = build_learner(policy, Config(), get_preset("grpo", kl_coef=0.05))
    reference = learner.reference.model
    assert not _storages(reference) & _storages(policy.model)  # a frozen copy, not the trained weights
    assert not any(p.requires_grad for p in reference.parameters())


def test_lora_reference_is_the_base_with_adapters_disabled():
    pytest.importorskip("peft")
    policy = tiny_policy(seed=1)
    config = Config(model=ModelConfig(lora_rank=4))
    learner = build_learner(policy, config, get_preset("grpo", kl_coef=0.05))
    assert learner.reference.model is None  # no copy: the trained model with its adapters off
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)  # make the adapters matter
        adapted, _ = policy.token_logprobs(ids, mask)
        with policy.model.disable_adapter():
            base, _ = policy.token_logprobs(ids, mask)
    reference = learner.reference(ids, mask)
    assert not torch.allclose(adapted, base)
    torch.testing.assert_close(reference, base, rtol=0, atol=0)


def test_reference_name_scores_with_the_named_model(tmp_path):
    # the KL reference is another model (model.reference_name): its log-probs, not the initial policy's
    other = tiny_policy(seed=2)
    other.save(tmp_path / "other")
    policy = tiny_policy(seed=1)
    config = Config(model=ModelConfig(reference_name=str(tmp_path / "other"), device="cpu", dtype="float32"))
    learner = build_learner(policy, config, get_preset("grpo", kl_coef=0.05))
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        expected, _ = other.token_logprobs(ids, mask)
        own, _ = policy.token_logprobs(ids, mask)
    reference = learner.reference(ids, mask)
    torch.testing.assert_close(reference, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(reference, own)


def test_reference_name_with_another_vocabulary_is_refused(tmp_path):
    from mirl.config import ConfigError
    from mirl.lab.organism import organism_tokenizer

    other = tiny_policy(seed=2)
    other.tokenizer = organism_tokenizer()
    other.save(tmp_path / "other")
    config = Config(model=ModelConfig(reference_name=str(tmp_path / "other"), device="cpu", dtype="float32"))
    with pytest.raises(ConfigError, match="another vocabulary"):
        build_learner(tiny_policy(seed=1), config, get_preset("grpo", kl_coef=0.05))
