"""algorithm.credit in the trainer: episode credit unchanged, turn credit on batches, step groups on Sokoban, and
one `mirl train` smoke per credit mode."""

import dataclasses
import json

import pytest
import torch

from mirl.algorithms import get_preset
from mirl.catalogue import unknown_keys
from mirl.cli import main
from mirl.policy.scripted import ScriptedPolicy
from mirl.policy.tiny import tiny_tokenizer
from mirl.rollout import collate, run_episodes
from mirl.trainer import credit, stages
from mirl.trainer.setup import build_learner, resolve_preset
from mirl.types import EnvSpec, Episode, Turn


def turn(context, response, reward, key=None):
    return Turn(
        context_ids=tuple(context),
        response_ids=tuple(response),
        response_logprobs=tuple(-0.5 for _ in response),
        response_text="",
        observation="",
        reasoning_span=None,
        actions=(),
        reward=reward,
        format_valid=True,
        actions_valid=True,
        state_key=key,
    )


def nested(group, sample, rewards):
    """An episode whose turn contexts nest (one row); turn i replies with two tokens."""
    turns, context = [], [1, 2]
    for i, reward in enumerate(rewards):
        reply = [10 + i, 20 + i]
        turns.append(turn(context, reply, reward))
        context = context + reply + [3]
    return Episode(EnvSpec("sokoban", 0), group, sample, tuple(turns), success=False, end_reason="max_turns")


def batch_of(episodes, P, K):
    batch = collate(episodes, pad_id=0)
    return batch, stages.group_returns(episodes, P, K), credit.turn_table(episodes, P, K)


def test_turn_credit_equals_episode_credit_when_only_the_last_turn_is_rewarded():
    episodes = [
        nested(0, 0, [0.0, 0.0, 1.0]),
        nested(0, 1, [0.0, 2.5]),
        nested(0, 2, [0.0, 0.0, 0.0, -1.0]),
        nested(1, 0, [3.0]),
        nested(1, 1, [0.0, 0.0]),
        nested(1, 2, [0.0, 1.0]),
    ]
    batch, returns, turns = batch_of(episodes, 2, 3)
    for name in ("grpo", "dr_grpo"):
        episode = credit.advantages(get_preset(name), batch, returns, episodes, None, turns)[0]
        per_turn = credit.advantages(get_preset(name, credit="turn"), batch, returns, episodes, None, turns)[0]
        torch.testing.assert_close(per_turn, episode, rtol=1e-6, atol=1e-7)
        assert episode.abs().sum() > 0  # not vacuous


def test_episode_credit_is_the_episode_level_estimator_and_ignores_turn_rewards(run_config, formatted_policy):
    episodes = [nested(0, 0, [0.5, 1.0]), nested(0, 1, [0.0, -1.0]), nested(1, 0, [2.0]), nested(1, 1, [0.0, 0.0])]
    batch, returns, turns = batch_of(episodes, 2, 2)
    scrambled = dataclasses.replace(batch, turn_rewards=torch.randn_like(batch.turn_rewards))
    grpo = get_preset("grpo")
    before = stages.advantages(grpo, batch, returns, episodes, None)[0]
    assert torch.equal(credit.advantages(grpo, scrambled, returns, episodes, None, turns)[0], before)
    config = run_config("ppo", "algorithm.preset=ppo")
    ppo = resolve_preset(config.algorithm)
    learner = build_learner(formatted_policy, config, ppo)
    reference = stages.advantages(ppo, batch, returns, episodes, learner)
    got = credit.advantages(ppo, scrambled, returns, episodes, learner, turns)
    for value, expected in zip(got, reference, strict=True):
        assert torch.equal(value, expected)


def test_bilevel_credit_reads_the_critic_and_the_turn_rewards(run_config, formatted_policy):
    episodes = [nested(0, 0, [0.5, 1.0]), nested(0, 1, [0.0, -1.0])]
    batch, returns, turns = batch_of(episodes, 1, 2)
    config = run_config("bilevel", "algorithm.preset=ppo", "algorithm.credit=bilevel_gae")
    preset = resolve_preset(config.algorithm)
    learner = build_learner(formatted_policy, config, preset)
    advantages, targets, values = credit.advantages(preset, batch, returns, episodes, learner, turns)
    mask = batch.response_mask
    # with gamma = lam = 1 at both levels every value target is the episode's return-to-go of the turn
    expected = torch.tensor([[1.5, 1.5, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0]])
    assert torch.allclose(targets[mask].reshape(2, 4), expected, atol=1e-5)
    assert values is not None and torch.allclose(advantages.sum(), torch.tensor(0.0), atol=1e-4)  # whitened


