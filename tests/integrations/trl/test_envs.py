"""mirl envs through TRL's rollout_func, and a short CPU run with the filter and the diagnostics callback."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest

trl = pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

from mirl.integrations.trl import (  # noqa: E402
    CollapseDiagnosticsCallback,
    MirlRollout,
    SNRFilterGRPOTrainer,
    dataset,
    episode_return,
    parse_instance,
)
from mirl.integrations.trl.diagnostics import batch_episodes  # noqa: E402
from mirl.policy.scripted import ScriptedPolicy  # noqa: E402
from mirl.policy.tiny import tiny_model, tiny_tokenizer  # noqa: E402
from mirl.trainer.metrics import unknown_keys  # noqa: E402

MOVES = ("Down", "Jump", "Right", "Left", "Up", "Down || Down", "Right || Down")  # "Jump": format penalty


def _mover():
    """Replies whose reasoning quotes the state and whose move cycles, so the K samples of a group differ."""
    calls = itertools.count()

    def reply(context: str) -> str:
        state = "".join(context.rsplit("State:", 1)[-1].split())[:6]
        move = MOVES[next(calls) % len(MOVES)]
        return f"{state} {move}</think><answer>{move}</answer>"

    return reply


ROLLOUT = {"max_turns": 3, "max_new_tokens": 12, "temperature": 1.0}


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def _fake_trainer():
    accelerator = SimpleNamespace(unwrap_model=lambda m: m, process_index=0, is_main_process=True)
    return SimpleNamespace(
        model=tiny_model(seed=1),
        processing_class=tiny_tokenizer(),
        accelerator=accelerator,
        state=SimpleNamespace(global_step=0),
    )


def test_dataset_keys_seeds_and_errors():
    rows = dataset("frozenlake", 3, "validation", first=2)
    assert rows["prompt"] == [f"mirl/frozenlake/validation/{seed}" for seed in (5, 7, 9)]
    assert [parse_instance(k)[2] for k in dataset("frozenlake", 2)["prompt"]] == [0, 2]
    with pytest.raises(ValueError, match="registered"):
        dataset("frozenlak", 2)
    with pytest.raises(ValueError, match="split"):
        dataset("frozenlake", 2, "test")
    with pytest.raises(ValueError, match="instance key"):
        parse_instance("What is 2 + 2?")


def test_env_mask_excludes_every_env_token():
    rollout = MirlRollout(ROLLOUT)
    keys = [k for k in dataset("frozenlake", 2)["prompt"] for _ in range(2)]
    out = rollout(keys, _fake_trainer())
    episodes = rollout.last_episodes
    assert [e.group for e in episodes] == [0, 0, 1, 1] and [e.sample for e in episodes] == [0, 1, 0, 1]
    env_tokens = 0
    for row, episode in enumerate(episodes):
        ids, mask = out["completion_ids"][row], out["env_mask"][row]
        assert len(ids) == len(mask) == len(out["logprobs"][row])
        assert tuple(out["prompt_ids"][row]) == episode.turns[0].context_ids
        model_ids = [t for t, m in zip(ids, mask, strict=True) if m == 1]
        env_ids = [t for t, m in zip(ids, mask, strict=True) if m == 0]
        # trained tokens are exactly the sampled replies; masked ones exactly the env's next user messages
        assert model_ids == [t for turn in episode.turns for t in turn.response_ids]
        bridges = [
            t
            for previous, turn in zip(episode.turns, episode.turns[1:], strict=False)
            for t in turn.context_ids[len(previous.context_ids) + len(previous.response_ids) :]
        ]
        assert env_ids == bridges
        sampled = [lp for lp, m in zip(out["logprobs"][row], mask, strict=True) if m == 1]
        assert sampled == pytest.approx([lp for turn in episode.turns for lp in turn.response_logprobs])
        assert out["episode_return"][row] == pytest.approx(episode.total_reward)
        env_tokens += len(env_ids)
    assert env_tokens > 0  # multi-turn: there were env tokens to exclude
    assert episode_return(None, out["episode_return"]) == out["episode_return"]


def test_batch_episodes_groups_rows_by_prompt():
    import torch

    inputs = {
        "prompt_ids": torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6]]),
        "prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1]]),
        "completion_ids": torch.tensor([[11, 12, 0], [13, 0, 0], [14, 15, 16]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
    }
    episodes = batch_episodes(inputs, tiny_tokenizer())
    assert [e.group for e in episodes] == [0, 1, 0]
    assert episodes[0].turns[0].context_ids == (5, 6) and episodes[2].turns[0].response_ids == (14, 15, 16)
    assert episodes[1].turns[0].reasoning_ids == (13,)  # no </think>: Z is the whole completion


def test_short_run_logs_finite_filter_and_diag_metrics(tmp_path):
    mover = _mover()
    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=2,
        learning_rate=1e-3,
        bf16=False,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        max_completion_length=64,
    )
    trainer = SNRFilterGRPOTrainer(
        model=tiny_model(seed=0),
        reward_funcs=episode_return,
        args=args,
        train_dataset=dataset("frozenlake", 8),
        processing_class=tiny_tokenizer(),
        rollout_func=MirlRollout(
            dict(ROLLOUT, max_new_tokens=48), policy=lambda t: ScriptedPolicy(t.processing_class, mover)
        ),
        filter_config={"strategy": "top_p", "value": 0.9, "include_zero": True},
    )
    diagnostics = {"every": 1, "num_pairs": 8, "scopes": ["first_turn", "trajectory"]}
    callback = CollapseDiagnosticsCallback(trainer, diagnostics)
    trainer.add_callback(callback)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    for entry in logs:
        keys = [k for k in entry if k.startswith(("filter/", "diag/"))]
        assert any(k.startswith("filter/") for k in keys) and any(k.startswith("diag/") for k in keys)
        assert unknown_keys(keys) == []
        assert all(math.isfinite(entry[k]) for k in keys), {k: entry[k] for k in keys}
    assert "diag/first_turn/est/mi_estimate" in logs[0] and "diag/trajectory/regime_id" in logs[0]
    assert isinstance(callback.last_metrics["diag/trajectory/regime"], str)
    assert any(entry["filter/kept_count"] > 0 for entry in logs)  # the filter kept groups with spread
