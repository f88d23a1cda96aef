"""A full disk while a checkpoint is written: the message names the checkpoint and the folder. Before, the run
stopped with ``[Errno 28] No space left on device`` and nothing else (the write goes to an open handle, so the
error carries no file name), and the half-written ``.tmp-*`` folder stayed on the full disk until the next start."""

from __future__ import annotations

import errno

import pytest
import torch

import mirl.trainer.checkpoint as checkpoint


def test_a_full_disk_names_the_checkpoint_and_the_folder_and_frees_the_partial_write(tmp_path, monkeypatch):
    directory = tmp_path / "run" / "checkpoints"
    save = torch.save

    def full_disk(state, handle):
        save({"partial": torch.zeros(1000)}, handle)  # some bytes reach the disk, then it is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(OSError) as caught:
        checkpoint.save_checkpoint(directory, 3, {"iteration": 3}, keep=2)
    message = str(caught.value)
    assert caught.value.errno == errno.ENOSPC
    assert "No space left on device" in message and "iteration_000003" in message and str(directory) in message
    assert "\n" not in message
    assert list(directory.iterdir()) == []  # the partial write is gone: its space is free again
