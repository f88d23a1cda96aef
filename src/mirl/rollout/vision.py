"""Observation images in the rollout: text with image placeholders -> token ids with the images placed in them.

An env that renders images writes :data:`~mirl.envs.images.IMAGE_PLACEHOLDER` in its observation once per image
and gives the images in ``info["images"]`` (:mod:`mirl.envs.images`). The engine encodes a message as a
:class:`Piece`: the text between placeholders is tokenized as any text, and each placeholder becomes the image's
block of ids as the policy's processor expanded it, once per image (:meth:`VisionPolicy.process
<mirl.policy.hf_vision.VisionPolicy.process>`); the piece records where each image's placeholder tokens start.
Pieces concatenate into a context whose images are placed by :class:`~mirl.types.ContextImage` records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mirl.envs.images import IMAGE_PLACEHOLDER
from mirl.errors import UserError
from mirl.rollout.prompts import Message, encode_message
from mirl.types import ContextImage


class ImagesNeedVisionModel(UserError, ValueError):
    """An env shows images but the policy reads text only."""


@dataclass(frozen=True)
class Piece:
    """Token ids and the images placed in them (``start`` relative to the piece)."""

    ids: tuple[int, ...]
    images: tuple[ContextImage, ...] = ()

    def __len__(self) -> int:
        return len(self.ids)

    def __add__(self, other: Piece) -> Piece:
        return Piece(self.ids + other.ids, self.images + tuple(image.shifted(len(self.ids)) for image in other.images))


def encode_piece(policy, tokenizer, message: Message, images: Sequence) -> Piece:
    """``message`` encoded with each placeholder of its content replaced by the next image's block (no images:
    plain encoding); the content's text stays literal (:func:`~mirl.rollout.prompts.encode_message`)."""
    if not images:
        return Piece(encode_message(tokenizer, message))
    process = getattr(policy, "process", None)
    if process is None:
        raise ImagesNeedVisionModel(
            "the env shows its state as images but the model reads text only; set the env's render=text, or "
            "train a vision-language model (model.modality=vision, e.g. model.name=Qwen/Qwen2.5-VL-3B-Instruct)"
        )
    parts = message.content.split(IMAGE_PLACEHOLDER)
    if len(parts) != len(images) + 1:
        raise ValueError(f"a message holds {len(parts) - 1} image placeholder(s) for {len(images)} image(s)")
    last = len(parts) - 1
    texts = [Message(message.before if i == 0 else "", part, message.after if i == last else "")
             for i, part in enumerate(parts)]  # fmt: skip
    ids: list[int] = []
    placed = []
    for text, image in zip(texts, images, strict=False):
        ids += encode_message(tokenizer, text)
        inputs = process(image)
        placed.append(ContextImage(len(ids) + inputs.pad_offset, inputs))
        ids += inputs.block_ids
    ids += encode_message(tokenizer, texts[-1])
    return Piece(tuple(ids), tuple(placed))
