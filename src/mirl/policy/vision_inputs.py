"""Images as a vision-language policy sees them: processed once, placed in the token stream, positioned in 3-D.

- :func:`process_image` runs the model's processor once per image on the image's chat block (the text the chat
  template writes for an image part, e.g. ``<|vision_start|><|image_pad|><|vision_end|>``): the processor expands the
  placeholder to one token per merged patch and makes the pixel values; both are kept in an
  :class:`~mirl.types.ImageInputs` and never recomputed, so sampling, training and scoring see the same input.
- :func:`keyed_ids` writes each image's *handle* (a negative int, one per distinct image in a policy) over its
  placeholder tokens. Keyed ids are plain int tuples, so the policy's prefix sharing, multi-turn cache reuse and
  prefix stems compare images as they compare tokens: two contexts are equal only if their images are equal.
- :func:`rope_positions` gives the multimodal rotary positions Qwen2-VL / Qwen2.5-VL use: a text token's three
  coordinates are equal; an image of ``h x w`` merged patches starting at position ``s`` takes ``(s, s + row,
  s + col)`` and the text after it continues at ``s + max(h, w)`` (transformers' ``get_rope_index`` for images).
  A chunk of a sequence gets its positions from the 1-D positions of its tokens as if every image before the chunk
  had ended already, which :func:`position_shift` supplies: ``sum over earlier images of max(h, w) - h * w``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mirl.types import ContextImage, ImageInputs

_TEXT_A, _TEXT_B = "MIRL_TEXT_BEFORE", "MIRL_TEXT_AFTER"


def image_text_processor(processor_class, image_processor, tokenizer):
    """``processor_class(image_processor, tokenizer)`` without a video processor.

    Qwen2-VL-family processors require a video processor argument, and transformers' video processors need
    torchvision, which mirl does not otherwise need; images never go through it. When the constructor refuses to
    run without one, the processor's attributes are set as its constructor would set them (the tokens of the
    image and video placeholders) and the video processor is None.
    """
    template = getattr(tokenizer, "chat_template", None)
    try:
        return processor_class(image_processor=image_processor, tokenizer=tokenizer, chat_template=template)
    except (TypeError, ValueError, AttributeError, ImportError):
        pass
    processor = object.__new__(processor_class)
    processor.image_processor, processor.tokenizer, processor.video_processor = image_processor, tokenizer, None
    processor.chat_template = template
    for kind in ("image", "video"):
        token = getattr(tokenizer, f"{kind}_token", None) or f"<|{kind}_pad|>"
        setattr(processor, f"{kind}_token", token)
        setattr(processor, f"{kind}_token_id", tokenizer.convert_tokens_to_ids(token))
    return processor


def image_block_text(processor) -> str:
    """The text the chat template writes for one image part of a user message.

    Rendered from a message [text, image, text] and cut between the two texts; a template that writes nothing
    for an image cannot show images to the model and is refused.
    """
    parts = [{"type": "text", "text": _TEXT_A}, {"type": "image"}, {"type": "text", "text": _TEXT_B}]
    rendered = processor.apply_chat_template([{"role": "user", "content": parts}], tokenize=False)
    block = rendered.split(_TEXT_A, 1)[-1].split(_TEXT_B, 1)[0] if _TEXT_A in rendered else ""
    if processor.image_token not in block:
        raise ValueError(
            f"the model's chat template writes {block!r} for an image part, without the image token "
            f"{processor.image_token!r}; use the model's own processor (AutoProcessor) and chat template"
        )
    return block


def process_image(processor, block_text: str, image, content_id: str, merge_size: int) -> ImageInputs:
    """The processor's expansion of one image's block and its pixel values (see the module docstring)."""
    out = processor(text=[block_text], images=[image], return_tensors="pt")
    ids = tuple(int(t) for t in out["input_ids"][0])
    grid = tuple(int(g) for g in out["image_grid_thw"][0])
    image_token = int(processor.image_token_id)
    count = grid[0] * grid[1] * grid[2] // merge_size**2
    offset = ids.index(image_token) if image_token in ids else -1
    if offset < 0 or ids[offset : offset + count] != (image_token,) * count or ids.count(image_token) != count:
        raise ValueError(
            f"the processor expanded an image of grid {grid} to {ids.count(image_token)} image tokens, "
            f"expected {count} in one run"
        )
    return ImageInputs(
        id=content_id,
        image=image,
        pixel_values=out["pixel_values"].detach(),
        grid_thw=grid,
        block_ids=ids,
        pad_offset=offset,
        num_tokens=count,
    )


def keyed_ids(ids: Sequence[int], images: Sequence[ContextImage], handle_of, image_token_id: int) -> tuple[int, ...]:
    """``ids`` with each image's placeholder tokens replaced by ``handle_of(image)`` (a negative int).

    Raises ``ValueError`` when an image's span is not its placeholder tokens (a misplaced or stale image list).
    """
    keyed = [int(t) for t in ids]
    for place in images:
        end = place.start + place.image.num_tokens
        if place.start < 0 or end > len(keyed) or any(t != image_token_id for t in keyed[place.start : end]):
            raise ValueError(
                f"image {place.image.id} should fill positions [{place.start}, {end}) with image token "
                f"{image_token_id}, but the ids there differ; rebuild the context with its images"
            )
        keyed[place.start : end] = [handle_of(place.image)] * place.image.num_tokens
    return tuple(keyed)


def _runs(row: list[int]) -> list[tuple[int, int, int]]:
    """``(start, end, handle)`` of each run of one image's handle in a row of keyed ids."""
    runs, t = [], 0
    while t < len(row):
        if row[t] < 0:
            end = t
            while end < len(row) and row[end] == row[t]:
                end += 1
            runs.append((t, end, row[t]))
            t = end
        else:
            t += 1
    return runs


