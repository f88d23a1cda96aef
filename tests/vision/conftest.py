"""Shared pieces of the vision tests: the tiny Qwen2.5-VL policy and a prompt with two images made by
transformers' own processor."""

from __future__ import annotations

import pytest
from PIL import Image

from mirl.policy.tiny_vl import tiny_vl_policy
from mirl.types import ContextImage


@pytest.fixture(scope="module")
def vl_policy():
    return tiny_vl_policy()


def board(color, size=(96, 64), dot=(5, 5)):
    image = Image.new("RGB", size, color)
    image.putpixel(dot, (0, 0, 255))
    return image


def processor_prompt(policy, images, texts=("Look", "and", "then")):
    """transformers' processor output for a user message [text, image, text, image, ...] and the matching
    ContextImage records (kept images from ``policy.process``)."""
    parts = []
    for i, text in enumerate(texts):
        parts.append({"type": "text", "text": text})
        if i < len(images):
            parts.append({"type": "image"})
    processor = policy.processor
    text = processor.apply_chat_template(
        [{"role": "user", "content": parts}], tokenize=False, add_generation_prompt=True
    )
    out = processor(text=[text], images=list(images), return_tensors="pt")
    ids = out["input_ids"][0].tolist()
    pad = policy.image_token_id
    starts = [i for i in range(len(ids)) if ids[i] == pad and ids[i - 1] != pad]
    placed = tuple(ContextImage(s, policy.process(image)) for s, image in zip(starts, images, strict=True))
    return out, ids, placed
