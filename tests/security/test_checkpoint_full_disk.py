"""A full disk while a checkpoint is written: the message names the checkpoint and the folder. Before, on a real
9 MiB tmpfs, torch's zip writer replaced the ``OSError: [Errno 28] No space left on device`` with its own
``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598`` (a traceback, no file
named), and the half-written ``.tmp-*`` folder stayed on the full disk until the next start."""

from __future__ import annotations

import errno

import pytest
import torch

import mirl.trainer.checkpoint as checkpoint


def _plain(handle):
    raise OSError(errno.ENOSPC, "No space left on device")


def _as_torch_does(handle):
    try:
        raise OSError(errno.ENOSPC, "No space left on device")
    except OSError:  # what torch.save's zip writer raises while closing the archive after the disk error
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")  # noqa: B904


@pytest.mark.parametrize("failure", [_plain, _as_torch_does], ids=["oserror", "torch-runtimeerror"])
def test_a_full_disk_names_the_checkpoint_and_the_folder_and_frees_the_partial_write(tmp_path, monkeypatch, failure):
    directory = tmp_path / "run" / "checkpoints"
    save = torch.save

    def full_disk(state, handle):
        save({"partial": torch.zeros(1000)}, handle)  # some bytes reach the disk, then it is full
        failure(handle)

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(OSError) as caught:
        checkpoint.save_checkpoint(directory, 3, {"iteration": 3}, keep=2)
    message = str(caught.value)
    assert caught.value.errno == errno.ENOSPC
    assert "No space left on device" in message and "iteration_000003" in message and str(directory) in message
    assert "\n" not in message
    assert list(directory.iterdir()) == []  # the partial write is gone: its space is free again


def test_mirl_train_on_a_full_disk_ends_with_exit_2_and_one_line(
    tmp_path, monkeypatch, capsys, model_dir, pick_env, cli_args
):
    from mirl.cli import main

    save = torch.save

    def full_disk(state, handle):
        save({"partial": torch.zeros(1000)}, handle)
        _as_torch_does(handle)

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    argv = ["train", "--defaults", "--no-report"]
    argv += cli_args(model_dir, tmp_path, "full", "trainer.iterations=1", "trainer.checkpoint_every=1")
    capsys.readouterr()  # what building the model directory printed
    assert main(argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # before it: the model loader's progress bar
    assert "Traceback" not in err and last.startswith("mirl train: [Errno 28] No space left on device"), err
    assert f"checkpoint iteration_000001 in {tmp_path / 'full' / 'checkpoints'}" in last
