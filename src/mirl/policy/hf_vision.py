"""Vision-language policies on transformers (``AutoModelForImageTextToText`` + ``AutoProcessor``; Qwen2.5-VL family).

:class:`VisionPolicy` is :class:`~mirl.policy.hf.HFPolicy` with images: the same sampler, scorer and training
log-probs, where a prompt may hold images. How an image enters:

- the engine asks :meth:`VisionPolicy.process` for each observation image once: the processor expands the image's
  chat block to its placeholder tokens and makes its pixel values (:func:`~mirl.policy.vision_inputs.process_image`);
  the context holds those ids, and a :class:`~mirl.types.ContextImage` says where;
- ``generate``, ``score`` and ``token_logprobs`` take, beside the ids, the images of each prompt / row. Inside, the
  placeholder tokens become the image's handle (:func:`~mirl.policy.vision_inputs.keyed_ids`), so identical prompts
  (same ids, same images) are prefilled once, a turn extends the previous turn's cache, and scoring shares prefix
  stems, exactly as for text;
- every forward pass embeds the tokens, puts the vision tower's features of each image over its placeholder
  embeddings, and gives the language tower the multimodal rotary positions
  (:func:`~mirl.policy.vision_inputs.rope_positions`). Sampling, training and scoring run this one function on the
  same kept pixel values and ids, so the training log-probs equal the sampling ones (PPO ratio 1 at the first
  update) and a sampled id is never re-tokenized.

The vision tower's features of an image are computed in every pass that encodes its placeholders (a cache reuse
skips them with the rest of the stored prefix).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence

import torch

from mirl.envs.images import image_id
from mirl.policy.hf import HFPolicy, cache_keyword
from mirl.policy.vision_inputs import image_block_text, keyed_ids, position_shift, process_image, rope_positions
from mirl.types import ContextImage, Generation, ImageInputs, SamplingParams

RowImages = Sequence[ContextImage]  # the images of one prompt or row, in order


class VisionPolicy(HFPolicy):
    """A vision-language model and its processor seen through token ids and kept images (implements ``Policy``).

    Args:
        model: an ``AutoModelForImageTextToText`` model with ``get_image_features`` and a language tower
            (``get_decoder()``) that takes 3-D rotary positions (Qwen2-VL / Qwen2.5-VL), optionally PEFT-wrapped.
        processor: its ``AutoProcessor`` (image processor, tokenizer and chat template).
        **kwargs: as :class:`~mirl.policy.hf.HFPolicy` (device, dtype, max_batch_tokens, stop_token_ids).
    """

    modality = "vision"

    def __init__(self, model, processor, **kwargs) -> None:
        super().__init__(model, processor.tokenizer, **kwargs)
        self.processor = processor
        self.share_prompts = False  # keyed ids and 3-D rotary positions: the packed training pass is text-only
        config = model.config
        text = config.get_text_config()
        positions = getattr(text, "max_position_embeddings", None)
        self.max_positions = int(positions) if positions else None
        self.image_token_id = int(config.image_token_id)
        self.merge_size = int(config.vision_config.spatial_merge_size)
        self.block_text = image_block_text(processor)
        self._processed: dict[str, ImageInputs] = {}  # content id -> processed image, this policy's lifetime
        self._handles: dict[str, int] = {}  # content id -> handle (negative)
        self._by_handle: weakref.WeakValueDictionary[int, ImageInputs] = weakref.WeakValueDictionary()
        self.max_processed = 512  # processed images kept for reuse at most (oldest dropped first)

    @classmethod
    def load(cls, source: str | os.PathLike, *, device="auto", dtype="auto", cache_dir=None, **kwargs):
        """Load an image-text-to-text model and its processor from a hub id or a local directory."""
        from mirl.policy.sources import load_vision_model_and_processor

        model, processor = load_vision_model_and_processor(str(source), dtype=dtype, device=device, cache_dir=cache_dir)
        return cls(model, processor, device=device, dtype=dtype, **kwargs)

    def save(self, directory: str | os.PathLike) -> None:
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        self.processor.image_processor.save_pretrained(directory)

    # ------------------------------------------------------------------ images

    def process(self, image) -> ImageInputs:
        """The processed form of an RGB PIL image (made once per distinct image, then reused)."""
        key = image_id(image)
        if key not in self._processed:
            if len(self._processed) >= self.max_processed:
                self._processed.pop(next(iter(self._processed)))
            self._processed[key] = process_image(self.processor, self.block_text, image, key, self.merge_size)
        return self._processed[key]

    def _handle(self, image: ImageInputs) -> int:
        handle = self._handles.setdefault(image.id, -(len(self._handles) + 1))
        self._by_handle[handle] = image
        return handle

    def keyed(self, ids: Sequence[int], images: RowImages) -> tuple[int, ...]:
        """``ids`` with each image's placeholders replaced by its handle (see :mod:`mirl.policy.vision_inputs`)."""
        return keyed_ids(ids, images, self._handle, self.image_token_id)

    def _grids(self, keyed: torch.Tensor) -> dict[int, tuple[int, int]]:
        """Merged (h, w) patches of each image handle in ``keyed``."""
        handles = torch.unique(keyed[keyed < 0]).tolist()
        return {h: self._merged(self._by_handle[h]) for h in handles}

    def _merged(self, image: ImageInputs) -> tuple[int, int]:
        return image.grid_thw[1] // self.merge_size, image.grid_thw[2] // self.merge_size

    def _position_shift(self, ids: Sequence[int]) -> int:
        if not any(t < 0 for t in ids):
            return 0
        return position_shift(ids, self._grids(torch.tensor(ids)))

    # ------------------------------------------------------------------ the Policy protocol, with images

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, images: Sequence[RowImages] | None = None
    ) -> list[Generation]:
        """:meth:`HFPolicy.generate` where ``images[i]`` are the images of ``prompts[i]`` (None: no images)."""
        return super().generate(self._key_all(prompts, images), sampling)

    def score(self, prefixes, continuations, images: Sequence[RowImages] | None = None) -> list[torch.Tensor]:
        """:meth:`HFPolicy.score` where ``images[i]`` are the images of ``prefixes[i]``."""
        return super().score(self._key_all(prefixes, images), continuations)

    def token_logprobs(self, input_ids, attention_mask, *, images: Sequence[RowImages] | None = None, **kwargs):
        """:meth:`HFPolicy.token_logprobs` where ``images[b]`` are the images of row ``b``."""
        if images is not None and any(images):
            if len(images) != input_ids.shape[0]:
                raise ValueError(f"expected the images of each of {input_ids.shape[0]} rows, got {len(images)}")
            input_ids = torch.tensor(
                [self.keyed(row, imgs) for row, imgs in zip(input_ids.tolist(), images, strict=True)]
            )
        return super().token_logprobs(input_ids, attention_mask, **kwargs)

    def _key_all(self, prompts, images) -> list:
        if images is None:
            return list(prompts)
        if len(images) != len(prompts):
            raise ValueError(f"expected the images of each of {len(prompts)} prompts, got {len(images)}")
        return [self.keyed(p, imgs) if imgs else p for p, imgs in zip(prompts, images, strict=True)]

    # ------------------------------------------------------------------ model pieces

    def _backbone(self, input_ids, attention_mask, position_ids, cache=None) -> torch.Tensor:
        """Final hidden states (B, T, H) of the language tower over keyed ids: image features in place of the
        placeholders, 3-D rotary positions."""
        grids = self._grids(input_ids) if bool((input_ids < 0).any()) else {}
        embeds = self._embed(input_ids, grids)  # (B, T, H)
        positions = rope_positions(input_ids, position_ids, grids)  # (3, B, T)
        decoder = self.model.get_decoder()
        extra = {cache_keyword(type(decoder)): cache} if cache is not None else {}
        out = decoder(
            inputs_embeds=embeds,
            attention_mask=attention_mask,
            position_ids=positions,
            use_cache=cache is not None,
            **extra,
        )
        return out.last_hidden_state

    def _embed(self, keyed: torch.Tensor, grids: dict[int, tuple[int, int]]) -> torch.Tensor:
        """Token embeddings (B, T, H) with each image run replaced by that image's vision features, in order."""
        embeds = self.model.get_input_embeddings()(keyed.clamp(min=0))  # (B, T, H)
        if not grids:
            return embeds
        handles = list(grids)
        images = [self._by_handle[h] for h in handles]
        pixels = torch.cat([image.pixel_values for image in images]).to(self.device)  # (patches, D)
        grid_thw = torch.tensor([image.grid_thw for image in images], device=self.device)  # (I, 3)
        features = self.model.get_image_features(pixels, image_grid_thw=grid_thw).pooler_output  # I x (n_i, H)
        by_handle = dict(zip(handles, features, strict=True))
        is_image = keyed < 0  # (B, T)
        # row-major order of the image positions, as masked_scatter fills them
        pieces = []
        for handle, count in _run_heads(keyed[is_image]):
            image_features = by_handle[handle]  # (n, H)
            if count % len(image_features):
                raise ValueError(f"an image of {len(image_features)} tokens is cut at a chunk boundary")
            pieces.append(image_features.repeat(count // len(image_features), 1))  # back-to-back copies
        flat = torch.cat(pieces).to(embeds.dtype)  # (image tokens, H)
        return embeds.masked_scatter(is_image.unsqueeze(-1), flat)


def _run_heads(handles: torch.Tensor):
    """``(handle, length)`` of each run of equal handles in a flat tensor."""
    values, counts = torch.unique_consecutive(handles, return_counts=True)
    return list(zip(values.tolist(), counts.tolist(), strict=True))
