"""A hostile run directory cannot make the report read through links, read without limit, or embed foreign bytes.

Each attack replaces the first board of every saved episode (what the transcripts show first); the report must
still be written, name the refused image with the reason, and embed no picture for it.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil

import pytest
from PIL import Image

from mirl.envs.images import MAX_PNG_BYTES, png_bytes
from mirl.report import build_report

from ..report.conftest import write_vision_run

IMG = re.compile(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]+" alt="board image ([0-9a-f]{16})"')


def _first_boards(run) -> list[str]:
    lines = (run / "rollouts" / "iteration_000001.jsonl").read_text().splitlines()
    return sorted({json.loads(line)["turns"][0]["images"][0] for line in lines})


def _encoded(image, fmt: str) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def _plant(path, attack: str, outside) -> None:
    """Replace the stored board at ``path`` as ``attack`` says."""
    if attack == "fifo":
        path.unlink()
        os.mkfifo(path)
        return
    if attack == "link":  # a link to the very same pixels: only the link itself is at fault
        target = outside / path.name
        shutil.move(path, target)
        path.symlink_to(target)
        return
    content = {
        "oversized": b"\x89PNG" + b"\0" * MAX_PNG_BYTES,
        "other_pixels": png_bytes(Image.new("RGB", (8, 8), (1, 2, 3))),
        "jpeg": _encoded(Image.new("RGB", (8, 8)), "JPEG"),
        "huge_side": _encoded(Image.new("RGB", (4096, 1)), "PNG"),
        "garbage": b"not an image at all" * 10,
    }[attack]
    path.write_bytes(content)


REASONS = {
    "fifo": "not a regular file",
    "link": "is a symbolic link",
    "oversized": "is larger than",
    "other_pixels": "holds other pixels than its name says",
    "jpeg": "expected a PNG",
    "huge_side": "pixels a side",
    "garbage": "expected a PNG image",
}


@pytest.mark.parametrize("attack", sorted(REASONS))
def test_hostile_image_files_are_named_not_shown(tmp_path, attack):
    run = write_vision_run(tmp_path / "runs", omit=("metrics", "groups"))
    outside = tmp_path / "outside"
    outside.mkdir()
    attacked = _first_boards(run)
    for ident in attacked:
        _plant(run / "rollouts" / "images" / f"{ident}.png", attack, outside)
    page = build_report(run).html_path.read_text()
    shown = set(IMG.findall(page))
    assert shown and not shown & set(attacked)  # the other boards still show
    notes = re.findall(r'<p class="missing">Missing: image ([0-9a-f]{16})\.png ([^<]*)</p>', page)
    assert notes and all(ident in attacked and REASONS[attack] in reason for ident, reason in notes)


def test_a_linked_images_directory_is_not_read(tmp_path):
    run = write_vision_run(tmp_path / "runs", omit=("metrics", "groups"))
    images = run / "rollouts" / "images"
    shutil.move(images, tmp_path / "elsewhere")
    images.symlink_to(tmp_path / "elsewhere")
    page = build_report(run).html_path.read_text()
    assert not IMG.search(page) and "Missing: image rollouts/images is a symbolic link; not read" in page


def test_an_image_id_cannot_name_a_path(tmp_path):
    run = write_vision_run(tmp_path / "runs", omit=("metrics", "groups"))
    secret = tmp_path / "secret.png"
    secret.write_bytes(png_bytes(Image.new("RGB", (8, 8))))
    path = run / "rollouts" / "iteration_000001.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        record["turns"][0]["images"] = ["../../../secret", str(secret)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    page = build_report(run).html_path.read_text()
    assert "Missing: image &#x27;../../../secret&#x27; is not an image id (16 hex digits)" in page
    assert page.count('<span class="missing">image ') >= 4 and len(IMG.findall(page)) > 0
