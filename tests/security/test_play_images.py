"""`mirl play render=image` never writes through a link planted where its images go."""

from __future__ import annotations

import subprocess
import sys


def play(args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mirl.cli", "play", "sokoban", "render=image", *args],
        input="Up\n",
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_a_linked_image_directory_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "boards").symlink_to(victim)
    result = play(["--image-dir", "boards"], tmp_path)
    assert result.returncode == 2 and list(victim.iterdir()) == []
    assert result.stderr == (
        "mirl play: boards is a symbolic link; mirl never writes through links. Remove it (rm boards) and run again\n"
    )


def test_a_linked_default_directory_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "mirl-play").symlink_to(victim)
    result = play([], tmp_path)
    assert result.returncode == 2 and list(victim.iterdir()) == []
    assert "mirl-play is a symbolic link" in result.stderr


def test_a_link_planted_at_an_image_name_is_replaced_not_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("keep me")
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "step_001.png").symlink_to(secret)
    result = play(["--image-dir", "boards"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert secret.read_text() == "keep me"
    assert not (boards / "step_001.png").is_symlink() and (boards / "step_001.png").read_bytes()[:4] == b"\x89PNG"
