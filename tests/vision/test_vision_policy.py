"""VisionPolicy against transformers' own Qwen2.5-VL: positions, log-probs, sampling, scoring, LoRA."""

from __future__ import annotations

import pytest
import torch
from tests.vision.conftest import board, processor_prompt

from mirl.types import SamplingParams


def test_kept_pixels_and_expansion_are_the_processors(vl_policy):
    images = [board((200, 10, 10)), board((10, 200, 10), size=(60, 90))]
    out, ids, placed = processor_prompt(vl_policy, images)
    kept = torch.cat([p.image.pixel_values for p in placed])
    assert torch.equal(kept, out["pixel_values"])
    assert [p.image.grid_thw for p in placed] == [tuple(g) for g in out["image_grid_thw"].tolist()]
    assert vl_policy.process(images[0]) is placed[0].image  # processed once, then reused


def test_rope_positions_equal_transformers_get_rope_index(vl_policy):
    from mirl.policy.vision_inputs import rope_positions

    out, ids, placed = processor_prompt(vl_policy, [board((200, 10, 10)), board((1, 2, 3), size=(60, 90))])
    keyed = torch.tensor([vl_policy.keyed(ids, placed)])
    mine = rope_positions(keyed, torch.arange(len(ids))[None], vl_policy._grids(keyed))
    theirs, _ = vl_policy.model.model.get_rope_index(
        out["input_ids"], out["mm_token_type_ids"], image_grid_thw=out["image_grid_thw"]
    )
    assert torch.equal(mine, theirs)


def test_token_logprobs_equal_the_models_own_forward(vl_policy):
    out, ids, placed = processor_prompt(vl_policy, [board((200, 10, 10)), board((1, 2, 3), size=(60, 90))])
    with torch.no_grad():
        logits = vl_policy.model(**out).logits.float()  # transformers' forward: its own features and positions
        expected = torch.log_softmax(logits[0, :-1], -1).gather(-1, out["input_ids"][0, 1:, None])[:, 0]
        logp, _ = vl_policy.token_logprobs(out["input_ids"], out["attention_mask"], images=[placed])
    text = out["input_ids"][0, 1:] != vl_policy.image_token_id  # image placeholders are inputs, not predictions
    assert (logp[0, 1:][text] - expected[text]).abs().max() < 1e-5
    assert torch.all(logp[0, 1:][~text] == 0)


@pytest.mark.parametrize("sharing", [True, False])
def test_sampled_logprobs_equal_training_logprobs(vl_policy, sharing):
    _, ids, placed = processor_prompt(vl_policy, [board((200, 10, 10))])
    _, other_ids, other = processor_prompt(vl_policy, [board((10, 10, 200))])
    assert other_ids == ids  # same tokens, different image: must not share a prefill
    vl_policy.prefix_sharing = sharing
    try:
        sampling = SamplingParams(max_new_tokens=10, stop=(), seed=3)
        gens = vl_policy.generate([ids, ids, other_ids], sampling, images=[placed, placed, other])
    finally:
        vl_policy.prefix_sharing = True
    for gen, images in zip(gens, (placed, placed, other), strict=True):
        row = torch.tensor([ids + list(gen.token_ids)])
        logp, _ = vl_policy.token_logprobs(row, torch.ones_like(row), images=[images])
        assert (logp[0, len(ids) :] - torch.tensor(gen.logprobs)).abs().max() < 1e-5


def test_score_equals_a_plain_forward_per_pair(vl_policy):
    _, ids, placed = processor_prompt(vl_policy, [board((200, 10, 10))])
    _, ids2, placed2 = processor_prompt(vl_policy, [board((10, 10, 200))], texts=("Other", "x"))
    conts = [[80, 273, 654], [121, 193, 365, 560]]
    prefixes, images = [ids, ids, ids2, ids2], [placed, placed, placed2, placed2]
    scored = vl_policy.score(prefixes, conts + conts, images=images)
    for prefix, imgs, cont, got in zip(prefixes, images, conts + conts, scored, strict=True):
        row = torch.tensor([prefix + cont])
        logp, _ = vl_policy.token_logprobs(row, torch.ones_like(row), images=[imgs])
        assert (got - logp[0, len(prefix) :]).abs().max() < 1e-5


def test_lora_on_the_language_tower_trains_and_starts_as_the_base(vl_policy):
    import copy

    from mirl.policy.hf_vision import VisionPolicy
    from mirl.trainer.setup import lora_model

    policy = VisionPolicy(copy.deepcopy(vl_policy.model), vl_policy.processor, device="cpu", dtype=torch.float32)
    out, ids, placed = processor_prompt(policy, [board((200, 10, 10))])
    row = torch.tensor([ids + [80, 273, 654]])
    before, _ = policy.token_logprobs(row, torch.ones_like(row), images=[placed])
    policy.model = lora_model(policy.model, rank=4, alpha=8.0, seed=0)
    trained = [name for name, p in policy.model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in name and "language_model" in name for name in trained)
    logp, _ = policy.token_logprobs(row, torch.ones_like(row), images=[placed])
    assert (logp - before).abs().max() < 1e-5  # fresh adapters (B = 0) leave the model as it was
    logp[0, len(ids) :].sum().backward()
    grads = [p.grad for _, p in policy.model.named_parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
