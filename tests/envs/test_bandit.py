"""Bandit: names and order from the seed, payoffs, success = the higher-expected-value arm, single turn."""

from __future__ import annotations

import math

import pytest

from mirl.envs import make
from mirl.envs.toy.bandit import NAME_PAIRS


def test_declares_a_single_turn_env():
    env = make("bandit")
    assert (env.multi_turn, env.default_action_budget, env.max_actions_per_turn) == (False, 1, 1)


def test_names_and_order_come_from_the_seed():
    env = make("bandit")
    shown = set()
    for seed in range(200):
        observation, _ = env.reset(seed=seed)
        first, second = env.action_words
        assert {first, second} in [set(pair) for pair in NAME_PAIRS]
        assert (
            observation
            == f"There are two arms: {first} and {second}.\nWhich arm do you pull? Answer {first} or {second}."
        )
        shown.add((first, second))
    # 6 pairs x 2 orders, all drawn within 200 seeds
    assert len(shown) == 2 * len(NAME_PAIRS)


def test_reveal_payoffs_states_each_rule():
    env = make("bandit", reveal_payoffs=True)
    env.reset(seed=0)
    low, high = env.low_name, env.high_name
    assert f"{low}: always pays 0.1." in env.render()
    assert f"{high}: pays 1 with probability 0.25, otherwise 0." in env.render()


def test_low_risk_arm_always_pays_and_is_not_a_success():
    env = make("bandit")
    for seed in range(50):
        env.reset(seed=seed)
        observation, reward, terminated, truncated, info = env.step(env.low_name.upper())
        assert (reward, terminated, truncated) == (0.1, True, False)
        assert info == {"success": False, "action_valid": True, "action_effective": True}
        assert observation == f"You pulled {env.low_name} and received 0.1."


def test_high_risk_arm_pays_one_quarter_of_the_time_and_is_always_a_success():
    # n = 4000 pulls; pays ~ Binomial(4000, 0.25): mean 1000, sigma = sqrt(4000 * 0.25 * 0.75) = 27.4; 5 sigma.
    env = make("bandit")
    rewards = []
    for seed in range(4000):
        env.reset(seed=seed)
        _, reward, terminated, _, info = env.step(f"  {env.high_name} ")
        assert terminated and info["success"]
        rewards.append(reward)
    assert set(rewards) == {0.0, 1.0}
    assert abs(sum(rewards) - 1000) <= 5 * math.sqrt(4000 * 0.25 * 0.75)


def test_invalid_answers_change_nothing_and_steps_after_the_pull_are_inert():
    env = make("bandit")
    observation, _ = env.reset(seed=1)
    assert env.step("the first one") == (
        observation,
        0.0,
        False,
        False,
        {"success": False, "action_valid": False, "action_effective": False},
    )
    env.step(env.high_name)
    after = env.render()
    assert env.step(env.low_name)[:4] == (after, 0.0, True, False)


@pytest.mark.parametrize(
    ("kwargs", "best"),
    [
        ({"high_prob": 0.05}, "low"),  # 0.05 * 1.0 = 0.05 < 0.1
        ({"high_prob": 0.1}, "both"),  # 0.1 * 1.0 = 0.1 = 0.1: either arm is a success
        ({}, "high"),  # 0.25 * 1.0 = 0.25 > 0.1
    ],
)
def test_success_follows_expected_value(kwargs, best):
    env = make("bandit", **kwargs)
    outcome = {}
    for arm in ("low", "high"):
        env.reset(seed=0)
        outcome[arm] = env.step(getattr(env, f"{arm}_name"))[4]["success"]
    expected = {"low": {"low": True, "high": False}, "high": {"low": False, "high": True}}
    assert outcome == expected.get(best, {"low": True, "high": True})


def test_invalid_probability():
    with pytest.raises(ValueError, match="high_prob is a probability"):
        make("bandit", high_prob=2.0)
