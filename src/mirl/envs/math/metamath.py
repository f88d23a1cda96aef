"""MetaMathQA: answer a math question; a wrong answer may be retried for half the reward each time.

Observation:
    The question text (the dataset's ``query``). After an answer: ``"Correct!"`` or
    ``"Incorrect. Please think again."``, the reference's strings, without repeating the question.

Actions:
    One free-form answer a turn. It is compared with the label, the text after the last
    ``"The answer is:"`` in the row's ``response``, as in the reference: both lower-cased with every
    whitespace character removed, then equal as strings. Unlike the reference, a leading ``"The answer is:"``
    in the agent's answer is stripped first, so ``The answer is: 3/4`` and ``3/4`` both match the label
    ``3/4``. An answer that is empty after that is illegal (``action_valid=False``, reward 0, no attempt
    used, state unchanged).

Reward:
    ``1 / 2**k`` for a correct answer after ``k`` wrong ones (1, 0.5, 0.25, ...); 0 for a wrong answer.

Termination:
    ``terminated=True`` on a correct answer (``success``) or after ``max_attempts`` wrong answers; the attempt
    count is part of the task, not a time limit, so ``truncated`` is always False. The rollout engine's turn
    limit may end an episode earlier. A step after termination is illegal (reward 0, ``action_valid=False``).

Instances:
    Synthetic (default): one of nine templates (GSM-style word problems, linear equations, fraction sums,
    polynomial values, averages) with numbers drawn from the reset RNG; the label is in canonical form
    (:func:`format_answer`: integers without ``.0``, reduced fractions ``3/4``, a leading ``-``). Rows from a
    local file or ``meta-math/MetaMathQA`` need the columns ``query``, ``response`` and
    ``original_question``; train and validation rows are split by a hash of ``original_question``
    (:mod:`mirl.envs.data`), so every rephrasing of one question lands on the same side.

Arguments:
    source: "synthetic" (offline generator), "local" (a .jsonl/.parquet file) or "hf" (hub dataset).
    path: the file for source="local"; the hub id for source="hf" (default meta-math/MetaMathQA).
    split: "train" or "validation"; the two never share a question.
    max_attempts: answers allowed per episode (the reference's max_turn, 5).
    hf_split: use this split of the hub dataset as-is instead of the key-hash partition of "train".
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from mirl.envs.base import TextEnv
from mirl.envs.data import SOURCES, SPLITS, check_choice, load_rows, row_for_seed, split_of
from mirl.envs.registry import register

HF_DATASET = "meta-math/MetaMathQA"
ANSWER_PREFIX = "The answer is:"
CORRECT, INCORRECT = "Correct!", "Incorrect. Please think again."
_MAX_DRAWS = 1000  # synthetic candidates per reset before giving up (about 1.1 suffice on average)
_NAMES = ("Ava", "Ben", "Chloe", "Diego", "Emma", "Farid", "Grace", "Hiro", "Isla", "Jonas", "Kira", "Liam")


def format_answer(value: int | Fraction) -> str:
    """Canonical label text: an integer without ``.0``, else a reduced fraction with the sign in front.

    >>> format_answer(Fraction(6, -8)), format_answer(Fraction(10, 5)), format_answer(-7)
    ('-3/4', '2', '-7')
    """
    if isinstance(value, bool) or not isinstance(value, int | Fraction):
        raise TypeError(f"format_answer takes an int or a Fraction (exact), got {type(value).__name__}")
    value = Fraction(value)
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _int(rng: np.random.Generator, low: int, high: int) -> int:
    """Uniform integer in ``[low, high]``, both ends included."""
    return int(rng.integers(low, high + 1))


def _signed(n: int) -> str:
    return f"+ {n}" if n >= 0 else f"- {-n}"


# Templates: rng -> (question, worked solution, exact answer, type). Each draws its numbers from rng only.
Template = Callable[[np.random.Generator], tuple[str, str, Fraction, str]]


def _pencils(rng: np.random.Generator) -> tuple[str, str, Fraction, str]:
    name, boxes, per_box = _NAMES[_int(rng, 0, len(_NAMES) - 1)], _int(rng, 2, 12), _int(rng, 3, 24)
    total = boxes * per_box
    given = _int(rng, 1, total - 1)
    question = (
        f"{name} buys {boxes} boxes of pencils with {per_box} pencils in each box and gives {given} pencils "
        f"to classmates. How many pencils does {name} have left?"
    )
    steps = f"{name} buys {boxes} * {per_box} = {total} pencils; {total} - {given} = {total - given} are left."
    return question, steps, Fraction(total - given), "synthetic_word"


def _wages(rng: np.random.Generator) -> tuple[str, str, Fraction, str]:
    name, rate, hours = _NAMES[_int(rng, 0, len(_NAMES) - 1)], _int(rng, 8, 40), _int(rng, 5, 40)
    pay = rate * hours
    spent = _int(rng, 1, pay - 1)
    question = (
        f"{name} earns ${rate} per hour, works {hours} hours this week and spends ${spent} on groceries. "
        f"How many dollars of this week's pay does {name} have left?"
    )
    steps = f"The pay is {rate} * {hours} = {pay} dollars, and {pay} - {spent} = {pay - spent} are left."
    return question, steps, Fraction(pay - spent), "synthetic_word"


def _cookies(rng: np.random.Generator) -> tuple[str, str, Fraction, str]:
    name, cookies, friends = _NAMES[_int(rng, 0, len(_NAMES) - 1)], _int(rng, 5, 60), _int(rng, 2, 9)
    share = Fraction(cookies, friends)
    question = (
        f"{name} bakes {cookies} cookies and shares them equally among {friends} friends, cutting cookies "
        "where needed. How many cookies does each friend get?"
    )
    return (
        question,
        f"Each friend gets {cookies} / {friends} = {format_answer(share)}.",
        share,
        "synthetic_word",
    )


def _cyclist(rng: np.random.Generator) -> tuple[str, str, Fraction, str]:
    distance, hours, later = _int(rng, 10, 120), _int(rng, 2, 8), _int(rng, 1, 12)
    speed = Fraction(distance, hours)
    question = (
        f"A cyclist rides {distance} kilometres in {hours} hours at a steady pace. How many kilometres does "
        f"the cyclist ride in {later} hours?"
    )
    steps = (
        f"The speed is {distance} / {hours} = {format_answer(speed)} km per hour, so in {later} hours the "
        f"cyclist rides {format_answer(speed)} * {later} = {format_answer(speed * later)} km."
    )
    return question, steps, speed * later, "synthetic_word"


def _discount(rng: np.random.Generator) -> tuple[str, str, Fraction, str]:
    price, percent = 20 * _int(rng, 1, 15), 5 * _int(rng, 1, 12)  # 20 * 5 | 100: the price stays whole
    cut = Fraction(price * percent, 100)
    question = f"A jacket costs ${price}. In a sale it is {percent}% off. What is the sale price in dollars?"
    steps = f"The discount is {price} * {percent} / 100 = {cut}, so the price is {price} - {cut} = {price - cut}."
    return question, steps, price - cut, "synthetic_word"


def _average(rng: np.random.Generator) -> tuple[str, str, Fraction, str]:
    scores = [_int(rng, 50, 100) for _ in range(_int(rng, 3, 5))]
    mean = Fraction(sum(scores), len(scores))
    question = f"The quiz scores of {len(scores)} students are {', '.join(map(str, scores))}. What is their average?"
    steps = f"The scores add up to {sum(scores)}, and {sum(scores)} / {len(scores)} = {format_answer(mean)}."
    return question, steps, mean, "synthetic_word"


def _linear(rng: np.random.Generator) -> tuple[str, str, Fraction, str]:
    slope = _int(rng, 2, 12) * (1 if rng.random() < 0.5 else -1)
    offset, rhs = _int(rng, 1, 30) * (1 if rng.random() < 0.5 else -1), _int(rng, -50, 50)
    x = Fraction(rhs - offset, slope)
    question = f"Solve for x: {slope}x {_signed(offset)} = {rhs}."
    steps = f"So {slope}x = {rhs - offset} and x = {rhs - offset} / {slope} = {format_answer(x)}."
    return question, steps, x, "synthetic_algebra"


def _fraction_sum(rng: np.random.Generator) -> tuple[str, str, Fraction, str]:
    den_a, den_b = _int(rng, 2, 12), _int(rng, 2, 12)
    num_a, num_b, sign = _int(rng, 1, den_a - 1), _int(rng, 1, den_b - 1), 1 if rng.random() < 0.5 else -1
    total = Fraction(num_a, den_a) + sign * Fraction(num_b, den_b)
    op, common = "+" if sign > 0 else "-", den_a * den_b
    question = f"What is {num_a}/{den_a} {op} {num_b}/{den_b}? Give the result in lowest terms."
    steps = (
        f"Over the denominator {common}: {num_a * den_b}/{common} {op} {num_b * den_a}/{common} = "
        f"{num_a * den_b + sign * num_b * den_a}/{common} = {format_answer(total)}."
    )
    return question, steps, total, "synthetic_algebra"


def _polynomial(rng: np.random.Generator) -> tuple[str, str, Fraction, str]:
    x, a, b, c = _int(rng, -6, 6), _int(rng, 1, 5), _int(rng, 0, 12), _int(rng, -20, 20)
    value = a * x * x - b * x + c
    question = f"What is the value of {a}x^2 - {b}x {_signed(c)} when x = {x}?"
    steps = f"Substituting x = {x}: {a} * {x * x} - {b} * ({x}) {_signed(c)} = {value}."
    return question, steps, Fraction(value), "synthetic_algebra"


TEMPLATES: tuple[Template, ...] = (
    _pencils,
    _wages,
    _cookies,
    _cyclist,
    _discount,
    _average,
    _linear,
    _fraction_sum,
    _polynomial,
)


def synthetic_row(rng: np.random.Generator, split: str) -> dict[str, str]:
    """A MetaMathQA-schema row from a uniformly drawn template, redrawn until it hashes into ``split``."""
    for _ in range(_MAX_DRAWS):
        question, steps, answer, kind = TEMPLATES[_int(rng, 0, len(TEMPLATES) - 1)](rng)
        if split_of(question) == split:
            response = f"{steps} {ANSWER_PREFIX} {format_answer(answer)}"
            return {"query": question, "response": response, "type": kind, "original_question": question}
    raise RuntimeError(f"no synthetic question in split {split!r} after {_MAX_DRAWS} draws")


def extract_label(response: str) -> str | None:
    """The text after the last ``"The answer is:"`` in ``response``, stripped; None when there is none.

    >>> extract_label("2 + 2 = 4. The answer is: 4")
    '4'
    """
    head, sep, label = response.rpartition(ANSWER_PREFIX)
    return label.strip() if sep else None


def normalize_answer(text: str) -> str:
    """Lower-case, drop all whitespace, then drop one leading ``"theansweris:"``.

    >>> normalize_answer("The answer is:  -3 / 4 ")
    '-3/4'
    """
    squashed = "".join(text.split()).lower()
    prefix = "".join(ANSWER_PREFIX.split()).lower()
    return squashed[len(prefix) :] if squashed.startswith(prefix) else squashed


def _key(original_question: str) -> str:
    return str(original_question)


@register("metamath")
class MetaMathQA(TextEnv):
    """Answer a math question, retrying after a wrong answer (see the module docstring)."""

    description = "Answer a math word problem; each retry after a wrong answer halves the reward."
    action_words = None
    default_action_budget = 5
    multi_turn = True
    max_actions_per_turn = 1

    def __init__(
        self,
        *,
        source: str = "synthetic",
        path: str | None = None,
        split: str = "train",
        max_attempts: int = 5,
        hf_split: str | None = None,
    ) -> None:
        super().__init__()
        self.source = check_choice("source", source, SOURCES)
        self.split = check_choice("split", split, SPLITS)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1 (the reference uses 5), got {max_attempts!r}")
        self.max_attempts = max_attempts
        if source == "local" and path is None:
            raise ValueError("source='local' needs path=<file.jsonl|file.parquet> with columns query, response")
        self.rows = None
        if source != "synthetic":
            self.rows = load_rows(
                source,
                path or HF_DATASET,
                split,
                key_fields=("original_question",),
                key=_key,
                hf_split=hf_split,
                required=("query", "response"),
            )
        self.question: str | None = None
        self.label = ""
        self.attempts = 0
        self._observation = ""
        self._done = self._success = False

    @property
    def instruction(self) -> str:
        return (
            "Solve the math problem. Answer with the final answer only, without units or words: "
            "integers without a decimal point (12, not 12.0), fractions reduced as a/b (3/4), negatives "
            f"with a leading minus (-5). After a wrong answer you may try again, up to {self.max_attempts} "
            "answers in all; each retry halves the reward."
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"metamath.reset takes no options, got {sorted(options)}; pass them to make()")
        if self.rows is None:
            row = synthetic_row(self.np_random, self.split)
        else:
            row = row_for_seed(self.rows, int(self.np_random.integers(2**31)) if seed is None else seed)
        label = extract_label(str(row["response"]))
        if label is None:
            raise ValueError(f"row has no {ANSWER_PREFIX!r} in its response: {str(row['response'])[-200:]!r}")
        self.question, self.label = str(row["query"]), label
        self.attempts = 0
        self._observation = self.question
        self._done = self._success = False
        return self._observation, {"success": False}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.question is None:
            raise RuntimeError("call reset(seed=...) before step()")
        answer = normalize_answer(str(action))
        if self._done or not answer:
            info = {"success": self._success, "action_valid": False, "action_effective": False}
            return self._observation, 0.0, self._done, False, info
        correct = answer == normalize_answer(self.label)
        reward = 0.5**self.attempts if correct else 0.0
        self.attempts += 1
        self._success = correct
        self._done = correct or self.attempts >= self.max_attempts
        self._observation = CORRECT if correct else INCORRECT
        info = {"success": correct, "action_valid": True, "action_effective": True, "attempts": self.attempts}
        return self._observation, reward, self._done, False, info

    def render(self) -> str:
        if self.question is None:
            raise RuntimeError("call reset(seed=...) before render()")
        return self._observation