def test_step_groups_form_over_identical_sokoban_states():
    """Sokoban seed 3: player (2, 2), box (2, 3). Three samples; the scripts revisit the reset state."""
    replies = {0: ["Up", "Up", "Left"], 1: ["Down", "Left", "Right"], 2: ["Up", "Up", "Up"]}  # turn -> per sample
    script = [f" ok</think><answer>{word}</answer>" for t in range(3) for word in replies[t]]
    policy = ScriptedPolicy(tiny_tokenizer(), script)
    from mirl.config import RolloutConfig

    episodes = run_episodes(policy, [EnvSpec("sokoban", 3)], 3, RolloutConfig(max_turns=3, max_new_tokens=16))
    keys = [[t.state_key for t in e.turns] for e in episodes]
    # sample 0: Up, Down (back to the start), Up; sample 1: Up, Left, Up; sample 2: Left, Right (back), Up
    assert keys == [
        ["P2,2 B2,3", "P1,2 B2,3", "P2,2 B2,3"],
        ["P2,2 B2,3", "P1,2 B2,3", "P1,1 B2,3"],
        ["P2,2 B2,3", "P2,1 B2,3", "P2,2 B2,3"],
    ]
    turns = credit.turn_table(episodes, 1, 3)
    start = int(turns.state_ids[0, 0, 0])
    # one step group for the start state (turns 0 of all, turns 2 of samples 0 and 2), one of two, two alone
    assert (turns.state_ids[0, :, 0] == start).all() and turns.state_ids[0, 0, 2] == turns.state_ids[0, 2, 2] == start
    assert turns.state_ids[0, 0, 1] == turns.state_ids[0, 1, 1] != turns.state_ids[0, 2, 1]
    assert len(set(turns.state_ids[0].flatten().tolist())) == 4
    preset = get_preset("grpo", credit="step_groups")
    advantages = credit.TURN_ADVANTAGES["step_groups"](preset, turns)
    # every move is legal: -0.1 per turn, equal returns -0.3 -> episode advantage 0. Returns-to-go: -0.3, -0.2,
    # -0.1. Start group {-0.3, -0.3, -0.3, -0.1, -0.1}: mean -0.22, unbiased var (3 * 0.08^2 + 2 * 0.12^2) / 4
    # = 0.012; turns 1 of samples 0 and 1 tie (-0.2, -0.2) and the singletons get 0
    std = 0.012**0.5 + 1e-6
    expected = torch.tensor(
        [[-0.08 / std, 0.0, 0.12 / std], [-0.08 / std, 0.0, 0.0], [-0.08 / std, 0.0, 0.12 / std]], dtype=torch.float64
    )
    torch.testing.assert_close(advantages[0], expected, rtol=1e-6, atol=1e-9)
    spreads, metrics = credit.turn_signal(preset, turns, stages.group_returns(episodes, 1, 3), "std")
    assert metrics["groups_zero_spread_turn_signal"] == 1.0 and spreads[0] > 0  # tied episodes, step-level signal


SOKOBAN = (
    "envs=[{name: sokoban}]",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=8",
    "rollout.group_size=3",
    "filter.strategy=none",  # a tiny model's episodes tie: train on every group so that the update runs
)


