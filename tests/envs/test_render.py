"""Grid boards drawn as images: options, the image contract, determinism per state, legends, readability in grey."""

from __future__ import annotations

import importlib
import itertools
import random
from pathlib import Path

import pytest

from mirl.envs import check_env, make, registry
from mirl.envs.checker import transcript
from mirl.envs.grid.render import MAX_CELL_SIZE, MIN_CELL_SIZE, RENDER_MODES, _tile_image, draw_board
from mirl.envs.images import IMAGE_PLACEHOLDER, MAX_IMAGE_SIDE, image_id, observation_images

GRID_ENVS = sorted(name for name, cls in registry.items() if cls.__module__.startswith("mirl.envs.grid."))
MOVES = ("Up", "Down", "Left", "Right")


def _tiles(name: str) -> dict:
    return importlib.import_module(registry[name].__module__).TILES


def test_every_grid_env_is_covered():
    assert {"sokoban", "frozenlake"} <= set(GRID_ENVS)


@pytest.mark.parametrize(
    ("name", "render", "view"), list(itertools.product(GRID_ENVS, RENDER_MODES, ("grid", "coordinates")))
)
def test_check_env_passes_in_every_render_mode(name, render, view):
    check_env(make(name, render=render, view=view))
    check_env(make(name, render=render, view=view, cell_size=MIN_CELL_SIZE), seed=7)


@pytest.mark.parametrize("name", GRID_ENVS)
def test_text_is_the_default_and_carries_no_images(name):
    default, text = make(name), make(name, render="text")
    assert transcript(default, 3) == transcript(text, 3)
    for observation, info, *_ in transcript(default, 3)[:1]:
        assert IMAGE_PLACEHOLDER not in observation and "images" not in info
    assert default.instruction == text.instruction and "Image tiles" not in default.instruction


@pytest.mark.parametrize("name", GRID_ENVS)
def test_image_and_both_observations(name):
    text_env, image_env, both_env = (make(name, render=mode, cell_size=20) for mode in RENDER_MODES)
    grid, _ = text_env.reset(seed=5)
    image_text, image_info = image_env.reset(seed=5)
    both_text, both_info = both_env.reset(seed=5)
    assert image_text == IMAGE_PLACEHOLDER
    assert both_text == f"{grid}\n{IMAGE_PLACEHOLDER}"
    (board,) = observation_images(image_text, image_info)
    rows = grid.split("\n")
    assert board.size == (20 * len(rows[0]), 20 * len(rows))
    assert image_id(board) == image_id(observation_images(both_text, both_info)[0])


@pytest.mark.parametrize("name", GRID_ENVS)
def test_instruction_carries_the_tile_legend_in_image_modes(name):
    env = make(name, render="image", cell_size=32)
    tiles = _tiles(name)
    assert env.instruction.startswith(make(name).instruction)
    assert "one 32 x 32 pixel square per cell" in env.instruction
    for symbol, tile in tiles.items():
        assert f"{tile.name} ({symbol}): {tile.look}" in env.instruction


def _walk(env, seed: int, steps: int, rng: random.Random) -> list[tuple[str, str]]:
    """(observation text, image id) of the reset and of each step of a random walk."""
    observation, info = env.reset(seed=seed)
    seen = [(observation, image_id(observation_images(observation, info)[0]))]
    for _ in range(steps):
        observation, _, terminated, truncated, info = env.step(rng.choice(MOVES))
        seen.append((observation, image_id(observation_images(observation, info)[0])))
        if terminated or truncated:
            break
    return seen


@pytest.mark.parametrize("name", GRID_ENVS)
def test_equal_states_give_equal_images_and_different_states_different_images(name):
    """Over 300 random walks: the text board (the whole state) and the image id determine each other."""
    env, rng = make(name, render="both"), random.Random(0)
    image_of: dict[str, str] = {}
    board_of: dict[str, str] = {}
    for seed in range(300):
        for observation, ident in _walk(env, seed, 12, rng):
            assert image_of.setdefault(observation, ident) == ident, "one state drawn two ways"
            assert board_of.setdefault(ident, observation) == observation, "two states drawn alike"
    assert len(image_of) > 1000  # many distinct states were visited, so the test could fail


