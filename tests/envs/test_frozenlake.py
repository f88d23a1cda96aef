"""FrozenLake: maps solvable (BFS over 200 seeds), the slip distribution, determinism at 1.0, hand-checked episodes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mirl.envs import make
from mirl.envs.grid import step_cell
from mirl.envs.grid.frozenlake import PERPENDICULAR, slip
from mirl.envs.grid.solvers import solve_frozenlake

SEED_0_GRID = "____\nPG__\n_O__\n____"


def test_generated_lakes_are_solvable():
    env = make("frozenlake")
    for seed in range(200):
        env.reset(seed=seed)
        assert env.start != env.goal and not {env.start, env.goal} & env.holes
        assert solve_frozenlake(env.size, env.holes, env.start, env.goal) is not None, f"seed {seed}"


def test_shortest_path_reaches_the_goal_when_deterministic():
    env = make("frozenlake", success_rate=1.0)
    for seed in range(200):
        env.reset(seed=seed)
        moves = solve_frozenlake(env.size, env.holes, env.start, env.goal)
        results = [env.step(move) for move in moves]
        assert [r[1] for r in results] == [0.0] * (len(moves) - 1) + [1.0]
        assert [r[2] for r in results] == [False] * (len(moves) - 1) + [True]
        assert results[-1][4]["success"]


def test_seed_0_by_hand():
    env = make("frozenlake", success_rate=1.0)
    observation, info = env.reset(seed=0)
    # start (1, 0), goal (1, 1), one hole at (2, 1)
    assert observation == SEED_0_GRID and info == {"success": False, "state_key": "P1,0"}
    observation, reward, terminated, _, info = env.step("Down")
    assert (observation, reward, terminated) == ("____\n_G__\nPO__\n____", 0.0, False)
    assert info["state_key"] == "P2,0"  # the player's cell after the step
    observation, reward, terminated, _, info = env.step("RIGHT")  # into the hole
    assert (observation, reward, terminated, info["success"]) == ("____\n_G__\n_X__\n____", 0.0, True, False)
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("right")  # onto the goal
    assert (observation, reward, terminated, info["success"]) == ("____\n_√__\n_O__\n____", 1.0, True, True)


def test_coordinate_view():
    observation, _ = make("frozenlake", view="coordinates").reset(seed=0)
    header = (
        "Board: 4 rows x 4 columns, cells are zero-indexed (row, col)\nGoal: (1, 1)\nHoles: (2, 1)\nPlayer: (1, 0)\n"
    )
    assert observation == header + SEED_0_GRID


def _first_open_action(env) -> str | None:
    """An action whose intended and both perpendicular moves stay on the board (so all three are told apart)."""
    for word in env.action_words:
        targets = [step_cell(env.player, d) for d in (word, *PERPENDICULAR[word])]
        if all(0 <= r < env.size and 0 <= c < env.size for r, c in targets):
            return word
    return None


def test_slip_distribution_matches_success_rate():
    # Seeds 0..19999, one step each from the start with an action whose three outcomes differ (corner starts
    # skipped). Counts must lie within 5 binomial standard deviations of n * (0.01, 0.98, 0.01): a correct
    # env fails with probability < 1e-6; the fixed seeds make the test deterministic.
    env = make("frozenlake", success_rate=0.98)
    counts = {"intended": 0, "first": 0, "second": 0}
    for seed in range(20_000):
        env.reset(seed=seed)
        word = _first_open_action(env)
        if word is None:
            continue
        start = env.player
        env.step(word)
        outcome = {step_cell(start, d): key for d, key in zip((word, *PERPENDICULAR[word]), counts, strict=True)}
        counts[outcome[env.player]] += 1  # a backward move would raise KeyError here
    n = sum(counts.values())
    assert n > 10_000
    for key, p in (("intended", 0.98), ("first", 0.01), ("second", 0.01)):
        assert abs(counts[key] - n * p) <= 5 * math.sqrt(n * p * (1 - p)), (key, counts, n)


def test_slip_function_probabilities_at_half():
    rng = np.random.default_rng(0)
    draws = [slip(rng, "Up", 0.5) for _ in range(4000)]
    # P(Up) = 0.5, P(Left) = P(Right) = 0.25, P(Down) = 0; sigma(Up count) = sqrt(4000 * 0.25) = 31.6
    assert "Down" not in draws
    assert abs(draws.count("Up") - 2000) <= 5 * 31.7
    assert abs(draws.count("Left") - 1000) <= 5 * math.sqrt(4000 * 0.25 * 0.75)


def test_success_rate_one_is_deterministic():
    env = make("frozenlake", success_rate=1.0)
    for seed in range(300):
        env.reset(seed=seed)
        for word in env.action_words:
            if env.player in env.holes or env.player == env.goal:
                break
            _, _, _, _, info = env.step(word)
            assert info["direction"] == word


def test_success_rate_zero_always_slips_sideways():
    env = make("frozenlake", success_rate=0.0)
    for seed in range(200):
        env.reset(seed=seed)
        *_, info = env.step("Left")
        assert info["direction"] in ("Down", "Up")


def test_invalid_action_draws_nothing_and_changes_nothing():
    env = make("frozenlake")
    observation, reset_info = env.reset(seed=4)
    state = env.np_random.bit_generator.state
    result = env.step("Jump")
    assert result[:4] == (observation, 0.0, False, False)
    key = reset_info["state_key"]  # the state key stays the reset's
    assert result[4] == {"success": False, "action_valid": False, "action_effective": False, "state_key": key}
    assert env.np_random.bit_generator.state == state


def test_steps_after_the_end_are_inert():
    env = make("frozenlake", success_rate=1.0)
    env.reset(seed=0)
    env.step("Right")
    assert env.step("Left")[:3] == ("____\n_√__\n_O__\n____", 0.0, True)


def test_truncation():
    env = make("frozenlake", max_steps=2, success_rate=1.0)
    env.reset(seed=0)
    assert env.step("Up")[3] is False
    assert env.step("Up")[3] is True


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 1}, "size must be >= 2"),
        ({"success_rate": 1.5}, "success_rate is a probability"),
        ({"frozen_prob": -0.1}, "frozen_prob is a probability"),
        ({"view": "pretty"}, "view must be"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make("frozenlake", **kwargs)
