"""`mirl play` with an env that shows images: PNGs per step, paths in place of the placeholder, through the real CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mirl.envs import make
from mirl.envs.images import image_from_png, image_id


def play(args: list[str], script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mirl.cli", "play", *args],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _expected_ids(options: dict, seed: int, actions: list[str]) -> list[str]:
    env = make("sokoban", **options)
    ids = [image_id(env.reset(seed=seed)[1]["images"][0])]
    ids += [image_id(env.step(action)[4]["images"][0]) for action in actions]
    return ids


def test_render_image_writes_each_step_and_prints_its_path(tmp_path):
    result = play(["sokoban", "--seed", "3", "render=image"], "Up\nfly\nRight\nquit\n", tmp_path)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "mirl-play" / "sokoban-seed3"
    names = [f"step_{i:03d}.png" for i in range(4)]  # the reset, then one per action (the invalid one too)
    assert sorted(p.name for p in folder.iterdir()) == names
    for name in names:
        assert f"\n[image: {Path('mirl-play', 'sokoban-seed3', name)}]\n" in result.stdout
    assert "######" not in result.stdout  # image only: no text board
    assert "Image tiles: wall (#): dark grey square with light brick lines;" in result.stdout
    written = [image_id(image_from_png((folder / name).read_bytes())) for name in names]
    assert written == _expected_ids({"render": "image"}, 3, ["Up", "fly", "Right"])
    assert written[1] != written[0] and written[2] == written[1]  # a move changes the board, an invalid word not


def test_render_both_prints_the_text_board_too_into_a_chosen_directory(tmp_path):
    boards = tmp_path / "boards"
    result = play(["sokoban", "render=both", "--image-dir", str(boards), "cell_size=16"], "Up\n", tmp_path)
    assert result.returncode == 0, result.stderr
    initial, _ = make("sokoban").reset(seed=0)
    assert f"\n\n{initial}\n[image: {boards / 'step_000.png'}]\n" in result.stdout
    assert sorted(p.name for p in boards.iterdir()) == ["step_000.png", "step_001.png"]
    assert not (tmp_path / "mirl-play").exists()
    first = image_from_png((boards / "step_000.png").read_bytes())
    assert first.size == (16 * 6, 16 * 6)
    assert image_id(first) == _expected_ids({"render": "both", "cell_size": 16}, 0, [])[0]


def test_text_play_writes_no_images(tmp_path):
    result = play(["frozenlake"], "Left\n", tmp_path)
    assert result.returncode == 0 and "[image:" not in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_bad_render_option_is_one_line(tmp_path):
    result = play(["sokoban", "render=pixels"], "", tmp_path)
    assert result.returncode == 2
    assert result.stderr == ("mirl play: render must be one of text, image, both, got 'pixels'; e.g. render=image\n")
