"""A tiny Qwen2.5-VL (vision tower + language tower), its image processor and tokenizer, built in-process and offline.

The vision-language counterpart of :mod:`mirl.policy.tiny`, for tests and examples that need images:

- the tokenizer is :func:`~mirl.policy.tiny.tiny_tokenizer`'s byte-level BPE plus Qwen2.5-VL's vision special tokens
  (``<|vision_start|>``, ``<|vision_end|>``, ``<|image_pad|>``, ``<|video_pad|>``), with a ChatML template that renders
  an image part of a message as ``<|vision_start|><|image_pad|><|vision_end|>`` (as Qwen2.5-VL's template does);
- the image processor is transformers' ``Qwen2VLImageProcessorPil`` (14-pixel patches, 2x2 merge, as the real model)
  with at most 112 x 112 pixels per image, so a board becomes at most 16 image tokens;
- the processor is transformers' own ``Qwen2_5_VLProcessor`` over the two, so the placeholder expansion is the one a
  real checkpoint gets;
- the model is a ``Qwen2_5_VLForConditionalGeneration`` with a 2-layer vision tower (window attention in one block,
  full attention in the other) and a 2-layer language tower with multimodal rotary positions (``mrope_section``).

Weights are random, drawn from a seed inside ``torch.random.fork_rng`` (the global random state is unchanged).
"""

from __future__ import annotations

import functools

import torch
from transformers import PreTrainedTokenizerFast, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from mirl.policy.tiny import tiny_tokenizer

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
MAX_PIXELS = 112 * 112  # pixels per image after resizing, at most: (112 / 14)^2 / 2^2 = 16 image tokens

# ChatML whose message content may be a list of parts: text parts verbatim, image parts as the vision block
VL_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@functools.lru_cache(maxsize=1)
def tiny_vl_tokenizer() -> PreTrainedTokenizerFast:
    """:func:`~mirl.policy.tiny.tiny_tokenizer` plus the vision special tokens and :data:`VL_CHAT_TEMPLATE`.

    >>> tok = tiny_vl_tokenizer()
    >>> [len(tok.encode(t, add_special_tokens=False)) for t in VISION_TOKENS]
    [1, 1, 1, 1]
    """
    base = tiny_tokenizer()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=base.backend_tokenizer.__class__.from_str(base.backend_tokenizer.to_str()),
        eos_token=base.eos_token,
        pad_token=base.pad_token,
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    tokenizer.chat_template = VL_CHAT_TEMPLATE
    return tokenizer


def tiny_image_processor():
    """transformers' PIL Qwen2-VL image processor with Qwen2.5-VL's patch, merge and normalisation settings and at
    most :data:`MAX_PIXELS` pixels per image."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(
        patch_size=14,
        temporal_patch_size=2,
        merge_size=2,
        size={"shortest_edge": 28 * 28, "longest_edge": MAX_PIXELS},
    )


def tiny_vl_processor():
    """transformers' ``Qwen2_5_VLProcessor`` over :func:`tiny_image_processor` and :func:`tiny_vl_tokenizer`
    (built by :func:`~mirl.policy.vision_inputs.image_text_processor`: no video processor is needed)."""
    from transformers import Qwen2_5_VLProcessor

    from mirl.policy.vision_inputs import image_text_processor

    return image_text_processor(Qwen2_5_VLProcessor, tiny_image_processor(), tiny_vl_tokenizer())


def tiny_vl_config(hidden_size: int = 64, num_layers: int = 2) -> Qwen2_5_VLConfig:
    """A Qwen2.5-VL config: vision tower of width 32 and depth 2, language tower of ``hidden_size`` x ``num_layers``
    with 4 query and 2 key/value heads; its special-token ids are :func:`tiny_vl_tokenizer`'s."""
    tokenizer = tiny_vl_tokenizer()
    head_dim = hidden_size // 4
    quarter = head_dim // 2 // 4  # mrope_section splits head_dim / 2 rotary pairs over (time, height, width)
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "initializer_range": 0.2,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [head_dim // 2 - 2 * quarter, quarter, quarter],
        },
        "bos_token_id": None,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 56,
        "out_hidden_size": hidden_size,
        "fullatt_block_indexes": [1],
        "initializer_range": 0.2,
    }
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in _TOKEN_FIELDS.items()}
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)


_TOKEN_FIELDS = {
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
}


def tiny_vl_model(
    hidden_size: int = 64, num_layers: int = 2, seed: int = 0, dtype: torch.dtype = torch.float32
) -> Qwen2_5_VLForConditionalGeneration:
    """A randomly initialised Qwen2.5-VL in eval mode matching :func:`tiny_vl_tokenizer` (SDPA attention).

    >>> model = tiny_vl_model()
    >>> model.config.model_type, model.config.vision_config.out_hidden_size == model.config.text_config.hidden_size
    ('qwen2_5_vl', True)
    """
    config = tiny_vl_config(hidden_size, num_layers)
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("_proj.bias"):
                    param.normal_(0, 0.2)
    return model.to(dtype).eval()


def tiny_vl_policy(**kwargs):
    """A :class:`~mirl.policy.hf_vision.VisionPolicy` over :func:`tiny_vl_model` and :func:`tiny_vl_processor` on
    CPU in fp32; keyword arguments go to the model (``seed``, ``hidden_size``, ``num_layers``)."""
    from mirl.policy.hf_vision import VisionPolicy

    return VisionPolicy(tiny_vl_model(**kwargs), tiny_vl_processor(), device="cpu", dtype=torch.float32)
