"""The rendered boards of saved turns, read back for the report, and the run's modality.

A turn record lists the content ids of its observation's images under ``"images"``; each image is stored once as
``<run>/rollouts/images/<id>.png`` (:mod:`mirl.envs.images`). A run directory may come from someone else, so an
image is shown only when its id is a well-formed name (16 hex digits: no path can be smuggled in), the file is a
regular file and not a link (opened with ``O_NOFOLLOW``), at most :data:`~mirl.envs.images.MAX_PNG_BYTES`
bytes, a PNG within the side limit, and its pixels hash to its name. What reaches the page is the decoded image
encoded again (never the file's own bytes), within a total of :data:`MAX_PAGE_IMAGE_BYTES` per report. An image
that fails any of these is named, with the reason, in place of the picture and in the section's notes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mirl.envs.images import MAX_PNG_BYTES, image_from_png, image_id, png_bytes
from mirl.report.html import data_uri, esc
from mirl.safeio import RunDirError, read_bytes

IMAGE_NAME = re.compile(r"[0-9a-f]{16}\Z")
MAX_PAGE_IMAGE_BYTES = 24 << 20  # encoded PNG bytes embedded in one report (a 168 x 168 board is about 1 KiB)
MAX_IMAGES_PER_TURN = 8


def turn_image_ids(turn: dict[str, Any]) -> list[Any]:
    """The ``"images"`` list of a turn record (anything else counts as no images).

    >>> turn_image_ids({"images": ["0123456789abcdef"]}), turn_image_ids({"images": "x"}), turn_image_ids({})
    (['0123456789abcdef'], [], [])
    """
    ids = turn.get("images")
    return list(ids) if isinstance(ids, list) else []


def carries_images(episodes: list[dict[str, Any]]) -> bool:
    """Whether any turn of ``episodes`` lists an image."""
    return any(
        turn_image_ids(turn)
        for episode in episodes
        if isinstance(episode.get("turns"), list)
        for turn in episode["turns"]
        if isinstance(turn, dict)
    )


class RunImages:
    """Reads a run's stored images for the transcripts, within the page budget; ``notes`` says what was refused.

    ``seen`` turns True once a turn listing images is drawn, which makes the report label the run ``vision``.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.directory = Path(run_dir) / "rollouts" / "images"
        self.budget = MAX_PAGE_IMAGE_BYTES
        self.notes: list[str] = []
        self.seen = False

    def png(self, ident: Any) -> tuple[bytes | None, str]:
        """``(PNG bytes to embed, "")`` or ``(None, why it is not shown)``."""
        if not isinstance(ident, str) or not IMAGE_NAME.match(ident):
            return None, f"{str(ident)[:40]!r} is not an image id (16 hex digits)"
        if self.directory.is_symlink():
            return None, "rollouts/images is a symbolic link; not read"
        try:
            image = image_from_png(read_bytes(self.directory / f"{ident}.png", MAX_PNG_BYTES, follow_links=False))
        except FileNotFoundError:
            return None, f"{ident}.png is missing"
        except (RunDirError, ValueError, OSError) as error:  # PIL raises its errors as OSError or ValueError
            return None, f"{ident}.png not shown ({str(error).replace(str(self.directory) + '/', '')[:160]})"
        if image_id(image) != ident:
            return None, f"{ident}.png holds other pixels than its name says; not shown"
        data = png_bytes(image)
        if len(data) > self.budget:
            return None, f"{ident}.png not shown: the report's {MAX_PAGE_IMAGE_BYTES >> 20} MiB of images are used"
        self.budget -= len(data)
        return data, ""

    def turn_html(self, turn: dict[str, Any]) -> str:
        """The turn's images as inline ``<img>`` tags (or the reason each is missing); '' for a text turn."""
        ids = turn_image_ids(turn)
        if not ids:
            return ""
        self.seen = True
        parts = []
        for ident in ids[:MAX_IMAGES_PER_TURN]:
            data, problem = self.png(ident)
            if data is None:
                self.notes.append(f"image {problem}")
                parts.append(f'<span class="missing">image {esc(problem)}</span>')
            else:
                parts.append(f'<img src="{data_uri(data)}" alt="board image {esc(ident)}" title="{esc(ident)}">')
        if len(ids) > MAX_IMAGES_PER_TURN:
            parts.append(f'<span class="missing">{len(ids) - MAX_IMAGES_PER_TURN} more images not shown</span>')
        return f'<div class="boards">{"".join(parts)}</div>'


def modality(config_modality: Any, saw_images: bool) -> str:
    """``"vision"`` when the config's ``model.modality`` is vision or any turn carries images, else ``"text"``.

    >>> modality("auto", False), modality("vision", False), modality(None, True)
    ('text', 'vision', 'vision')
    """
    return "vision" if config_modality == "vision" or saw_images else "text"
