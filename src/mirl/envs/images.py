"""Images in observations: the one contract between rendering envs, the rollout engine, rollout files and servers.

An env's observation stays a string (the Gymnasium contract of :mod:`mirl.envs.base`). An env that renders images
puts the literal :data:`IMAGE_PLACEHOLDER` in the observation text once per image, where the image belongs, and the
images themselves, in the same order, as RGB ``PIL.Image.Image`` objects in ``info["images"]`` (of ``reset`` and of
every ``step``). A text-only env puts no placeholder and no ``images`` key. The rollout engine turns each placeholder
into an image part of the chat message; rollout files store each image once as a PNG named by :func:`image_id`.

Images are data from an env (possibly a remote one), so everything here checks sizes before decoding.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

IMAGE_PLACEHOLDER = "<image>"
MAX_IMAGE_SIDE = 2048  # pixels; larger images from an env are refused
MAX_PNG_BYTES = 8 << 20  # bytes of one encoded image read back from a file or a server
MAX_MESSAGE_IMAGES = 16  # images of one observation
MAX_MESSAGE_PIXELS = 1 << 22  # pixels of one observation's images together (one 2048 x 2048 image, 12 MB as RGB)


class OversizedImages(ValueError):
    """Images past a size limit: a side above :data:`MAX_IMAGE_SIDE`, or one message above
    :data:`MAX_MESSAGE_IMAGES` images or :data:`MAX_MESSAGE_PIXELS` pixels."""


def observation_images(observation: str, info: dict[str, Any]) -> list:
    """The images of one observation, checked against its placeholders and the per-message limits.

    Raises ``ValueError`` when the number of placeholders and of images differ or an image is not an RGB
    ``PIL.Image.Image``, and :class:`OversizedImages` past :data:`MAX_IMAGE_SIDE`, :data:`MAX_MESSAGE_IMAGES` or
    :data:`MAX_MESSAGE_PIXELS`.

    >>> observation_images("a board", {})
    []
    """
    images = info.get("images")
    if images is not None and not isinstance(images, list | tuple):
        raise ValueError(f"info['images'] must be a list of images, got {type(images).__name__}")
    images = list(images or [])
    expected = observation.count(IMAGE_PLACEHOLDER)
    if expected != len(images):
        raise ValueError(
            f"observation has {expected} {IMAGE_PLACEHOLDER} placeholder(s) but info['images'] holds {len(images)}"
        )
    if len(images) > MAX_MESSAGE_IMAGES:
        raise OversizedImages(f"{len(images)} images, above {MAX_MESSAGE_IMAGES} per observation")
    for image in images:
        _check_image(image)
    pixels = sum(image.size[0] * image.size[1] for image in images)
    if pixels > MAX_MESSAGE_PIXELS:
        raise OversizedImages(f"{pixels} pixels, above {MAX_MESSAGE_PIXELS} per observation")
    return images


def _check_image(image: Any) -> None:
    from PIL import Image

    if not isinstance(image, Image.Image):
        raise ValueError(f"an observation image must be a PIL.Image.Image, got {type(image).__name__}")
    if image.mode != "RGB":
        raise ValueError(f"an observation image must be RGB, got mode {image.mode}; convert it with .convert('RGB')")
    if max(image.size) > MAX_IMAGE_SIDE:
        width, height = image.size
        raise OversizedImages(f"an observation image is {width}x{height}, above {MAX_IMAGE_SIDE} pixels a side")


def png_bytes(image) -> bytes:
    """The image as PNG bytes, deterministic for equal pixels (no metadata, fixed compression)."""
    _check_image(image)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False, compress_level=6)
    return buffer.getvalue()


def image_id(image) -> str:
    """A content name for an image: sha256 of its mode, size and raw pixels (first 16 hex digits).

    Equal pixels give equal ids whatever the encoder; this names the PNG in a rollout directory.
    """
    _check_image(image)
    digest = hashlib.sha256(f"{image.mode}:{image.size[0]}x{image.size[1]}:".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()[:16]


def png_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` from a PNG's header, read without decoding anything; ``ValueError`` when ``data`` is
    no PNG.

    >>> png_size(png_bytes(__import__("PIL.Image").Image.new("RGB", (3, 2))))
    (3, 2)
    """
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("expected a PNG image (its signature and header are missing)")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def image_from_png(data: bytes):
    """Decode PNG bytes read from a file or a server; the byte count and the header's size are checked before
    anything is decoded (a header claiming 2^30 pixels never reaches the decoder)."""
    from PIL import Image

    if len(data) > MAX_PNG_BYTES:
        raise ValueError(f"image of {len(data)} bytes is above the {MAX_PNG_BYTES}-byte limit")
    width, height = png_size(data)
    if max(width, height) > MAX_IMAGE_SIDE:
        raise ValueError(f"image is {width}x{height}, above {MAX_IMAGE_SIDE} pixels a side")
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as probe:
            if probe.size != (width, height):
                raise ValueError(f"a PNG whose header says {width}x{height} decodes as {probe.size}")
            image = probe.convert("RGB")
    except Image.DecompressionBombError as error:  # pragma: no cover - the side check above comes first
        raise ValueError(str(error)) from None
    return image