def position_shift(keyed: Sequence[int], grids: dict[int, tuple[int, int]]) -> int:
    """``sum over the images in keyed of max(h, w) - h * w``: how far a 3-D position after them lags the 1-D one.

    ``grids[handle] = (h, w)`` merged patches. A run of several images with the same handle back to back counts
    each (runs are cut every ``h * w`` tokens).

    >>> position_shift([5, -1, -1, -1, -1, 6], {-1: (2, 2)})  # 2 x 2 image: 4 tokens, 2 positions
    -2
    """
    shift = 0
    for start, end, handle in _runs(list(keyed)):
        h, w = grids[handle]
        shift += (end - start) // (h * w) * (max(h, w) - h * w)
    return shift


def rope_positions(keyed: torch.Tensor, positions: torch.Tensor, grids: dict[int, tuple[int, int]]) -> torch.Tensor:
    """(3, B, T) multimodal positions of a chunk from its keyed ids (B, T) and 1-D positions (B, T).

    ``positions`` must already include :func:`position_shift` of everything before the chunk. Images must be
    whole inside the chunk.

    >>> ids = torch.tensor([[7, -1, -1, -1, -1, 8]])
    >>> rope_positions(ids, torch.arange(6)[None], {-1: (2, 2)})[:, 0].tolist()
    [[0, 1, 1, 1, 1, 3], [0, 1, 1, 2, 2, 3], [0, 1, 2, 1, 2, 3]]
    """
    out = positions.unsqueeze(0).repeat(3, 1, 1)  # (3, B, T)
    if not bool((keyed < 0).any()):
        return out
    length = keyed.shape[1]
    for b, row in enumerate(keyed.tolist()):
        delta = torch.zeros(length + 1, dtype=positions.dtype, device=positions.device)  # shift added at t
        images = []
        for start, end, handle in _runs(row):
            h, w = grids[handle]
            if (end - start) % (h * w):
                raise ValueError(f"an image of {h * w} tokens is cut at a chunk boundary ({end - start} tokens here)")
            for first in range(start, end, h * w):
                images.append((first, h, w))
                delta[first + h * w] += max(h, w) - h * w
        shift = delta[:length].cumsum(0)  # (T,) shift of everything before each token
        out[:, b] += shift
        for first, h, w in images:
            offsets = torch.arange(h * w, device=out.device)
            base = out[0, b, first]
            out[0, b, first : first + h * w] = base
            out[1, b, first : first + h * w] = base + offsets // w
            out[2, b, first : first + h * w] = base + offsets % w
    return out


def backbone_image_inputs(backbone, input_ids: torch.Tensor, attention_mask: torch.Tensor, images) -> dict:
    """``inputs_embeds`` and ``position_ids`` for a transformers vision-language backbone (``Qwen2_5_VLModel``) over
    rows ``input_ids`` (B, T) whose images are ``images[b]`` (ContextImage records).

    The images' features go exactly on their placeholder spans and the model's own ``get_rope_index`` gets the
    token types from those spans, so a placeholder id the model happened to sample in a reply stays text (the
    model's forward would count it as an image token and refuse the batch).
    """
    placed = [(b, place) for b, row in enumerate(images) for place in sorted(row, key=lambda p: p.start)]
    types = torch.zeros_like(input_ids, dtype=torch.int)  # (B, T) 1 on image placeholders
    for b, place in placed:
        types[b, place.start : place.start + place.image.num_tokens] = 1
    device = input_ids.device
    pixels = torch.cat([place.image.pixel_values for _, place in placed]).to(device)
    grid_thw = torch.tensor([place.image.grid_thw for _, place in placed], device=device)  # (I, 3)
    embeds = backbone.get_input_embeddings()(input_ids)  # (B, T, H)
    features = torch.cat(backbone.get_image_features(pixels, image_grid_thw=grid_thw).pooler_output)  # (n, H)
    embeds = embeds.masked_scatter(types.bool().unsqueeze(-1), features.to(embeds.dtype))
    positions, _ = backbone.get_rope_index(input_ids, types, image_grid_thw=grid_thw, attention_mask=attention_mask)
    return {"inputs_embeds": embeds, "position_ids": positions}
