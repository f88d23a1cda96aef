"""Hostile rollout image folders: planted links, forged and oversized PNGs, ids that try to be paths."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from mirl.envs.images import MAX_PNG_BYTES, image_id, png_bytes
from mirl.rollout.io import IMAGES_DIR, image_loader, read_episodes, write_episodes
from mirl.safeio import RunDirError
from mirl.types import ContextImage, EnvSpec, Episode, ImageInputs, Turn


def _episode(image) -> Episode:
    inputs = ImageInputs(image_id(image), image, None, (1, 2, 2), (7, 8, 9), 1, 1)
    turn = Turn(
        (1, 8, 2), (3,), (-0.5,), "<think>", "obs", None, (), 0.0, False, False, images=(ContextImage(1, inputs),)
    )
    return Episode(EnvSpec("sokoban", 0), 0, 0, (turn,), False, "max_turns")


def test_a_link_planted_at_the_images_folder_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / IMAGES_DIR).symlink_to(elsewhere)
    with pytest.raises(RunDirError, match="symbolic link"):
        write_episodes(tmp_path / "rollouts" / "it.jsonl", [_episode(Image.new("RGB", (4, 4), (1, 2, 3)))])
    assert list(elsewhere.iterdir()) == []


def test_a_link_planted_at_an_image_file_is_replaced_not_followed(tmp_path):
    image = Image.new("RGB", (4, 4), (1, 2, 3))
    folder = tmp_path / "rollouts" / IMAGES_DIR
    folder.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (folder / f"{image_id(image)}.png").symlink_to(victim)
    write_episodes(tmp_path / "rollouts" / "it.jsonl", [_episode(image)])
    assert victim.read_text() == "keep me"
    target = folder / f"{image_id(image)}.png"
    assert not target.is_symlink() and target.read_bytes() == png_bytes(image)


def _read(tmp_path, mutate):
    image = Image.new("RGB", (4, 4), (1, 2, 3))
    path = write_episodes(tmp_path / "rollouts" / "it.jsonl", [_episode(image)])
    mutate(path, path.parent / IMAGES_DIR / f"{image_id(image)}.png")
    return read_episodes(path, process=lambda decoded: decoded)


def test_a_forged_png_whose_pixels_differ_from_its_name_is_refused(tmp_path):
    forged = png_bytes(Image.new("RGB", (4, 4), (9, 9, 9)))
    with pytest.raises(ValueError, match="content id differs"):
        _read(tmp_path, lambda path, png: png.write_bytes(forged))


def test_an_oversized_png_is_refused_before_decoding(tmp_path):
    with pytest.raises(RunDirError, match="larger than"):
        _read(tmp_path, lambda path, png: png.write_bytes(b"\x89PNG" + b"\0" * MAX_PNG_BYTES))


def test_an_image_id_that_is_a_path_is_refused(tmp_path):
    def traverse(path, png):
        record = json.loads(path.read_text())
        record["turns"][0]["images"] = ["../../../../etc/passwd"]
        path.write_text(json.dumps(record) + "\n")

    with pytest.raises(ValueError, match="16 hex digits"):
        _read(tmp_path, traverse)


def test_a_huge_decoded_image_is_refused(tmp_path):
    loader = image_loader(tmp_path, process=lambda decoded: decoded)
    big = Image.new("RGB", (4000, 2), (0, 0, 0))
    big.save(tmp_path / "00000000000000aa.png")
    with pytest.raises(ValueError, match="pixels a side"):
        loader("00000000000000aa")
