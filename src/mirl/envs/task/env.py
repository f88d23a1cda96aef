"""The env a :class:`~mirl.envs.task.Task` builds: one example per episode, the user's function judges each answer.

Observation:
    The example's prompt at reset; after each answer, what the task's function returned (a single-turn task:
    ``Reward: R.``).

Actions:
    Free-form text (the whole ``<answer>``), or, when the task names ``actions``, one of those words
    (case-insensitive); another word is illegal: state unchanged, reward 0, ``action_valid=False``, and the
    function is not called.

Reward:
    The number the task's function returned for the answer. An exception in that function, or a result that is
    not a finite number (or not ``(observation, reward, done)``), raises :class:`TaskError` naming the prompt and
    the answer: never a silent 0. A call still running at the task's deadline (``timeout_s``) ends the episode,
    truncated, with reward 0 and ``info["end_reason"] = "task_timeout"`` (:mod:`mirl.envs.task.deadline`).

Termination:
    ``terminated`` when the function says done (a single-turn task: after the first answer); ``truncated`` after
    ``max_turns`` answers. ``success`` is the function's ``info["success"]`` when it gives one, else: the episode
    ended and the last reward is at least ``success_threshold``. A step after the end is illegal.

Arguments:
    split: "train" or "validation" (set by the trainer); the two never share a prompt text.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, ClassVar

import numpy as np

from mirl.envs.base import TextEnv
from mirl.envs.task.deadline import TIMEOUT_REASON, Overdue
from mirl.envs.task.examples import SPLITS, pick, preview
from mirl.errors import UserError


class TaskError(UserError, RuntimeError):
    """A task's reward or step function raised, or returned something that is not a reward."""


@dataclass
class Conversation:
    """What a multi-turn ``step`` function sees of its episode; kept from reset to the episode's end."""

    prompt: str  # the example's prompt: the first observation
    example: Mapping[str, Any]  # the whole example (a string prompt becomes {prompt_key: prompt})
    rng: np.random.Generator  # the episode's RNG, seeded by reset: draw any randomness from it
    answers: list[str] = field(default_factory=list)  # the agent's earlier answers, oldest first
    observations: list[str] = field(default_factory=list)  # what the agent was shown: prompt, then each reply
    rewards: list[float] = field(default_factory=list)  # the reward of each earlier answer
    memory: dict[str, Any] = field(default_factory=dict)  # free for the step function, kept for the episode

    @property
    def turn(self) -> int:
        """0 for the first answer, 1 for the second, ..."""
        return len(self.answers)


def read_outcome(result: Any, where: str) -> tuple[str, float, bool, dict]:
    """``(observation, reward, done, info)`` from a step function's ``(observation, reward, done[, info])``.

    >>> read_outcome(("Warmer.", 0.5, False), "turn 1")
    ('Warmer.', 0.5, False, {})
    """
    if not isinstance(result, tuple) or len(result) not in (3, 4):
        raise TaskError(
            f"the step function returned {shown(result)} on {where}; return (observation, reward, done) "
            "or (observation, reward, done, info)"
        )
    observation, reward, done, info = (*result, {}) if len(result) == 3 else result
    if not isinstance(observation, str):
        raise TaskError(f"the step function's observation is a {type(observation).__name__} on {where}; return text")
    if not isinstance(done, bool | np.bool_):
        raise TaskError(f"the step function's done is {shown(done)} on {where}; return True or False")
    flags = ("success", "action_valid", "action_effective")
    if not isinstance(info, Mapping) or any(not isinstance(info.get(k, False), bool | np.bool_) for k in flags):
        raise TaskError(
            f"the step function's info is {shown(info)} on {where}; return a dict whose success, action_valid "
            "and action_effective, when given, are bools"
        )
    info = {key: bool(value) if key in flags else value for key, value in info.items()}
    return observation, read_reward(reward, where, "step"), bool(done), info


