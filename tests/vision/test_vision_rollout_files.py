"""Rollout files of a vision run: each image once as a PNG, read back into the same inputs."""

from __future__ import annotations

import torch

from mirl.config import RolloutConfig
from mirl.policy.tiny_vl import tiny_vl_policy
from mirl.rollout import run_episodes
from mirl.rollout.collate import collate
from mirl.rollout.io import IMAGES_DIR, read_episodes, write_episodes
from mirl.types import EnvSpec


def test_write_then_read_gives_the_same_images_and_logprobs(vl_policy, tmp_path):
    specs = [EnvSpec("sokoban", 4, {"render": "image", "cell_size": 16})]
    episodes = run_episodes(vl_policy, specs, 2, RolloutConfig(max_turns=3, max_new_tokens=8), sampling_seed=2)
    path = write_episodes(tmp_path / "rollouts" / "iteration_000001.jsonl", episodes, iteration=1)
    ids = {place.image.id for e in episodes for turn in e.turns for place in turn.images}
    assert sorted(p.stem for p in (path.parent / IMAGES_DIR).iterdir()) == sorted(ids)
    write_episodes(path, episodes, iteration=2)  # appended lines, no second copy of an image
    assert len(list((path.parent / IMAGES_DIR).iterdir())) == len(ids)

    fresh = tiny_vl_policy()  # its own processor run on the PNGs, nothing cached from the rollout
    back = read_episodes(path, process=fresh.process)[: len(episodes)]
    for old, new in zip(episodes, back, strict=True):
        for a, b in zip(old.turns, new.turns, strict=True):
            assert [p.start for p in a.images] == [p.start for p in b.images]
            assert all(p.image is not q.image for p, q in zip(a.images, b.images, strict=True))
            assert all(
                torch.equal(p.image.pixel_values, q.image.pixel_values) for p, q in zip(a.images, b.images, strict=True)
            )
    batch = collate(back, pad_id=vl_policy.pad_token_id)
    with torch.no_grad():
        logp, _ = vl_policy.token_logprobs(
            batch.input_ids, batch.attention_mask, needed=batch.response_mask, **batch.image_args()
        )
    assert (logp - batch.old_logprobs)[batch.response_mask].abs().max() < 1e-4
    assert all(not turn.images for e in read_episodes(path) for turn in e.turns)  # text readers: no images
