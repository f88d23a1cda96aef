"""``Task``: your prompts and a reward function (single-turn) or a step function (multi-turn), as a mirl env.

A Task builds an env class (:class:`~mirl.envs.task.env.TaskEnv`) that follows the contract of
:mod:`mirl.envs.base`, so the rollout engine, the prompts, the reply parser, the seeds, the validation split,
``check_env``, the trainer and ``mirl serve-env`` use it unchanged. Nothing is registered at import or at
construction: :meth:`Task.registered` registers the env under ``name`` while ``mirl.train`` trains it or a server
serves it. docs/your-task.md shows the whole path.

>>> task = Task(["What is 2 + 2?", "What is 3 + 4?"], reward=lambda prompt, answer: float(answer == "4"))
>>> env = task.make()
>>> env.reset(seed=1)[0]
'What is 2 + 2?'
>>> env.step("4")[1:3]
(1.0, True)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from functools import cached_property
from typing import Any

from mirl.envs.registry import registry
from mirl.envs.task import deadline
from mirl.envs.task.env import Conversation, TaskEnv, TaskError, read_outcome, read_reward
from mirl.envs.task.examples import preview, read_examples, split, validation_count

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*")  # env names as the metric catalogue's {env} accepts them
SINGLE_TURN_INSTRUCTION = "Answer the question."
MULTI_TURN_INSTRUCTION = "Answer each message; the conversation goes on until the task is done."
DEFAULT_MAX_TURNS = 5
DEFAULT_TIMEOUT_S = 5.0


@dataclass(eq=False)
class Task:
    """Examples plus the function that judges answers; see the module docstring and docs/your-task.md."""

    # the training examples: strings, or dicts holding the prompt under prompt_key (a list, a datasets.Dataset, ...)
    prompts: Any
    _: KW_ONLY
    # single-turn: reward(prompt, answer, **fields) -> float, fields being the example's other entries it names
    reward: Callable[..., Any] | None = None
    # multi-turn: step(conversation, answer) -> (observation, reward, done) or (observation, reward, done, info)
    step: Callable[[Conversation, str], Any] | None = None
    # the env's name in the run's config, metrics and rollouts (letters, digits, "_" and "-")
    name: str = "task"
    # the task description in the system prompt; None = a generic one for the kind of task
    instruction: str | None = None
    # held out for validation: a share in (0, 1), a count, or the validation examples themselves
    validation: Any = 0.1
    # the field of a dict example that holds the prompt
    prompt_key: str = "prompt"
    # multi-turn: answers an episode may take before it is truncated; None = 5
    max_turns: int | None = None
    # multi-turn: the legal action words (None: any text is an answer)
    actions: tuple[str, ...] | None = None
    # an episode succeeds when it ends with a reward at least this (a step's info["success"] overrides it)
    success_threshold: float = 1.0
    # seconds one call of the reward or step function may take; past it the episode ends as "task_timeout"
    # (mirl.envs.task.deadline says what that can and cannot stop); None: no deadline, called on the caller's thread
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    _overdue: deadline.Overdues = field(init=False, repr=False, default_factory=deadline.Overdues)
    _train: tuple[dict, ...] = field(init=False, repr=False)
    _validation: tuple[dict, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._check_settings()
        examples = read_examples(self.prompts, self.prompt_key)
        self._check_fields(examples, "prompts")  # indices into the list the user passed, not into a split
        if isinstance(self.validation, int | float) and not isinstance(self.validation, bool):
            count = validation_count(self.validation, len(examples))
            train, held = split(tuple(e[self.prompt_key] for e in examples), count)
            self._train, self._validation = tuple(examples[i] for i in train), tuple(examples[i] for i in held)
        else:
            self._train = examples
            self._validation = read_examples(self.validation, self.prompt_key, "validation")
            self._check_fields(self._validation, "validation")
            self._check_disjoint()
        self.prompts = examples

    def _check_settings(self) -> None:
        if (self.reward is None) == (self.step is None):
            raise TypeError("a Task takes exactly one of reward=... (single-turn) or step=... (multi-turn)")
        function = self.reward if self.reward is not None else self.step
        if not callable(function):
            raise TypeError(f"{'reward' if self.reward is not None else 'step'} must be a function, got {function!r}")
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise ValueError(f"name must be letters, digits, '_' or '-' (e.g. 'my_task'), got {self.name!r}")
        taken = registry.get(self.name)
        if taken is not None and not issubclass(taken, TaskEnv):
            raise ValueError(
                f"name {self.name!r} is a built-in env's (see `mirl envs`); pick another, e.g. name='my_task'"
            )
        if self.reward is not None and (self.actions is not None or self.max_turns is not None):
            raise ValueError("actions and max_turns belong to multi-turn tasks; pass step=... instead of reward=...")
        if self.reward is not None:
            _extra_parameters(self.reward)  # raises unless it takes (prompt, answer)
        turns = self.max_turns
        if turns is not None and (isinstance(turns, bool) or not isinstance(turns, int) or turns < 1):
            raise ValueError(f"max_turns must be an int >= 1, got {turns!r}")
        if self.actions is not None:
            self.actions = tuple(self.actions)
            words = [w.casefold() for w in self.actions if isinstance(w, str) and w.strip() and "||" not in w]
            if not words or len(words) != len(self.actions) or len(set(words)) != len(words):
                raise ValueError(f"actions must be distinct non-empty words without '||', got {self.actions!r}")
        if not isinstance(self.success_threshold, int | float) or not math.isfinite(self.success_threshold):
            raise ValueError(f"success_threshold must be a finite number, got {self.success_threshold!r}")
        seconds = self.timeout_s
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)):
            raise ValueError(f"timeout_s must be a number of seconds or None, got {seconds!r}")
        if seconds is not None and not 0 < seconds < 1e6:
            raise ValueError(f"timeout_s must be a positive number of seconds below 1e6 or None, got {seconds!r}")
        if self.instruction is not None and (not isinstance(self.instruction, str) or not self.instruction.strip()):
            raise ValueError(f"instruction must be non-empty text or None, got {self.instruction!r}")

    def _check_fields(self, examples: tuple[dict, ...], what: str) -> None:
        """Every example holds the fields the reward function takes; a missing one is named as ``what[i]``."""
        if self.reward is not None:
            for i, example in enumerate(examples):
                self._reward_fields(example, f"{what}[{i}]")

    def _check_disjoint(self) -> None:
        train = {e[self.prompt_key] for e in self._train}
        shared = [i for i, e in enumerate(self._validation) if e[self.prompt_key] in train]
        if shared:
            text = self._validation[shared[0]][self.prompt_key]
            raise ValueError(
                f"validation[{shared[0]}] {preview(text)} is also a training prompt ({len(shared)} shared in all); "
                "remove shared prompts from one of the two lists"
            )

    @property
    def train_examples(self) -> tuple[dict, ...]:
        """The examples training episodes play."""
        return self._train

    @property
    def validation_examples(self) -> tuple[dict, ...]:
        """The held-out examples validation episodes play (no prompt text in common with training)."""
        return self._validation

    @property
    def overdue_calls(self) -> int:
        """Calls of the reward or step function running past their deadline now (on their own daemon threads)."""
        return self._overdue.count

    def first_overdue(self) -> bool:
        """True the first time a call of this task passes its deadline (the env warns then), False after."""
        return self._overdue.first()

    @property
    def multi_turn(self) -> bool:
        return self.step is not None

    @property
    def turns(self) -> int:
        """Answers an episode may take: ``max_turns`` (default 5) for a multi-turn task, 1 for a single-turn one."""
        if not self.multi_turn:
            return 1
        return DEFAULT_MAX_TURNS if self.max_turns is None else self.max_turns

    @cached_property
    def env_class(self) -> type[TaskEnv]:
        """The env class of this task (one per Task object); register it with :meth:`registered`."""
        kind = "multi-turn" if self.multi_turn else "single-turn"
        attributes = {
            "task": self,
            "name": self.name,
            "description": f"Your {kind} task: {len(self._train)} training and {len(self._validation)} "
            "validation prompts.",
            "action_words": self.actions,
            "multi_turn": self.multi_turn,
            "question_prompt": not self.multi_turn,  # a question, not a game: no turn/state framing
            "default_action_budget": self.turns,
            "__module__": TaskEnv.__module__,
            "__doc__": TaskEnv.__doc__,
        }
        return type(f"TaskEnv_{self.name.replace('-', '_')}", (TaskEnv,), attributes)

    def make(self, split: str = "train") -> TaskEnv:
        """A fresh env of this task over the ``split`` examples (no registration needed)."""
        return self.env_class(split=split)

    def registered(self) -> contextlib.AbstractContextManager[str]:
        """Register the env under :attr:`name` for a ``with`` block (``mirl.train`` and :meth:`serve` do it)."""
        from mirl.envs.registry import registered

        return registered(self.name, self.env_class)

    def respond(self, conversation: Conversation, answer: str, where: str) -> tuple[str, float, bool, dict]:
        """The task function's verdict on ``answer``: ``(observation, reward, done, info)``; :class:`TaskError`
        when the function raises or returns something else (``where`` names the prompt and answer)."""
        kind = "step" if self.multi_turn else "reward"
        if self.multi_turn:
            work = functools.partial(self.step, conversation, answer)
        else:
            fields = self._reward_fields(conversation.example)
            work = functools.partial(self.reward, conversation.prompt, answer, **fields)
        try:
            result = deadline.call(work, self.timeout_s, self._overdue, self.name)
        except deadline.Overdue:
            raise  # the env ends the episode (TaskEnv.step)
        except deadline.TooManyOverdue as error:
            raise TaskError(
                f"{error.count} calls of the {kind} function of task {self.name!r} are still running past their "
                f"{self.timeout_s:g} s deadline; refusing to call it again on {where}: make it return (or raise "
                "Task(timeout_s=...))"
            ) from None
        except (Exception, SystemExit) as error:  # sys.exit() in a reward is its error, not the process's end
            raise TaskError(
                f"the {kind} function raised {type(error).__name__}: {error} on {where}; fix it, or catch that "
                "case and return a reward"
            ) from error
        if self.multi_turn:
            return read_outcome(result, where)
        reward = read_reward(result, where)
        return f"Reward: {reward:g}.", reward, True, {}

    def _reward_fields(self, example: Mapping[str, Any], where: str = "the example") -> dict[str, Any]:
        """The example's fields the reward function takes by name (all of them if it takes ``**fields``)."""
        firsts, named, takes_all = _extra_parameters(self.reward)
        others = {k: v for k, v in example.items() if k != self.prompt_key}
        if takes_all:
            clash = [name for name in firsts if name in others]
            if clash:
                raise ValueError(
                    f"the examples' field {clash[0]!r} has the name of the reward function's parameter for the "
                    f"{'prompt' if clash[0] == firsts[0] else 'answer'}; rename that parameter, e.g. "
                    "reward(prompt, completion, **fields)"
                )
            return others
        missing = [name for name, required in named.items() if required and name not in others]
        if missing:
            raise ValueError(
                f"the reward function takes {', '.join(missing)}, which {where} {preview(example[self.prompt_key])} "
                f"lacks (fields: {', '.join(others) or 'none'}); give every example those fields or a default"
            )
        return {name: others[name] for name in named if name in others}

    @property
    def instruction_text(self) -> str:
        if self.instruction is not None:
            return self.instruction
        return MULTI_TURN_INSTRUCTION if self.multi_turn else SINGLE_TURN_INSTRUCTION

    @contextlib.contextmanager
    def serving(self, split: str | None = None, settings: Any = None) -> Iterator[str]:
        """Serve the task over OpenEnv on a free loopback port from a background thread; yields its URL. Both splits
        are served (a reset's split picks one, as the trainer's do) unless ``split`` pins one."""
        from mirl.envs.remote.server import serving

        with self.registered(), serving(self.name, _split_options(split), settings) as url:
            yield url

    def serve(self, port: int = 8000, host: str = "127.0.0.1", split: str | None = None, settings: Any = None) -> None:
        """Serve the task over OpenEnv until interrupted, as ``mirl serve-env`` does (loopback by default; both
        splits unless ``split`` pins one)."""
        from mirl.envs.remote.server import ServeSettings, serve_forever

        with self.registered():
            serve_forever(self.name, _split_options(split), settings or ServeSettings(), host=host, port=port)


def _split_options(split: str | None) -> dict[str, str]:
    return {} if split is None else {"split": split}


def _extra_parameters(function: Callable[..., Any]) -> tuple[tuple[str, ...], dict[str, bool], bool]:
    """``(names of the first two, {later name: required}, takes **kwargs)`` of a reward function's parameters.

    >>> _extra_parameters(lambda prompt, answer, solution, scale=1.0: 0.0)
    (('prompt', 'answer'), {'solution': True, 'scale': False}, False)
    """
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: called with (prompt, answer) only
        return (), {}, False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in parameters):
        raise TypeError(f"the reward function must take (prompt, answer, ...), got {function!r} taking {parameters}")
    extra = positional[2:] + [p for p in parameters if p.kind is p.KEYWORD_ONLY]
    takes_all = any(p.kind is p.VAR_KEYWORD for p in parameters)
    return tuple(p.name for p in positional[:2]), {p.name: p.default is p.empty for p in extra}, takes_all
