"""Countdown: reach a target number with an arithmetic expression over the given numbers (single turn).

Observation:
    Two lines, ``Numbers: [44, 19, 35]`` and ``Target: 98``. After the answer, a one-line verdict.

Actions:
    One free-form answer: an arithmetic expression with integers, ``+ - * /``, unary minus and parentheses,
    read by the whitelisted evaluator :mod:`mirl.envs.math.arith` (exact fractions, never Python ``eval``).
    Anything else (``=``, names, calls, ``**``, decimals) or a value past the evaluator's limits does not
    parse.

Reward:
    0 when the expression does not parse (``action_valid=False``) or its integer literals are not exactly
    the given multiset of numbers; 0.1 when they are but the value differs from the target; 1 when the value
    equals the target (``success``). These are the reference's values; its ``eval`` is replaced by the
    evaluator.

Reasoning kind (``Countdown.reasoning_kind``, the scorer-free judgement the diagnostics show beside MI):
    ``grounded`` when the reasoning writes at least one step ``a op b = c`` and every such step is exact
    arithmetic on operands that are given numbers or results of earlier steps; ``template`` when it holds no
    digit; ``other`` otherwise. None for an observation that is not the question.

Termination:
    ``terminated=True`` after the first answer, parsed or not (one answer per episode); ``truncated`` is
    always False. A step after termination is illegal: reward 0, ``action_valid=False``, state unchanged.

Instances:
    Synthetic (default): 3 or 4 numbers in ``[1, max_number]``. Mode ``"plus_minus"`` (the reference's
    distribution) gives each number a random sign and takes the signed sum as the target, redrawing until it
    is at least 1, so every instance is solvable with ``+`` and ``-`` alone. Mode ``"all_ops"`` combines the
    numbers in random order with random ``+ - * /`` into one expression and keeps it when the value is an
    integer in ``[1, 999]``. Either way the generator keeps a witness expression
    (:attr:`CountdownInstance.solution`). Train and validation instances are disjoint by key hash
    (:mod:`mirl.envs.data`; key: the sorted numbers and the target).

Arguments:
    source: "synthetic" (offline generator), "local" (a .jsonl/.parquet file) or "hf" (hub dataset).
    path: the file for source="local"; the hub id for source="hf" (Jiayi-Pan/Countdown-Tasks-3to4).
    split: "train" or "validation"; the two never share an instance.
    mode: synthetic generator, "plus_minus" (solvable with + and -) or "all_ops" (+ - * /).
    num_numbers: how many numbers a synthetic instance has, drawn uniformly from these counts.
    max_number: largest number a synthetic instance may contain.
    hf_split: use this split of the hub dataset as-is instead of the key-hash partition of "train".
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from mirl.envs.base import TextEnv
from mirl.envs.data import SOURCES, SPLITS, check_choice, load_rows, row_for_seed, split_of
from mirl.envs.math.arith import evaluate
from mirl.envs.registry import register

MODES = ("plus_minus", "all_ops")
HF_DATASET = "Jiayi-Pan/Countdown-Tasks-3to4"
MAX_TARGET = 999  # all_ops targets lie in [1, MAX_TARGET]
_STEP = re.compile(r"(\d{1,6})\s*([-+*/x\u00d7])\s*(\d{1,6})\s*=\s*(\d{1,7})")  # a op b = c, x and × as *
_QUESTION = re.compile(r"Numbers: \[([\d, ]*)\]\nTarget: (\d+)")
_STEP_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "x": operator.mul, "\u00d7": operator.mul}
_MAX_DRAWS = 10_000  # candidates per reset before giving up (a few suffice in practice)
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


@dataclass(frozen=True)
class CountdownInstance:
    numbers: tuple[int, ...]
    target: int
    solution: str | None = None  # a witness expression; None for dataset rows


def instance_key(numbers: Sequence[int], target: int) -> str:
    """Split key: permutations of the same numbers with the same target are one instance."""
    return f"{','.join(str(int(n)) for n in sorted(numbers))}|{int(target)}"


def _draw_plus_minus(rng: np.random.Generator, numbers: list[int]) -> CountdownInstance | None:
    minus = rng.random(len(numbers)) < 0.5
    plus = [n for n, m in zip(numbers, minus, strict=True) if not m]
    neg = [n for n, m in zip(numbers, minus, strict=True) if m]
    target = sum(plus) - sum(neg)
    if not plus or target < 1:
        return None
    solution = " + ".join(map(str, plus)) + "".join(f" - {n}" for n in neg)
    return CountdownInstance(tuple(numbers), target, solution)


def _draw_all_ops(rng: np.random.Generator, numbers: list[int]) -> CountdownInstance | None:
    items = [(Fraction(n), str(n)) for n in numbers]
    while len(items) > 1:
        i, j = rng.choice(len(items), size=2, replace=False)
        (a, a_text), (b, b_text) = items[i], items[j]
        op = "+-*/"[int(rng.integers(4))]
        if op == "/" and b == 0:
            return None
        value = _OPS[op](a, b)
        items = [item for k, item in enumerate(items) if k not in (i, j)] + [(value, f"({a_text} {op} {b_text})")]
    value, text = items[0]
    if value.denominator != 1 or not 1 <= value <= MAX_TARGET:
        return None
    return CountdownInstance(tuple(numbers), int(value), text[1:-1])


def generate(
    rng: np.random.Generator, split: str, mode: str, counts: Sequence[int], max_number: int
) -> CountdownInstance:
    """Draw candidates from ``rng`` until one is solvable in ``mode`` and its key hashes into ``split``.

    A candidate is kept only if the evaluator itself accepts its witness (within :class:`~mirl.envs.math.arith.Limits`)
    with the target as value, so every instance has an answer that earns reward 1.
    """
    draw = _draw_plus_minus if mode == "plus_minus" else _draw_all_ops
    for _ in range(_MAX_DRAWS):
        size = int(counts[int(rng.integers(len(counts)))])
        numbers = [int(n) for n in rng.integers(1, max_number + 1, size=size)]
        found = draw(rng, numbers)
        if found is None or split_of(instance_key(found.numbers, found.target)) != split:
            continue
        if evaluate(found.solution).value == found.target:
            return found
    raise RuntimeError(f"no {mode} Countdown instance in {_MAX_DRAWS} draws; raise max_number or num_numbers")


@register("countdown")
class Countdown(TextEnv):
    """Make the target from the given numbers with one arithmetic expression (see the module docstring)."""

    description = "Reach a target number with + - * / using each given number exactly once (single answer)."
    action_words = None
    default_action_budget = 1
    multi_turn = False
    max_actions_per_turn = 1

    def __init__(
        self,
        *,
        source: str = "synthetic",
        path: str | None = None,
        split: str = "train",
        mode: str = "plus_minus",
        num_numbers: int | Sequence[int] = (3, 4),
        max_number: int = 99,
        hf_split: str | None = None,
    ) -> None:
        super().__init__()
        self.source = check_choice("source", source, SOURCES)
        self.split = check_choice("split", split, SPLITS)
        self.mode = check_choice("mode", mode, MODES)
        counts = (num_numbers,) if isinstance(num_numbers, int) else tuple(num_numbers)
        if not counts or any(isinstance(c, bool) or not isinstance(c, int) or not 2 <= c <= 6 for c in counts):
            raise ValueError(f"num_numbers must be counts in [2, 6] (e.g. 3 or (3, 4)), got {num_numbers!r}")
        if isinstance(max_number, bool) or not isinstance(max_number, int) or not 1 <= max_number <= 9999:
            raise ValueError(f"max_number must be an int in [1, 9999] (the reference uses 99), got {max_number!r}")
        self.counts, self.max_number = counts, max_number
        self.rows = None
        if source == "local" and path is None:
            raise ValueError("source='local' needs path=<file.jsonl|file.parquet> with columns target, nums")
        if source != "synthetic":
            self.rows = load_rows(
                source,
                path or HF_DATASET,
                split,
                key_fields=("nums", "target"),
                key=instance_key,
                hf_split=hf_split,
            )
        self.instance: CountdownInstance | None = None
        self._observation = ""
        self._done = self._success = False

    @property
    def instruction(self) -> str:
        return (
            "Make the target number from the given numbers. Answer with one arithmetic expression that uses "
            "every given number exactly once and no other number, with + - * / and parentheses (division is "
            "exact). Write only the expression, without '=' or the result, e.g. (3 + 5) * 2"
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"countdown.reset takes no options, got {sorted(options)}; pass them to make()")
        if self.rows is None:
            self.instance = generate(self.np_random, self.split, self.mode, self.counts, self.max_number)
        else:
            row = row_for_seed(self.rows, int(self.np_random.integers(2**31)) if seed is None else seed)
            self.instance = CountdownInstance(tuple(int(n) for n in row["nums"]), int(row["target"]))
        self._observation = f"Numbers: {list(self.instance.numbers)}\nTarget: {self.instance.target}"
        self._done = self._success = False
        return self._observation, {"success": False}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.instance is None:
            raise RuntimeError("call reset(seed=...) before step()")
        if self._done:
            info = {"success": self._success, "action_valid": False, "action_effective": False}
            return self._observation, 0.0, True, False, info
        self._done = True
        result = evaluate(str(action).strip())
        numbers_match = result.ok and sorted(result.numbers) == sorted(self.instance.numbers)
        correct = numbers_match and result.value == self.instance.target
        reward = 1.0 if correct else 0.1 if numbers_match else 0.0
        self._success = correct
        if not result.ok:
            self._observation = f"Invalid expression: {result.error}."
        elif not numbers_match:
            self._observation = f"The expression must use each of {list(self.instance.numbers)} exactly once."
        elif not correct:
            self._observation = f"The expression equals {result.value}, not {self.instance.target}."
        else:
            self._observation = f"Correct! The expression equals {self.instance.target}."
        info = {
            "success": correct,
            "action_valid": result.ok,
            "action_effective": result.ok,
            "numbers_match": numbers_match,
            "value": None if result.value is None else str(result.value),
        }
        return self._observation, reward, True, False, info

    def render(self) -> str:
        return self._observation

    @staticmethod
    def reasoning_kind(observation: str, reasoning: str) -> str | None:
        """Scorer-free judgement of a reasoning (module docstring, "Reasoning kind"); None off the question.

        >>> obs = "Numbers: [3, 5, 2]\\nTarget: 16"
        >>> steps = ("3 + 5 = 8, 8 * 2 = 16", "let me think", "3 + 5 = 9", "7 * 2 = 14")
        >>> [Countdown.reasoning_kind(obs, z) for z in steps]
        ['grounded', 'template', 'other', 'other']
        """
        question = _QUESTION.fullmatch(observation.strip())
        if question is None:
            return None
        if not any(ch.isdigit() for ch in reasoning):
            return "template"
        known = {Fraction(int(n)) for n in question.group(1).replace(",", " ").split()}
        steps = _STEP.findall(reasoning)
        for left, op, right, result in steps:
            a, b, c = Fraction(int(left)), Fraction(int(right)), Fraction(int(result))
            if a not in known or b not in known:
                return "other"
            if op == "/":
                exact = b != 0 and a / b == c
            else:
                exact = _STEP_OPS[op](a, b) == c
            if not exact:
                return "other"
            known.add(c)
        return "grounded" if steps else "other"
