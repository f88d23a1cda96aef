"""mirl envs through TRL 1.16's ``environment_factory`` on the real ``GRPOTrainer``: the env as a tool, a training
step, the same episodes as ``MirlRollout`` on the same seeds, a dict of factories, the diagnostics and the filter.

The model is the tiny Llama taught to call the ``act`` tool (``tool_model.py``); TRL renders, generates, parses the
tool calls and runs its own tool loop."""

from __future__ import annotations

import math

import pytest

trl = pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

import torch  # noqa: E402

from mirl.catalogue import unknown_keys  # noqa: E402
from mirl.envs.task import Task  # noqa: E402
from mirl.integrations.trl import (  # noqa: E402
    CollapseDiagnosticsCallback,
    MirlEnvironment,
    MirlRollout,
    SNRFilterGRPOTrainer,
    environment_dataset,
)
from mirl.integrations.trl.envs import instance_key  # noqa: E402
from mirl.policy.scripted import ScriptedPolicy  # noqa: E402

from .tool_model import ANSWERS, taught_model, tool_tokenizer  # noqa: E402

K = 4
ROLLOUT = {"max_turns": 2}
PENALTY = -0.1  # RolloutConfig().format_penalty


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def _trainer(tmp_path, trl_args, *, cls=None, factory=None, data=None, filter=None, **overrides):
    data = data if data is not None else environment_dataset("frozenlake", 2)
    overrides = {"per_device_train_batch_size": K * len(data), "max_completion_length": 160,
                 "max_tool_calling_iterations": 3, "learning_rate": 1e-2, **overrides}  # fmt: skip
    return (cls or trl.GRPOTrainer)(
        model=taught_model(),
        args=trl_args(tmp_path, filter=filter, **overrides),
        train_dataset=data,
        processing_class=tool_tokenizer(),
        environment_factory=factory or MirlEnvironment.factory("frozenlake", rollout=ROLLOUT),
    )


def _rows(data) -> list[dict]:
    return [dict(row) for row in data for _ in range(K)]


def test_reset_act_and_reward_follow_the_rollout_engine():
    environment = MirlEnvironment("frozenlake", rollout={"max_turns": 3})
    first = environment.reset(seed=0, split="train", environment="frozenlake", prompt=[])
    assert first.startswith("Turn 1.\nState:\n") and first.endswith("Actions left: 10.")
    assert environment.act("Jump").startswith("Turn 2.\nReward of the last turn: -0.1\nYour last turn had no legal")
    environment.act("Down || Right")  # FrozenLake allows several actions a turn: up to the engine's cap
    assert environment.answers == ["Jump", "Down || Right"] and environment.end_reason is None
    assert environment.get_reward() == pytest.approx(sum(environment.turn_rewards) + PENALTY)  # stopped early
    environment.act("Down")
    assert environment.end_reason is not None and environment.act("Down").endswith("Nothing was done.")
    assert environment.get_reward() == pytest.approx(sum(environment.turn_rewards))
    with pytest.raises(ValueError, match="dict of factories"):
        environment.reset(seed=0, environment="sokoban")
    with pytest.raises(ValueError, match="registered mirl env or a mirl.Task"):
        MirlEnvironment("frozenlak")


def _replay(trainer, environment) -> dict:
    """The same instance and answers through ``MirlRollout`` (mirl's engine, mirl's prompts) on this trainer."""
    replies = iter([f"go</think><answer>{answer}</answer>" for answer in environment.answers])
    rollout = MirlRollout(
        {**ROLLOUT, "max_new_tokens": 48},
        policy=lambda t: ScriptedPolicy(t.processing_class, lambda context: next(replies, "no answer")),
    )
    trainer.args.max_completion_length = 48
    try:
        out = rollout([instance_key("frozenlake", "train", environment.seed)], trainer)
    finally:
        trainer.args.max_completion_length = 160
    return {"out": out, "episode": rollout.last_episodes[0]}


def test_one_generation_matches_mirl_rollout_on_the_same_seeds(tmp_path, trl_args):
    trainer = _trainer(tmp_path, trl_args)
    rows = _rows(trainer.train_dataset)
    batch = trainer._generate_and_score_completions(rows)  # TRL's generation, tool loop and scoring, in row order
    environments = trainer.environments
    assert [e.seed for e in environments] == [row["seed"] for row in rows]
    assert sum(len(e.answers) for e in environments) > 0, "the taught model made no tool call"
    tool_mask, kept = batch["tool_mask"], batch["completion_mask"].bool()
    for b, environment in enumerate(environments):
        mirl = _replay(trainer, environment)
        episode, out = mirl["episode"], mirl["out"]
        acted = len(environment.turn_rewards)
        # the env side is mirl's engine: the same rewards turn by turn, the same ends
        assert environment.turn_rewards == pytest.approx([t.reward for t in episode.turns[:acted]])
        if environment.end_reason is not None:
            assert (environment.end_reason, environment.success) == (episode.end_reason, episode.success)
            assert environment.get_reward() == pytest.approx(out["episode_return"][0])
        else:  # TRL stopped the rollout first (a reply without a tool call, or the token budget): one bad turn
            assert environment.get_reward() == pytest.approx(sum(environment.turn_rewards) + PENALTY)
        # masks: TRL's tool_mask is 0 exactly on the tool results, one run of model tokens per assistant message;
        # MirlRollout's env_mask has one run per turn. Every act call is one turn on both sides.
        model_runs = _runs(tool_mask[b][kept[b]].tolist())
        mirl_runs = _runs(out["env_mask"][0])
        assert len(mirl_runs) == len(episode.turns) >= acted
        assert len(model_runs) in (acted, acted + 1)  # + the last reply when it called no tool
    # the reward TRL computed is the env's get_reward, under the env class's name
    assert trainer.reward_func_names == ["MirlEnvironment"]
    assert batch["advantages"].shape == (len(rows),)


