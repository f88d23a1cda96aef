"""Writers never follow a link swapped in for their folder while they write. The folder was checked, then written
by its path: a folder replaced by a link between the check and the write (``mv boards boards.old; ln -s victim
boards``) got the files, temporary ones included, in the other folder (2 temporary PNGs of ``mirl play`` in one run
in two). Now a write opens its folder once without following links, every folder from the user-named one down
(``O_DIRECTORY | O_NOFOLLOW``), and creates, renames and appends relative to that descriptor (``dir_fd``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from mirl.cli.envs import ImageFiles
from mirl.safeio import RunDirError, append_line, atomic_write_bytes


def _swap(folder: Path, victim: Path) -> None:
    """What an attacker does: move the folder away and put a link to ``victim`` in its place."""
    folder.rename(folder.with_name(folder.name + ".old"))
    folder.symlink_to(victim, target_is_directory=True)


def _everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(params=["before-create", "before-rename"])
def swap_mid_write(request, monkeypatch):
    """Swap a folder for a link in the middle of a write: just before the file is created (the first ``os.open``
    that creates a file), or after its bytes are written and before it is renamed into place (the first fsync)."""
    done = []

    def arm(folder: Path, victim: Path) -> None:
        if request.param == "before-create":
            real = os.open

            def hooked(path, flags, *args, **kwargs):
                if flags & os.O_CREAT and not done:
                    done.append(path)
                    _swap(folder, victim)
                return real(path, flags, *args, **kwargs)

            monkeypatch.setattr(os, "open", hooked)  # tempfile's mkstemp calls it too
        else:
            real_fsync = os.fsync

            def hooked_fsync(descriptor):
                if not done:
                    done.append(descriptor)
                    _swap(folder, victim)
                return real_fsync(descriptor)

            monkeypatch.setattr(os, "fsync", hooked_fsync)

    return arm


def test_a_file_written_while_its_folder_is_swapped_lands_in_the_folder_it_opened(tmp_path, swap_mid_write):
    folder, victim = tmp_path / "out", tmp_path / "victim"
    folder.mkdir()
    victim.mkdir()
    swap_mid_write(folder, victim)
    atomic_write_bytes(folder / "report.html", b"<html>")
    assert _everything_under(victim) == []
    assert (tmp_path / "out.old" / "report.html").read_bytes() == b"<html>"


def _board() -> tuple[str, dict]:
    return "board: <image>", {"images": [Image.new("RGB", (4, 4), (200, 10, 10))]}


def test_play_images_never_land_in_a_swapped_in_folder(tmp_path, swap_mid_write):
    root, victim = tmp_path / "mirl-play", tmp_path / "victim"
    victim.mkdir()
    files = ImageFiles(root / "sokoban-1", default_root=root)
    files.show(*_board())  # makes the folders
    swap_mid_write(root, victim)  # the root the user named, above the folder written
    files.show(*_board())
    assert _everything_under(victim) == []
    assert _everything_under(tmp_path / "mirl-play.old") == [
        "sokoban-1",
        "sokoban-1/step_000.png",
        "sokoban-1/step_001.png",
    ]


def test_an_append_never_lands_in_a_swapped_in_folder(tmp_path, monkeypatch):
    folder, victim = tmp_path / "run", tmp_path / "victim"
    folder.mkdir()
    victim.mkdir()
    real = os.open

    def hooked(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and not victim.with_name("run.old").exists():
            _swap(folder, victim)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", hooked)
    append_line(folder / "metrics.jsonl", "{}")
    assert _everything_under(victim) == []
    assert (tmp_path / "run.old" / "metrics.jsonl").read_text() == "{}\n"


def test_a_named_folder_swapped_above_the_one_written_is_refused(tmp_path, monkeypatch):
    import mirl.envs.images as images

    root, victim = tmp_path / "mirl-play", tmp_path / "victim"
    victim.mkdir()
    files = ImageFiles(root / "sokoban-1", default_root=root)
    files.show(*_board())
    encode = images.png_bytes

    def swapping(image):  # runs after the folders were checked, before the file is written
        _swap(root, victim)
        return encode(image)

    monkeypatch.setattr(images, "png_bytes", swapping)
    with pytest.raises(RunDirError, match="mirl-play is a symbolic link"):
        files.show(*_board())
    assert _everything_under(victim) == []


def test_a_checkpoint_written_while_the_run_folder_is_swapped_stays_in_the_run(tmp_path, swap_mid_write):
    import torch

    from mirl.trainer.checkpoint import list_checkpoints, save_checkpoint

    run, victim = tmp_path / "run", tmp_path / "victim"
    (victim / "checkpoints").mkdir(parents=True)
    save_checkpoint(run / "checkpoints", 1, {"iteration": 1}, keep=2)
    swap_mid_write(run, victim)
    save_checkpoint(run / "checkpoints", 2, {"iteration": 2}, keep=2)
    assert _everything_under(victim) == ["checkpoints"]
    kept = list_checkpoints(tmp_path / "run.old" / "checkpoints")
    assert [p.name for p in kept] == ["iteration_000001", "iteration_000002"]
    assert torch.load(kept[-1] / "state.pt", weights_only=True) == {"iteration": 2}
