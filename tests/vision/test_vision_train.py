"""``mirl train`` with the tiny Qwen2.5-VL on image-rendered Sokoban: two iterations with diagnostics and the
filter, a report, rollout images on disk, the first update's PPO ratio 1, and ``mirl diagnose`` on the run."""

from __future__ import annotations

import json

import pytest
import torch

from mirl.cli import main
from mirl.config import RolloutConfig
from mirl.policy.tiny_vl import tiny_vl_policy
from mirl.rollout import run_episodes
from mirl.types import EnvSpec

SOKOBAN = "{name: sokoban, options: {render: image, cell_size: 16}}"
WORDS = ("Up", "Down", "Left", "Right", "Jump")  # "Jump" is illegal: it earns the format penalty


def _teach_format(policy, steps: int = 30) -> None:
    """A few supervised steps on '<answer>WORD</answer>' replies after real image contexts (the random model
    never writes the format, so every group would earn the same penalty and nothing would be kept)."""
    specs = [EnvSpec("sokoban", seed, {"render": "image", "cell_size": 16}) for seed in range(3)]
    episodes = run_episodes(policy, specs, 1, RolloutConfig(max_turns=1, max_new_tokens=2), sampling_seed=0)
    turns = [e.turns[0] for e in episodes]
    tokenizer, end = policy.tokenizer, policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        rows, images, starts = [], [], []
        for turn in turns:
            word = WORDS[int(torch.randint(len(WORDS), (), generator=generator))]
            reply = tokenizer.encode(f" ok</think><answer>{word}</answer>", add_special_tokens=False) + [end]
            rows.append(list(turn.context_ids) + reply)
            images.append(turn.images)
            starts.append(len(turn.context_ids))
        longest = max(len(row) for row in rows)
        ids = torch.tensor([row + [policy.pad_token_id] * (longest - len(row)) for row in rows])  # right-padded
        mask = torch.tensor([[1] * len(row) + [0] * (longest - len(row)) for row in rows])
        needed = (torch.arange(longest)[None] >= torch.tensor(starts)[:, None]) & mask.bool()
        logp, _ = policy.token_logprobs(ids, mask, images=images, needed=needed)
        loss = -logp[needed].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    policy.model.eval()


@pytest.fixture(scope="module")
def vl_model_dir(tmp_path_factory):
    policy = tiny_vl_policy()
    _teach_format(policy)
    path = tmp_path_factory.mktemp("vl") / "tiny-vl"
    policy.save(path)
    return path


def test_train_two_iterations_on_image_sokoban(vl_model_dir, tmp_path, capsys):
    out = tmp_path / "runs"
    args = [
        "--defaults",
        f"model.name={vl_model_dir}",
        f"envs=[{SOKOBAN}]",
        "algorithm.preset=grpo",
        "algorithm.actor_lr=1e-3",
        "algorithm.mini_batch_size=64",  # one optimiser step: the ratio is measured before any weight moves
        "rollout.prompts_per_iteration=3",
        "rollout.group_size=4",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=12",
        "rollout.format_penalty=-1.0",  # a legal move earns -0.1, "Jump" -1: rewards differ inside a group
        "diagnostics.every=1",
        "diagnostics.num_pairs=8",
        "diagnostics.reasoning=open",
        "filter.strategy=top_p",
        "filter.value=0.9",
        "validation.every=-1",
        "logging.progress=false",
        "logging.tensorboard=false",
        "trainer.iterations=2",
        f"trainer.output_dir={out}",
        "trainer.name=vl",
    ]
    assert main(["train", *args]) == 0
    run = out / "vl"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [1, 2]
    first = lines[0]
    assert first["filter/kept_count"] >= 1 and first.get("filter/empty", 0) == 0
    assert abs(first["train/ratio_mean"] - 1) < 1e-5 and abs(first["train/ratio_max"] - 1) < 1e-4
    assert all("diag/first_turn/est/retrieval_acc" in line for line in lines)
    assert (run / "report.html").is_file()
    images = list((run / "rollouts" / "images").glob("*.png"))
    assert images and all(len(p.stem) == 16 for p in images)
    capsys.readouterr()

    rollouts = sorted((run / "rollouts").glob("iteration_*.jsonl"))[0]
    result = tmp_path / "diag.json"
    argv = ["diagnose", str(rollouts), "--model", str(vl_model_dir), "--pairs", "8", "--out", str(result)]
    assert main(argv) == 0
    assert json.loads(result.read_text())
