import io

import pytest
from PIL import Image

from mirl.envs.images import IMAGE_PLACEHOLDER, image_from_png, image_id, observation_images, png_bytes


def _board(colour):
    image = Image.new("RGB", (8, 8), (0, 0, 0))
    image.putpixel((3, 4), colour)
    return image


def test_placeholders_and_images_must_match():
    image = _board((255, 0, 0))
    assert observation_images(f"see {IMAGE_PLACEHOLDER}", {"images": [image]}) == [image]
    with pytest.raises(ValueError, match="1 <image> placeholder"):
        observation_images(f"see {IMAGE_PLACEHOLDER}", {})
    with pytest.raises(ValueError, match="RGB"):
        observation_images(IMAGE_PLACEHOLDER, {"images": [image.convert("L")]})


def test_image_id_names_pixels_and_png_round_trips():
    red, red_again, blue = _board((255, 0, 0)), _board((255, 0, 0)), _board((0, 0, 255))
    assert image_id(red) == image_id(red_again) != image_id(blue)
    assert png_bytes(red) == png_bytes(red_again)
    back = image_from_png(png_bytes(red))
    assert image_id(back) == image_id(red)


def test_decoder_refuses_oversized_and_non_png_input():
    with pytest.raises(ValueError, match="limit"):
        image_from_png(b"\0" * ((8 << 20) + 1))
    jpeg = io.BytesIO()
    _board((1, 2, 3)).save(jpeg, format="JPEG")
    with pytest.raises(ValueError, match="expected a PNG"):
        image_from_png(jpeg.getvalue())
    huge = io.BytesIO()
    Image.new("RGB", (4096, 1)).save(huge, format="PNG")
    with pytest.raises(ValueError, match="pixels a side"):
        image_from_png(huge.getvalue())