@pytest.mark.parametrize("name", GRID_ENVS)
def test_a_move_changes_the_image_and_a_blocked_move_does_not(name):
    env = make(name, render="image", success_rate=1.0) if name == "frozenlake" else make(name, render="image")
    changed = unchanged = 0
    for seed in range(40):
        observation, info = env.reset(seed=seed)
        before = image_id(info["images"][0])
        _, _, _, _, info = env.step(MOVES[seed % 4])
        after = image_id(info["images"][0])
        if info["action_effective"]:
            changed += before != after
        else:
            unchanged += before == after
            assert before == after
    assert changed > 0 and unchanged > 0


@pytest.mark.parametrize("name", GRID_ENVS)
@pytest.mark.parametrize("cell_size", [MIN_CELL_SIZE, 28, MAX_CELL_SIZE])
def test_tiles_differ_in_grey_scale(name, cell_size):
    """Readable without colour: every pair of tiles differs once converted to grey."""
    tiles = _tiles(name)
    greys = {symbol: _tile_image(tile, cell_size).convert("L").tobytes() for symbol, tile in tiles.items()}
    assert len(set(greys.values())) == len(tiles)


def test_largest_boards_fit_the_image_limit():
    env = make("frozenlake", size=32, render="image", cell_size=MAX_CELL_SIZE)
    observation, info = env.reset(seed=0)
    (board,) = observation_images(observation, info)
    assert board.size == (32 * MAX_CELL_SIZE, 32 * MAX_CELL_SIZE) and max(board.size) <= MAX_IMAGE_SIDE


@pytest.mark.parametrize("name", GRID_ENVS)
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"render": "pixels"}, "render must be one of text, image, both, got 'pixels'"),
        ({"render": 3}, "option render of environment .* must be a string"),
        ({"cell_size": MIN_CELL_SIZE - 1}, f"cell_size must be {MIN_CELL_SIZE}..{MAX_CELL_SIZE} pixels"),
        ({"cell_size": MAX_CELL_SIZE + 1}, f"option cell_size of environment .* must be at most {MAX_CELL_SIZE}"),
        ({"cell_size": "big"}, "option cell_size of environment .* must be an int"),
    ],
)
def test_bad_render_options_are_refused(name, options, message):
    with pytest.raises(ValueError, match=message):
        make(name, **options)


def test_an_unknown_symbol_is_refused():
    with pytest.raises(ValueError, match="no tile for board symbol '\\?'"):
        draw_board(["#?"], _tiles("sokoban"), 8)


@pytest.mark.parametrize(("name", "cells"), [("sokoban", 6), ("frozenlake", 4)])
def test_default_cell_size_is_one_qwen25vl_token_per_cell(name, cells):
    """Qwen2.5-VL's own image processor keeps the board's size: (2 x cells)^2 patches of 14 px, cells^2 tokens."""
    qwen = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    processor = qwen.Qwen2VLImageProcessorPil()
    observation, info = make(name, render="image").reset(seed=0)
    (board,) = observation_images(observation, info)
    out = processor(images=[board], return_tensors="np")
    assert board.size == (28 * cells, 28 * cells)
    assert out["image_grid_thw"].tolist() == [[1, 2 * cells, 2 * cells]]  # no resize: 168 px = 12 patches of 14
    assert out["pixel_values"].shape[0] // processor.merge_size**2 == cells * cells  # one merged token per cell


def test_docs_list_every_tile():
    text = (Path(__file__).resolve().parents[2] / "docs" / "envs.md").read_text(encoding="utf-8")
    for name in GRID_ENVS:
        for symbol, tile in _tiles(name).items():
            assert f"| `{symbol}` | {tile.name} | {tile.look} |" in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("{render: pixels}", r"envs\[0\] \('sokoban'\): render must be one of text, image, both"),
        ("{cell_size: 100}", r"envs\[0\] \('sokoban'\): option cell_size .* must be at most 64"),
    ],
)
def test_a_training_config_refuses_bad_render_options_before_any_model_loads(options, message):
    from mirl.config import ConfigError
    from mirl.config_files import load_config

    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"envs=[{{name: sokoban, options: {options}}}]"])
    assert load_config(None, ["envs=[{name: sokoban, options: {render: image, cell_size: 14}}]"])