def _runs(mask) -> list[int]:
    """The start of every run of ones in ``mask``."""
    return [i for i, value in enumerate(mask) if value and (i == 0 or not mask[i - 1])]


def test_a_training_step_through_environment_factory(tmp_path, trl_args, trl_params, capsys):
    trainer = _trainer(tmp_path, trl_args, logging_steps=1)
    before = trl_params(trainer)
    trainer.train()
    log = trainer.state.log_history[0]
    print({k: log[k] for k in sorted(log) if k.startswith(("reward", "tools/", "loss", "completions/mean_length"))})
    assert log["tools/call_frequency"] > 0 and math.isfinite(log["loss"])
    assert "rewards/MirlEnvironment/mean" in log
    returns = [e.get_reward() for e in trainer.environments]
    assert log["reward"] == pytest.approx(sum(returns) / len(returns), abs=1e-6)
    if log["reward_std"] > 0:  # a group with spread moved the weights
        after = trl_params(trainer)
        assert any(not torch.equal(before[name], after[name]) for name in before)


def test_a_dict_of_factories_routes_each_row_to_its_env(tmp_path, trl_args):
    from datasets import concatenate_datasets

    task = Task(["What is 2 + 2?", "What is 3 + 4?", "What is 1 + 1?"], reward=lambda p, a: float(a == "4"),
                name="sums", validation=1)  # fmt: skip
    data = concatenate_datasets([environment_dataset("frozenlake", 1), environment_dataset(task, 1)])
    factories = {
        "frozenlake": MirlEnvironment.factory("frozenlake", rollout=ROLLOUT),
        "sums": MirlEnvironment.factory(task),
    }
    trainer = _trainer(tmp_path, trl_args, factory=factories, data=data)
    rows = _rows(data)
    batch = trainer._generate_and_score_completions(rows)
    assert [e.name for e in trainer.environments] == [row["environment"] for row in rows]
    # TRL rendered each row with its own env's tool (both named act) and its own system message
    assert batch["advantages"].shape == (len(rows),)
    for environment in trainer.environments:
        if environment.name == "sums":
            assert all(r in (0.0, 1.0, PENALTY) for r in environment.turn_rewards)
            assert len(environment.turn_rewards) <= 1  # a single-turn task
    assert {row["prompt"][0]["content"].splitlines()[1] for row in rows} == {
        MirlEnvironment("frozenlake")._make("train").instruction,
        task.instruction_text,
    }


def test_diagnostics_and_the_filter_on_environment_factory_batches(tmp_path, trl_args):
    trainer = _trainer(
        tmp_path, trl_args, cls=SNRFilterGRPOTrainer, filter={"strategy": "top_p", "value": 0.9, "include_zero": True}
    )
    callback = CollapseDiagnosticsCallback(
        trainer, {"every": 1, "num_pairs": 8, "scopes": ["first_turn", "trajectory"]}
    )
    trainer.add_callback(callback)
    trainer.train()
    log = trainer.state.log_history[0]
    keys = [k for k in log if k.startswith(("filter/", "diag/"))]
    assert unknown_keys(keys) == [] and all(math.isfinite(log[k]) for k in keys)
    assert "filter/kept_count" in log and "diag/first_turn/est/mi_estimate" in log
    # two instances, four samples each: the first turn's X is the prompt with the env's first state, two columns
    assert log["diag/first_turn/columns"] == 2
    episodes = callback.episodes()
    assert {e.group for e in episodes} == {0, 1} and len(episodes) == 2 * K
    replies = [turn.response_text for episode in episodes for turn in episode.turns]
    assert len(replies) > len(episodes)  # multi-turn: a turn per run of model tokens
    assert not any("State:" in text or "Reward of the last turn" in text for text in replies)  # tool results: context
    assert any(any(answer in text for answer in ANSWERS) for text in replies)  # the model's own tool calls: Z


def test_batch_episodes_split_tool_loop_rows_into_turns():
    from mirl.integrations.trl.diagnostics import batch_episodes
    from mirl.policy.tiny import tiny_tokenizer

    inputs = {
        "prompt_ids": torch.tensor([[0, 5, 6], [0, 5, 6]]),
        "prompt_mask": torch.tensor([[0, 1, 1], [0, 1, 1]]),
        "completion_ids": torch.tensor([[11, 12, 20, 21, 13, 0], [14, 0, 0, 0, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0]]),
        "tool_mask": torch.tensor([[1, 1, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1]]),  # TRL pads tool_mask with 1
    }
    first, second = batch_episodes(inputs, tiny_tokenizer())
    # row 0: reply (11, 12), tool result (20, 21) as context, reply (13,); the padding id 0 is no token
    assert [(t.context_ids, t.response_ids) for t in first.turns] == [
        ((5, 6), (11, 12)),
        ((5, 6, 11, 12, 20, 21), (13,)),
    ]
    assert [(t.context_ids, t.response_ids) for t in second.turns] == [((5, 6), (14,))]
    assert first.group == second.group == 0


def test_doctests():
    import doctest

    from mirl.integrations.trl import diagnostics

    assert doctest.testmod(diagnostics).failed == 0
