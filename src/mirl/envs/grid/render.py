"""Boards drawn as RGB images: the ``render`` and ``cell_size`` options of the grid envs.

A grid env renders its board as text (``render="text"``, the default and the only mode before images existed),
as an image (``"image"``) or as both (``"both"``). The image is drawn from the text board itself, one square of
``cell_size`` pixels per symbol, so text and image always show the same state and equal states give equal
pixels. Each symbol maps to a :class:`Tile`: a ground colour and simple shapes drawn with Pillow (rings, discs,
crossed squares, diamonds, brick lines), chosen so that the tiles also differ in grey scale, i.e. the board
reads without colour. Observations follow :mod:`mirl.envs.images`: the text holds
:data:`~mirl.envs.images.IMAGE_PLACEHOLDER` where the image belongs and ``info["images"]`` holds the image.

The default cell size is 28 pixels: Qwen2.5-VL cuts an image into 14-pixel patches and merges 2 x 2 of them
into one visual token, so a 28-pixel cell is exactly one token, cell borders fall on token borders, and a side
that is a multiple of 28 is left unresized by its image processor (a 6 x 6 room is 168 x 168 pixels, 36 tokens).

>>> from mirl.envs.images import image_id
>>> tiles = {"#": Tile("wall", (90, 90, 96), (("bricks", (150, 150, 156)),), "dark grey with brick lines")}
>>> board = draw_board(["##", "##"], tiles, 8)
>>> board.size, board.mode, image_id(board) == image_id(draw_board(["##", "##"], tiles, 8))
((16, 16), 'RGB', True)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mirl.envs.images import IMAGE_PLACEHOLDER

RENDER_MODES = ("text", "image", "both")
DEFAULT_CELL_SIZE = 28  # one Qwen2.5-VL visual token (2 x 2 merged 14-pixel patches) per cell
MIN_CELL_SIZE = 8  # below this the shapes blur into each other
MAX_CELL_SIZE = 64  # keeps the largest board (a 32 x 32 lake) within MAX_IMAGE_SIDE = 2048 pixels
GRID_LINE = (40, 40, 40)  # one-pixel border of every cell

RGB = tuple[int, int, int]


@dataclass(frozen=True)
class Tile:
    """How one board symbol is drawn: ``marks`` are ``(shape, colour)`` pairs drawn in order on the ``ground``."""

    name: str  # what the cell is, e.g. "box on target"
    ground: RGB
    marks: tuple[tuple[str, RGB], ...]
    look: str  # the drawing in words, for the legend


def _bricks(draw: Any, size: int, colour: RGB) -> None:
    width = max(1, size // 14)
    for row in (size // 3, 2 * size // 3):
        draw.line([(0, row), (size, row)], fill=colour, width=width)
    third = size // 3
    for col, top, bottom in ((size // 2, 0, third), (size // 4, third, 2 * third), (size // 2, 2 * third, size)):
        draw.line([(col, top), (col, bottom)], fill=colour, width=width)


def _ring(draw: Any, size: int, colour: RGB) -> None:
    margin = size * 0.12
    draw.ellipse([margin, margin, size - margin, size - margin], outline=colour, width=max(2, size // 9))


def _crate(draw: Any, size: int, colour: RGB) -> None:
    low, high = size * 0.22, size * 0.78
    outline = max(1, size // 20)
    draw.rectangle([low, low, high, high], fill=colour, outline=(40, 25, 10), width=outline)
    draw.line([(low, low), (high, high)], fill=(40, 25, 10), width=outline)
    draw.line([(low, high), (high, low)], fill=(40, 25, 10), width=outline)


def _disc(draw: Any, size: int, colour: RGB) -> None:
    low, high = size * 0.27, size * 0.73
    draw.ellipse([low, low, high, high], fill=colour, outline=(255, 255, 255), width=max(1, size // 20))


def _hole(draw: Any, size: int, colour: RGB) -> None:
    margin = size * 0.1
    draw.ellipse([margin, margin, size - margin, size - margin], fill=colour)


def _diamond(draw: Any, size: int, colour: RGB) -> None:
    middle, reach = size / 2, size * 0.4
    corners = [(middle, middle - reach), (middle + reach, middle), (middle, middle + reach), (middle - reach, middle)]
    draw.polygon(corners, fill=colour, outline=(60, 40, 0))


SHAPES = {"bricks": _bricks, "ring": _ring, "crate": _crate, "disc": _disc, "hole": _hole, "diamond": _diamond}


@functools.lru_cache(maxsize=256)
def _tile_image(tile: Tile, cell_size: int):
    """One cell drawn on its own: ``cell_size`` x ``cell_size`` RGB pixels, bordered by :data:`GRID_LINE`."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (cell_size, cell_size), tile.ground)
    draw = ImageDraw.Draw(image)
    for shape, colour in tile.marks:
        SHAPES[shape](draw, cell_size, colour)
    draw.rectangle([0, 0, cell_size - 1, cell_size - 1], outline=GRID_LINE, width=1)
    return image


