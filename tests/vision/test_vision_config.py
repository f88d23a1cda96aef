"""model.modality: checked like every key; auto picks vision from the model's own config."""

from __future__ import annotations

import pytest

from mirl.config import ConfigError, load_config
from mirl.policy.sources import model_modality


def test_modality_is_checked_like_every_key():
    assert load_config(None, ["model.modality=vision"]).model.modality == "vision"
    with pytest.raises(ConfigError, match="model.modality"):
        load_config(None, ["model.modality=pictures"])
    with pytest.raises(ConfigError, match="model.backend=hf"):
        load_config(None, ["model.modality=vision", "model.backend=vllm"])


def test_auto_is_vision_for_an_image_text_to_text_model_and_text_otherwise(tmp_path):
    from mirl.policy.tiny import tiny_policy
    from mirl.policy.tiny_vl import tiny_vl_policy

    tiny_vl_policy().save(tmp_path / "vl")
    tiny_policy().save(tmp_path / "text")
    assert model_modality(str(tmp_path / "vl")) == "vision"
    assert model_modality(str(tmp_path / "text")) == "text"
    assert model_modality(str(tmp_path / "vl"), "text") == "text"  # an explicit choice wins


def test_a_value_critic_is_refused_for_a_vision_model():
    from mirl.policy.tiny_vl import tiny_vl_policy
    from mirl.trainer.setup import build_learner, resolve_preset

    config = load_config(None, ["algorithm.preset=ppo"])
    with pytest.raises(ConfigError, match="algorithm.preset=grpo"):
        build_learner(tiny_vl_policy(), config, resolve_preset(config.algorithm))
