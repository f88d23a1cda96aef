"""model.modality: checked like every key; auto picks vision from the model's own config."""

from __future__ import annotations

import pytest

from mirl.config import ConfigError
from mirl.config_files import load_config
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


def test_the_critic_sees_the_images_through_the_models_own_forward():
    import copy

    import torch
    from tests.vision.conftest import board, processor_prompt

    from mirl.policy.tiny_vl import tiny_vl_policy
    from mirl.policy.vision_inputs import backbone_image_inputs
    from mirl.trainer.critic import Critic

    policy = tiny_vl_policy()
    critic = Critic(copy.deepcopy(policy.model))
    torch.nn.init.normal_(critic.head.weight, generator=torch.Generator().manual_seed(0))  # not the global state
    out, ids, placed = processor_prompt(policy, [board((200, 10, 10))])
    _, _, other = processor_prompt(policy, [board((10, 10, 200))])
    rows = torch.tensor([ids, ids])
    mask = torch.ones_like(rows)
    with torch.no_grad():
        values = critic(rows, mask, images=(placed, other))
        hidden = critic.backbone(**out).last_hidden_state  # transformers' forward on the processor's own inputs
        expected = critic.head(hidden).squeeze(-1)[0, :-1]
    assert (values[0, 1:] - expected).abs().max() < 1e-5
    assert not torch.allclose(values[0], values[1])  # different boards, different values
    inputs = backbone_image_inputs(critic.backbone, rows, mask, (placed, other))
    theirs, _ = critic.backbone.get_rope_index(out["input_ids"], out["mm_token_type_ids"], out["image_grid_thw"])
    assert torch.equal(inputs["position_ids"][:, :1], theirs)
    sampled = rows.clone()
    sampled[:, -1] = policy.image_token_id  # a placeholder id sampled in a reply stays text
    with torch.no_grad():
        assert critic(sampled, mask, images=(placed, other)).shape == rows.shape


@pytest.mark.parametrize("name", ["sokoban", "frozenlake"])
@pytest.mark.parametrize("kept", ["topp09", "nofilter"])
def test_paper_vision_configs_load_and_their_envs_render_images(name, kept):
    from pathlib import Path

    from mirl.envs import make

    path = Path(__file__).parents[2] / "configs" / "paper" / f"{name}-vl-ppo-{kept}.yaml"
    config = load_config(path, [])
    assert (config.model.name, config.model.modality) == ("Qwen/Qwen2.5-VL-3B-Instruct", "vision")
    env = make(config.envs[0].name, **config.envs[0].options)
    observation, info = env.reset(seed=0)
    assert observation.count("<image>") == len(info["images"]) == 1