def draw_board(rows: Sequence[str], tiles: Mapping[str, Tile], cell_size: int):
    """The board whose text rows are ``rows`` (one symbol per cell) as a new RGB image, row 0 at the top."""
    from PIL import Image

    width = max((len(row) for row in rows), default=0)
    board = Image.new("RGB", (width * cell_size, len(rows) * cell_size), GRID_LINE)
    for r, row in enumerate(rows):
        for c, symbol in enumerate(row):
            if symbol not in tiles:
                raise ValueError(f"no tile for board symbol {symbol!r}; known: {''.join(tiles)}")
            board.paste(_tile_image(tiles[symbol], cell_size), (c * cell_size, r * cell_size))
    return board


def legend(tiles: Mapping[str, Tile]) -> str:
    """The tiles in words, each with its text symbol: ``wall (#): dark grey with brick lines; ...``."""
    return "; ".join(f"{tile.name} ({symbol}): {tile.look}" for symbol, tile in tiles.items())


def check_render(render: str, cell_size: int) -> tuple[str, int]:
    """Validate the ``render`` and ``cell_size`` options of a grid env."""
    if render not in RENDER_MODES:
        raise ValueError(f"render must be one of {', '.join(RENDER_MODES)}, got {render!r}; e.g. render=image")
    if not MIN_CELL_SIZE <= cell_size <= MAX_CELL_SIZE:
        raise ValueError(
            f"cell_size must be {MIN_CELL_SIZE}..{MAX_CELL_SIZE} pixels, got {cell_size}; "
            f"e.g. cell_size={DEFAULT_CELL_SIZE} (one Qwen2.5-VL visual token per cell)"
        )
    return render, cell_size


@dataclass(frozen=True)
class BoardView:
    """What a grid env shows of its board in one ``render`` mode: the observation text and ``info["images"]``."""

    mode: str
    cell_size: int
    tiles: Mapping[str, Tile]

    def text(self, grid: str, header: str = "") -> str:
        """The observation: ``header`` (may be empty), then the text grid, the image placeholder, or both."""
        shown = {"text": grid, "image": IMAGE_PLACEHOLDER, "both": f"{grid}\n{IMAGE_PLACEHOLDER}"}[self.mode]
        return f"{header}\n{shown}" if header else shown

    def info(self, grid: str) -> dict[str, list]:
        """``{"images": [board]}`` in the image modes, else ``{}`` (a text observation carries no images key)."""
        if self.mode == "text":
            return {}
        return {"images": [draw_board(grid.split("\n"), self.tiles, self.cell_size)]}

    def instruction(self) -> str:
        """The sentence the instruction gains in the image modes: how the image is laid out, and its tiles."""
        if self.mode == "text":
            return ""
        size = self.cell_size
        return (
            f" The board is shown as an image, one {size} x {size} pixel square per cell, row 0 at the top and "
            f"column 0 at the left. Image tiles: {legend(self.tiles)}."
        )
