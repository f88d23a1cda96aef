"""The text-environment contract.

An environment is a Gymnasium environment whose observations and actions are strings:

- ``reset(*, seed, options=None) -> (observation, info)``: the instance is a pure function of ``seed`` (one RNG
  per env, created here; no global random state is read or written);
- ``step(action) -> (observation, reward, terminated, truncated, info)`` takes ONE action (the rollout engine
  splits a reply on ``||`` and enforces the per-turn cap, the action budget and the format penalty);
- ``render() -> str`` is the current state text, exactly what the agent would be shown.

``info`` always carries ``success`` (bool), ``action_valid`` (the action was legal and parsed) and
``action_effective`` (it changed the state). Envs whose states repeat (the grid worlds, WebShop's pages) also put
``state_key`` (a string) in the info of ``reset`` and of every ``step``: equal keys within one instance mean
identical states, which step-level credit groups turns by. An illegal action never raises: it leaves the state
unchanged, returns reward 0 and ``action_valid=False``.

Memory. ``memory_summary(steps)`` recaps the episode so far in one short paragraph; the rollout engine shows it in
place of the conversation history when ``rollout.context_mode="memory"``. ``steps`` are the
:class:`StepRecord` s of every ``step`` call since reset, in order (the engine steps only actions it parsed as
legal words, so for envs with ``action_words`` every recorded action is one of them). The base summary lists the
last actions with their rewards and the total; envs that know more (the grid worlds: pushes, slips, revisited
states) override it. It must not change the env's state or draw from its RNG.

Observation and action spaces are :class:`AnyText`: a ``gymnasium.spaces.Text`` that accepts every string up to
its length limit (``Text`` alone accepts only alphanumerics, which no grid or question fits) and samples
printable ASCII, so each env passes ``gymnasium.utils.env_checker.check_env``.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium

MEMORY_RECENT = 8  # actions the base memory summary lists by name


@dataclass(frozen=True)
class StepRecord:
    """One ``step`` call of an episode, as the memory summary sees it."""

    action: str
    reward: float
    info: Mapping[str, Any] = field(default_factory=dict)


class AnyText(gymnasium.spaces.Text):
    """A text space that contains every ``str`` of length ``min_length..max_length``, whatever its characters."""

    def __init__(self, max_length: int, *, min_length: int = 0) -> None:
        super().__init__(max_length, min_length=min_length, charset=string.printable)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class TextEnv(gymnasium.Env):
    """Base class of mirl environments. Subclasses set the class attributes and implement the three methods."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""  # one line, shown by `mirl envs`
    # legal action words, matched case-insensitively; None for free-form answers (Countdown, MetaMathQA).
    # Read it from the instance after reset: an env may narrow it per instance (Bandit's arm names).
    action_words: ClassVar[tuple[str, ...] | None] = None
    symbol_legend: ClassVar[str | None] = None  # grid envs: what each symbol means
    default_action_budget: ClassVar[int] = 10  # actions an episode may take in all
    multi_turn: ClassVar[bool] = True
    # a single-turn question (a Task's): prompted as the question itself, without the turn/state/actions framing
    question_prompt: ClassVar[bool] = False
    max_actions_per_turn: ClassVar[int] = 1  # upper bound the engine may use; grid envs allow several

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = AnyText(max_length=1 << 16)
        self.action_space = AnyText(max_length=1 << 12)
        self.render_mode = "ansi"

    def parse_action(self, action: str) -> str | None:
        """The legal action word ``action`` names (case-insensitive, surrounding whitespace ignored), else None.

        >>> class Two(TextEnv):
        ...     action_words = ("Left", "Right")
        >>> Two().parse_action("  left "), Two().parse_action("Lefty")
        ('Left', None)
        """
        if not isinstance(action, str) or self.action_words is None:
            return None
        wanted = action.strip().casefold()
        return next((word for word in self.action_words if word.casefold() == wanted), None)

    @property
    def instruction(self) -> str:
        """The task description placed in the system prompt."""
        raise NotImplementedError

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Seed the env's one RNG; subclasses call ``super().reset(seed=seed)`` first, then build the instance.

        Gymnasium's rule: an int ``seed`` makes a fresh ``self.np_random`` from it; ``None`` keeps the current
        stream (or draws OS entropy on the very first reset). Every random draw of an instance, its generation
        and any stochastic transition alike, comes from ``self.np_random``. The base returns an empty state.
        """
        super().reset(seed=seed, options=options)
        return "", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        raise NotImplementedError

    def memory_summary(self, steps: Sequence[StepRecord]) -> str:
        """One paragraph recapping the episode so far (module docstring, Memory): the last actions and rewards.

        >>> env = TextEnv()
        >>> env.memory_summary([])
        'No actions taken yet.'
        >>> env.memory_summary([StepRecord("Up", -0.1, {"action_valid": True, "action_effective": True}),
        ...                     StepRecord("Up", -0.1, {"action_valid": True, "action_effective": False})])
        '2 actions so far: Up (reward -0.1), Up (reward -0.1, no effect). Total reward so far: -0.2.'
        """
        if not steps:
            return "No actions taken yet."
        shown = [_describe_step(step) for step in steps[-MEMORY_RECENT:]]
        earlier = f"{len(steps) - len(shown)} earlier, then " if len(steps) > len(shown) else ""
        total = sum(step.reward for step in steps)
        count = f"{len(steps)} action{'s' if len(steps) != 1 else ''}"
        return f"{count} so far: {earlier}{', '.join(shown)}. Total reward so far: {total:g}."

    def render(self) -> str:
        raise NotImplementedError


def _describe_step(step: StepRecord) -> str:
    """``Up (reward -0.1)``, with ``invalid`` or ``no effect`` when the info says so; long actions are cut."""
    action = " ".join(step.action.split())
    action = action if len(action) <= 40 else action[:37] + "..."
    notes = [f"reward {step.reward:g}"]
    if step.info.get("action_valid") is False:
        notes.append("invalid")
    elif step.info.get("action_effective") is False:
        notes.append("no effect")
    return f"{action} ({', '.join(notes)})"