@pytest.mark.parametrize(
    "extra",
    [
        ("algorithm.preset=grpo", "algorithm.credit=episode"),
        ("algorithm.preset=grpo", "algorithm.credit=turn", "algorithm.credit_gamma=0.9"),
        ("algorithm.preset=grpo", "algorithm.credit=step_groups", "filter.signal=turn", "diagnostics.gradient_every=1"),
        ("algorithm.preset=ppo", "algorithm.credit=bilevel_gae", "algorithm.credit_lam=0.95"),
    ],
    ids=["episode", "turn", "step_groups", "bilevel_gae"],
)
@pytest.mark.slow  # about a minute each on a loaded 2-core machine
def test_mirl_train_runs_each_credit_mode(tmp_path, model_dir, cli_args, extra):
    out = tmp_path / "runs"
    args = cli_args(model_dir, out, "credit", *SOKOBAN, *extra)
    args += ["trainer.iterations=1", "diagnostics.enabled=false", "--no-report"]
    assert main(["train", "--defaults", *args]) == 0
    [line] = [json.loads(text) for text in (out / "credit" / "metrics.jsonl").read_text().splitlines()]
    assert unknown_keys(set(line)) == []
    for key in ("filter/groups_zero_spread_turn_signal", "filter/turn_spread_mean", "filter/groups_turn_signal"):
        assert key in line
    assert line["filter/kept_trajectories"] > 0 and 0.0 <= line["train/turns_nonzero_advantage_frac"] <= 1.0
    if "diagnostics.gradient_every=1" in extra:  # the gradient decomposition ran on the step-group advantages
        assert any(key.startswith("grad/") for key in line)
    rollouts = (out / "credit" / "rollouts" / "iteration_000001.jsonl").read_text().splitlines()
    assert all(turn["state_key"].startswith("P") for r in rollouts for turn in json.loads(r)["turns"])


def test_credit_needs_the_matching_preset(tmp_path, model_dir, cli_args, capsys):
    args = cli_args(model_dir, tmp_path, "bad", "algorithm.preset=grpo", "algorithm.credit=bilevel_gae")
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl train: algorithm.credit=bilevel_gae works with algorithm.preset ppo or dapo")
    args = cli_args(model_dir, tmp_path, "bad", "algorithm.credit=steps")
    assert main(["train", *args]) == 2
    assert "algorithm.credit must be one of episode, turn, step_groups, bilevel_gae" in capsys.readouterr().err


def test_turn_signal_keeps_a_tied_group_whose_turns_differ():
    from mirl.config import FilterConfig

    returns = torch.tensor([[1.0, 1.0], [0.0, 2.0], [1.0, 1.0]], dtype=torch.float64)  # groups 0 and 2 tie
    turn_scores = torch.tensor([0.5, 1.0, 0.0], dtype=torch.float64)  # group 0 has turn-level signal
    episode_filter = FilterConfig(strategy="top_p", value=0.9, include_zero=False)
    selection, _ = stages.select_rows(returns, episode_filter)
    assert selection.keep.tolist() == [False, True, False]
    turn_filter = dataclasses.replace(episode_filter, signal="turn")
    selection, rows = stages.select_rows(returns, turn_filter, turn_scores)
    assert selection.keep.tolist() == [True, True, False] and rows[0].all()
    # the spread metrics still describe the episode returns
    assert selection.metrics["groups_zero_spread"] == 2.0 and selection.metrics["kept_count"] == 2.0
    with pytest.raises(ValueError, match="needs the turn-level scores"):
        stages.select_rows(returns, turn_filter)


def test_credit_options_are_checked_like_every_field(pick_env):
    from mirl.config import ConfigError
    from mirl.config_files import load_config

    base = ["envs=[{name: pick_word}]", "algorithm.preset=grpo"]
    config = load_config(None, [*base, "algorithm.credit=step_groups", "algorithm.step_weight=0.5"])
    assert resolve_preset(config.algorithm).step_weight == 0.5
    for override, message in (
        ("algorithm.credit_gamma=1.5", "algorithm.credit_gamma must be a finite number in [0, 1], got 1.5"),
        ("algorithm.credit_lam=-0.1", "algorithm.credit_lam must be a finite number in [0, 1]"),
        ("algorithm.step_weight=-1", "algorithm.step_weight must be a finite number >= 0"),
        ("filter.signal=turns", "filter.signal must be one of episode, turn"),
        ("algorithm.credit=turn algorithm.preset=ppo", "algorithm.credit=turn works with algorithm.preset grpo"),
        ("filter.signal=turn filter.statistic=mean", "filter.signal=turn scores groups by the spread"),
    ):
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            load_config(None, [*base, *override.split()])
