"""What a mirl OpenEnv server sends and a mirl client reads: the action and observation models, and size limits.

An OpenEnv observation travels as ``{"observation": {...fields...}, "reward": r, "done": d}``. A mirl server's
observation fields are:

- ``observation``: the env's text (with one ``<image>`` placeholder per image, :mod:`mirl.envs.images`);
- ``images``: the images, in order, as base64 PNG;
- ``terminated`` / ``truncated``: Gymnasium's two flags (``done`` is their ``or``);
- ``info``: the JSON-safe part of the env's info (``success``, ``action_valid``, ``action_effective``, ``state_key``
  as a string, and any other JSON scalars, lists and dicts);
- ``agent`` (reset only): what the rollout engine reads from an env to write its prompts (instruction, symbol
  legend, action words, action budget, turn settings), so a served env prompts exactly like the local one.

Everything read from the network is size-checked before it is decoded; nothing is unpickled or evaluated.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any

MAX_MESSAGE_BYTES = 4 << 20  # one WebSocket message or HTTP body, either direction
MAX_ACTION_CHARS = 1 << 16  # one action's text
MAX_INFO_ITEMS = 256  # entries kept from one info dict (and from each nested list or dict)
AGENT_FIELDS = (
    "instruction",
    "symbol_legend",
    "action_words",
    "default_action_budget",
    "multi_turn",
    "question_prompt",
    "max_actions_per_turn",
    "description",
)


def models():
    """``(MirlAction, MirlObservation)``: the pydantic models of a served mirl env (imported lazily)."""
    from openenv.core.env_server.types import Action, Observation
    from pydantic import Field

    class MirlAction(Action):
        """One action of a mirl env: the text the rollout engine parsed from the model's reply."""

        action: str = Field(..., max_length=MAX_ACTION_CHARS, description="one action, e.g. 'Up' or an answer")

    class MirlObservation(Observation):
        """A mirl env's observation, its Gymnasium flags and the JSON-safe part of its info."""

        observation: str = Field(default="", description="the observation text; '<image>' marks each image")
        images: list[str] = Field(default_factory=list, description="the images, in order, as base64 PNG")
        terminated: bool = Field(default=False, description="the episode reached a terminal state")
        truncated: bool = Field(default=False, description="the episode was cut short (a step limit)")
        info: dict[str, Any] = Field(default_factory=dict, description="success, action_valid, state_key, ...")
        agent: dict[str, Any] | None = Field(default=None, description="prompt settings (reset only)")

    return MirlAction, MirlObservation


def json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` with everything JSON cannot carry exactly left out (objects, NaN, deep nesting): a dict keeps
    its string keys, a tuple becomes a list, at most :data:`MAX_INFO_ITEMS` entries each.

    >>> json_safe({"a": (1, 2.5), "b": object(), "c": float("nan"), 3: "x"})
    {'a': [1, 2.5]}
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _DROP
    if depth >= 4:
        return _DROP
    if isinstance(value, list | tuple):
        items = [json_safe(v, depth + 1) for v in list(value)[:MAX_INFO_ITEMS]]
        return [v for v in items if v is not _DROP]
    if isinstance(value, dict):
        pairs = [(k, json_safe(v, depth + 1)) for k, v in list(value.items())[:MAX_INFO_ITEMS] if isinstance(k, str)]
        return {k: v for k, v in pairs if v is not _DROP}
    return _DROP


_DROP = object()


def served_info(info: dict[str, Any]) -> dict[str, Any]:
    """The info a server sends: JSON-safe, without the images (they travel as PNG), ``state_key`` as a string."""
    sent = json_safe({k: v for k, v in info.items() if k not in ("images", "state_key")})
    if info.get("state_key") is not None:
        sent["state_key"] = str(info["state_key"])
    return sent


def encode_images(images: list) -> list[str]:
    """The images as base64 PNG (:func:`mirl.envs.images.png_bytes`)."""
    from mirl.envs.images import png_bytes

    return [base64.b64encode(png_bytes(image)).decode("ascii") for image in images]


def decode_images(encoded: Any) -> list:
    """RGB images from a list of base64 PNG strings; ``ValueError`` for anything else,
    :class:`~mirl.envs.images.OversizedImages`
    when the message holds more than :data:`~mirl.envs.images.MAX_MESSAGE_IMAGES` images or its headers claim
    more than :data:`~mirl.envs.images.MAX_MESSAGE_PIXELS` pixels in all (checked before any image is decoded:
    5,000 tiny PNGs of 2048 x 2048 1-bit pixels fit in 4 MiB and decode to 66 GB)."""
    from mirl.envs.images import (
        MAX_MESSAGE_IMAGES,
        MAX_MESSAGE_PIXELS,
        MAX_PNG_BYTES,
        OversizedImages,
        image_from_png,
        png_size,
    )

    if not isinstance(encoded, list) or not all(isinstance(item, str) for item in encoded):
        raise ValueError("'images' must be a list of base64 PNG strings")
    if len(encoded) > MAX_MESSAGE_IMAGES:
        raise OversizedImages(f"{len(encoded)} images, above {MAX_MESSAGE_IMAGES} per message")
    raw = []
    for item in encoded:
        if len(item) > MAX_PNG_BYTES * 4 // 3 + 4:
            raise OversizedImages(f"an image is above the {MAX_PNG_BYTES}-byte limit")
        try:
            raw.append(base64.b64decode(item, validate=True))
        except binascii.Error as error:
            raise ValueError(f"an image is not base64 PNG: {error}") from None
    pixels = sum(width * height for width, height in map(png_size, raw))
    if pixels > MAX_MESSAGE_PIXELS:
        raise OversizedImages(f"the images' headers claim {pixels} pixels, above {MAX_MESSAGE_PIXELS} per message")
    try:
        return [image_from_png(data) for data in raw]
    except OSError as error:
        raise ValueError(f"an image is not a readable PNG: {error}") from None


def agent_facts(env) -> dict[str, Any]:
    """What the rollout engine reads from ``env`` to prompt it (read after ``reset``: an env may narrow its
    action words per instance)."""
    facts = {field: getattr(env, field) for field in AGENT_FIELDS}
    if facts["action_words"] is not None:
        facts["action_words"] = list(facts["action_words"])
    return facts
