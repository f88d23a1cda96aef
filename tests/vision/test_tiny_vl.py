"""The tiny Qwen2.5-VL is a real Qwen2.5-VL: transformers' processor expands its images and its own forward runs."""

from __future__ import annotations

import torch
from PIL import Image

from mirl.policy.tiny_vl import VISION_TOKENS, tiny_vl_model, tiny_vl_processor, tiny_vl_tokenizer


def test_tokenizer_keeps_the_base_vocabulary_and_adds_the_vision_tokens():
    from mirl.policy.tiny import tiny_tokenizer

    tokenizer, base = tiny_vl_tokenizer(), tiny_tokenizer()
    text = "<think>go Down</think><answer>Down || Left</answer>"
    assert tokenizer.encode(text) == base.encode(text)
    assert len(tokenizer) == len(base) + len(VISION_TOKENS)
    assert tokenizer.decode(tokenizer.encode("<|vision_start|><|image_pad|><|vision_end|>")) == (
        "<|vision_start|><|image_pad|><|vision_end|>"
    )


def test_processor_expands_an_image_to_one_token_per_merged_patch():
    processor = tiny_vl_processor()
    parts = [{"type": "text", "text": "see"}, {"type": "image"}]
    text = processor.apply_chat_template([{"role": "user", "content": parts}], tokenize=False)
    out = processor(text=[text], images=[Image.new("RGB", (96, 64), (9, 9, 9))], return_tensors="pt")
    t, h, w = out["image_grid_thw"][0].tolist()
    # 96 x 64 pixels resize to 84 x 56 (multiples of 28): 6 x 4 patches of 14, merged 2 x 2 into 6 tokens
    assert (t, h, w) == (1, 4, 6)
    assert int((out["input_ids"] == processor.image_token_id).sum()) == 1 * 4 * 6 // 4
    assert out["pixel_values"].shape == (24, 3 * 2 * 14 * 14)


def test_model_forward_on_processor_outputs_and_random_state_untouched():
    state = torch.random.get_rng_state()
    model, again = tiny_vl_model(seed=1), tiny_vl_model(seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))
    processor = tiny_vl_processor()
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "go"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    out = processor(text=[text], images=[Image.new("RGB", (56, 56), (200, 0, 0))], return_tensors="pt")
    with torch.no_grad():
        logits = model(**out).logits
    assert logits.shape == (1, out["input_ids"].shape[1], len(tiny_vl_tokenizer()))
    assert torch.isfinite(logits).all()