def read_reward(value: Any, where: str, kind: str = "reward") -> float:
    """A function's reward as a float: a finite real number (bools count as 0 or 1), else :class:`TaskError`.

    >>> read_reward(True, "prompt 'x'"), read_reward(np.float32(0.5), "prompt 'x'")
    (1.0, 0.5)
    """
    number = math.nan
    if isinstance(value, Real):
        try:  # inside the check: 10**400 or Fraction(10**400, 3) overflow a float, a user's Real may raise anything
            number = float(value)
        except Exception:
            number = math.nan
    if not math.isfinite(number):
        raise TaskError(
            f"the {kind} function returned {shown(value)} ({type(value).__name__}) on {where}; "
            "return a finite float, e.g. 1.0 for a correct answer and 0.0 otherwise"
        )
    return number


def shown(value: Any, width: int = 80) -> str:
    """``repr(value)`` cut to ``width`` characters; a value whose repr fails (an int above Python's 4,300 digits,
    a user's object) is shown by its type.

    >>> shown(10**5000)
    'an int of 16610 bits'
    """
    try:
        return repr(value)[:width]
    except Exception:
        return f"an int of {value.bit_length()} bits" if isinstance(value, int) else f"a {type(value).__name__} object"


class TaskEnv(TextEnv):
    """Base of the env classes tasks build (:meth:`Task.env_class`); the class attribute ``task`` is the task."""

    task: ClassVar[Any] = None
    description = "A task built from prompts and a reward or step function."

    def __init__(self, *, split: str = "train") -> None:
        super().__init__()
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
        self.split = split
        self.examples = self.task.validation_examples if split == "validation" else self.task.train_examples
        self._conversation: Conversation | None = None
        self._observation, self._done, self._success = "", False, False

    @property
    def instruction(self) -> str:
        return self.task.instruction_text

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"{self.name}.reset takes no options, got {sorted(options)}")
        drawn = int(self.np_random.integers(2**31)) if seed is None else seed
        index = pick(drawn, len(self.examples), self.split)
        example = self.examples[index]
        prompt = example[self.task.prompt_key]
        self._conversation = Conversation(prompt, example, self.np_random, observations=[prompt])
        self._observation, self._done, self._success = prompt, False, False
        return prompt, {"success": False, "example_index": index}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        conversation = self._conversation
        if conversation is None:
            raise RuntimeError("call reset(seed=...) before step()")
        word = self.parse_action(action) if self.action_words is not None else action
        if self._done or word is None:  # illegal: nothing changes and the task's function is not called
            info = {"success": self._success, "action_valid": False, "action_effective": False}
            return self._observation, 0.0, self._done, False, info
        where = f"prompt {preview(conversation.prompt)}, turn {conversation.turn + 1}, answer {preview(word)}"
        try:
            observation, reward, terminated, extra = self.task.respond(conversation, word, where)
        except Overdue:
            return self._overdue(where)
        conversation.answers.append(word)
        conversation.observations.append(observation)
        conversation.rewards.append(reward)
        truncated = not terminated and conversation.turn >= self.task.turns
        self._done = terminated or truncated
        self._success = bool(extra.pop("success", self._done and reward >= self.task.success_threshold))
        self._observation = observation
        info = {"action_valid": True, "action_effective": True, **extra, "success": self._success}
        return observation, reward, terminated, truncated, info

    def _overdue(self, where: str) -> tuple[str, float, bool, bool, dict]:
        """The step of a call past its deadline: the episode ends, truncated, as ``task_timeout``, reward 0."""
        self._done, self._success = True, False
        if self.task.first_overdue():  # one warning per task; the end reason counts every episode
            kind = "step" if self.task.multi_turn else "reward"
            warnings.warn(
                f"the {kind} function of task {self.task.name!r} passed its {self.task.timeout_s:g} s deadline on "
                f"{where}; that episode ends as {TIMEOUT_REASON} (reward 0) while the call runs on in the "
                "background (so do later ones): make the function return sooner, or allow more with "
                "Task(timeout_s=...)",
                stacklevel=3,
            )
        info = {"success": False, "action_valid": True, "action_effective": False, "end_reason": TIMEOUT_REASON}
        return self._observation, 0.0, False, True, info

    def render(self) -> str:
        return self._observation
