"""Bandit: a single choice between a steady low-risk arm and a high-risk arm with the higher expected value.

Observation:
    The names of the two arms, in an order drawn from the seed, and (``reveal_payoffs=True``) each arm's payoff
    rule. The names come from a fixed list of (low-risk, high-risk) pairs whose meanings hint at the risk (a
    tortoise and a hare, savings and a lottery ticket, ...); the seed draws the pair and the order. After the
    pull: the arm pulled and the reward it paid.

Actions:
    The name of an arm (case-insensitive); ``action_words`` holds the instance's two names after ``reset``. Any
    other text is an invalid action: state unchanged, reward 0, ``action_valid=False``, no random draw.

Reward:
    Low-risk arm: ``low_reward`` (0.1) always. High-risk arm: ``high_reward`` (1.0) with probability
    ``high_prob`` (0.25), else 0. Expected values at the defaults: 0.1 and 0.25.

Termination:
    Terminated after the first valid pull (single turn). ``success`` is True when the pulled arm has the higher
    expected value (at the defaults the high-risk arm, whatever its draw paid), so success measures the decision,
    not the luck; with equal expected values either arm succeeds. Steps after the end change nothing and earn 0.

Arguments:
    low_reward: what the low-risk arm always pays.
    high_reward: what the high-risk arm pays when it pays.
    high_prob: probability that the high-risk arm pays.
    reveal_payoffs: state each arm's payoff rule in the observation (when False only the names hint).
"""

from __future__ import annotations

from typing import Any

from mirl.envs.base import TextEnv
from mirl.envs.grid.board import check_no_options, pick
from mirl.envs.registry import register

# (low-risk name, high-risk name)
NAME_PAIRS: tuple[tuple[str, str], ...] = (
    ("Tortoise", "Hare"),
    ("Savings", "Lottery"),
    ("Anchor", "Rocket"),
    ("Harbor", "Storm"),
    ("Oak", "Lightning"),
    ("Bond", "Venture"),
)


@register("bandit")
class BanditEnv(TextEnv):
    """Pull one of two arms once; the seed draws their names and order."""

    description = "Pick one of two arms once: a steady 0.1 or a 25% chance of 1.0; single turn."
    action_words: tuple[str, ...] | None = None  # set per instance at reset: the two arm names, as shown
    default_action_budget = 1
    multi_turn = False
    max_actions_per_turn = 1

    def __init__(
        self, low_reward: float = 0.1, high_reward: float = 1.0, high_prob: float = 0.25, reveal_payoffs: bool = False
    ) -> None:
        super().__init__()
        if not 0.0 <= high_prob <= 1.0:
            raise ValueError(f"high_prob is a probability, expected 0 <= high_prob <= 1, got {high_prob}")
        self.low_reward, self.high_reward, self.high_prob = float(low_reward), float(high_reward), float(high_prob)
        self.reveal_payoffs = reveal_payoffs
        self.low_name: str | None = None
        self.pulled: str | None = None

    @property
    def instruction(self) -> str:
        return (
            "You are playing a two-armed bandit. Pull exactly one arm by answering its name. Each arm pays "
            "according to its own reward distribution, which its name hints at. Maximise your expected reward."
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        check_no_options("bandit", options)
        self.low_name, self.high_name = pick(self.np_random, NAME_PAIRS)
        high_first = bool(self.np_random.random() < 0.5)
        self.action_words = (self.high_name, self.low_name) if high_first else (self.low_name, self.high_name)
        self.pulled: str | None = None
        self.reward = 0.0
        return self.render(), {"success": False}

    def _payoff_rule(self, name: str) -> str:
        if name == self.low_name:
            return f"{name}: always pays {self.low_reward:g}."
        return f"{name}: pays {self.high_reward:g} with probability {self.high_prob:g}, otherwise 0."

    def _best_names(self) -> set[str]:
        """Names of the arms with the highest expected value (both when tied)."""
        high_value = self.high_prob * self.high_reward
        if high_value == self.low_reward:
            return {self.low_name, self.high_name}
        return {self.high_name} if high_value > self.low_reward else {self.low_name}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.low_name is None:
            raise RuntimeError("call reset() before step()")
        name = self.parse_action(action)
        info = {"success": self.pulled in self._best_names(), "action_valid": name is not None}
        info["action_effective"] = False
        if self.pulled is not None or name is None:
            return self.render(), 0.0, self.pulled is not None, False, info
        self.pulled = name
        if name == self.low_name:
            self.reward = self.low_reward
        else:
            self.reward = self.high_reward if self.np_random.random() < self.high_prob else 0.0
        info.update(success=name in self._best_names(), action_effective=True)
        return self.render(), self.reward, True, False, info

    def render(self) -> str:
        if self.low_name is None:
            raise RuntimeError("call reset() before render()")
        first, second = self.action_words
        if self.pulled is not None:
            return f"You pulled {self.pulled} and received {self.reward:g}."
        lines = [f"There are two arms: {first} and {second}."]
        if self.reveal_payoffs:
            lines += [self._payoff_rule(first), self._payoff_rule(second)]
        lines.append(f"Which arm do you pull? Answer {first} or {second}.")
        return "\n".join(lines)
