"""KeySum: add the named symbols of a key, mod 8, one question per turn (the model organism's task).

Design. Success needs reasoning that depends on the input because the answer is a computation a tiny transformer
cannot do in one token but can do step by step: to answer ``add: b d`` the agent has to find ``b`` and ``d`` in the
key, read their symbols and add them mod 8. Written out (``b 5 d 7 s 4``), each step is a copy (a letter from the
question, the symbol after that letter in the key) or a sum of two symbols a fixed distance back, which a two-layer
attention model learns; in one token it is two look-ups and a sum at once. The organism's policy is built by
supervised training on a scripted solver's traces (``scripts/build_organism.py``): grounded traces
(:func:`solution_reasoning`) and input-independent template traces (:func:`template_reasoning`, followed by a
random answer), so a template reasoning answers at chance (1/8 per turn) and a grounded one near 1. A bottleneck
context (later turns showing the agent's notes but not the key) would force the same dependence without relying on
the model's depth, but no context mode of the rollout engine provides it (``window`` and ``memory`` drop or recap
whole turns); the computation design needs none. What this shows is a mechanism on a tiny model, not that large
LLMs behave this way.

Observation:
    The key as letter-symbol pairs and the question, every turn (so each turn stands alone in any context mode)::

        key: a 3 b 5 c 1 d 7
        add: b d

    With ``easy_shown`` an easy (one-letter) question also shows its answer: ``add: b = 5``. After the last
    question: ``done``.

Actions:
    One symbol ``0``..``7`` (surrounding whitespace ignored). Anything else is an invalid action: the question
    stays, reward 0, ``action_valid=False`` (the rollout engine adds its format penalty).

Reward:
    1 per question when the answer equals the sum mod 8 of the named symbols, else 0. With ``noise`` p, each valid
    answer is replaced by a uniformly drawn symbol with probability p before it is checked (the paper's
    noise-injection knob: at p = 1 reward no longer depends on the answer).

Termination:
    Terminated after the last question's valid answer; ``success`` is True when every question was answered
    correctly. Steps after the end change nothing and earn 0.

Arguments:
    key_size: letters in the key (a, b, ...), 2 to 8; 4 by default (8**4 = 4096 keys).
    questions: questions (turns) per instance, 1 to 8.
    hard_share: probability that an instance is hard (3 named letters a question, not 2): the reward-spread knob.
    easy_letters: letters an easy question names, 1 or 2 (1: the answer stands in the observation).
        With 1 the answer is the named letter's symbol: a policy can answer without reasoning, so reasoning is
        reward-neutral on easy instances and needed only on hard ones (studies/mechanism).
    easy_shown: with ``easy_letters=1``, an easy question also shows its answer (``add: b = 5``), so answering
        without reasoning is a copy of the symbol after ``=``, not a look-up in the key (studies/mechanism).
    noise: probability that a valid answer is replaced by a random symbol.
    split: ``train``, ``validation`` (disjoint key sets) or ``all``; set by the trainer.
    validation_share: share of all keys reserved for the validation split.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from mirl.envs.base import TextEnv
from mirl.envs.grid.board import check_no_options
from mirl.envs.registry import register

MOD = 8
LETTERS = "abcdefgh"
EASY, HARD = 2, 3  # letters named per question (easy_letters can make easy questions name 1)
SUM_WORD = "s"  # the partial-sum marker of grounded reasoning
# words of the template reasoning: fluent-looking, varied, and the same whatever the key and question
TEMPLATE_WORDS = (
    "i", "will", "add", "the", "named", "symbols", "then", "answer", "let", "me", "think", "step", "by", "sum",
    "is", "easy", "now", "so", "ok", "first", "check", "key",
)  # fmt: skip
_KEY_MIX = 2741  # odd, so k -> k * _KEY_MIX mod 8**n permutes the keys (the split is a fixed scramble)
_OBSERVATION = re.compile(r"key:((?:\s+[a-h]\s+[0-7])+)\s*\n\s*add:((?:\s+[a-h])+)(?:\s+=\s+[0-7])?\s*$")
SHOWN = "="  # an easy question with easy_shown: ``add: b = 5``


def key_in_split(key: tuple[int, ...], split: str, validation_share: float) -> bool:
    """Whether ``key`` belongs to ``split``: a fixed scramble of the key's index, below the share is validation.

    >>> sum(key_in_split((a, b), "validation", 0.25) for a in range(8) for b in range(8))
    16
    """
    index = sum(symbol * MOD**i for i, symbol in enumerate(key))
    scrambled = (index * _KEY_MIX) % MOD ** len(key)
    is_validation = scrambled < round(validation_share * MOD ** len(key))
    return split == "all" or is_validation == (split == "validation")


def solution_reasoning(key: dict[str, int], letters: str) -> str:
    """The scripted solver's grounded reasoning: each named letter with its symbol, a partial sum after each
    symbol from the second on.

    >>> solution_reasoning({"a": 3, "b": 5, "c": 1, "d": 7}, "bda")
    'b 5 d 7 s 4 a 3 s 7'
    """
    words, total = [], 0
    for i, letter in enumerate(letters):
        total = (total + key[letter]) % MOD
        words += [letter, str(key[letter])] + ([SUM_WORD, str(total)] if i else [])
    return " ".join(words)


def template_reasoning(rng: np.random.Generator, longest: int = 7) -> str:
    """An input-independent reasoning: 4 to ``longest`` template words drawn from ``rng``.

    >>> len(template_reasoning(np.random.default_rng(0)).split()) in range(4, 8)
    True
    """
    count = int(rng.integers(4, longest + 1))
    return " ".join(TEMPLATE_WORDS[int(i)] for i in rng.integers(len(TEMPLATE_WORDS), size=count))


def parse_observation(observation: str) -> tuple[dict[str, int], str] | None:
    """``(key, named letters)`` of a question observation, None for anything else (``done``, other envs).

    >>> parse_observation("key: a 3 b 5\\nadd: b a"), parse_observation("key: a 3 b 5\\nadd: b = 5")
    (({'a': 3, 'b': 5}, 'ba'), ({'a': 3, 'b': 5}, 'b'))
    """
    match = _OBSERVATION.match(observation.strip()) if isinstance(observation, str) else None
    if match is None:
        return None
    pairs = match.group(1).split()
    return {pairs[i]: int(pairs[i + 1]) for i in range(0, len(pairs), 2)}, "".join(match.group(2).split())


def states_symbols(observation: str, reasoning: str) -> bool | None:
    """Whether ``reasoning`` states every named letter's symbol correctly (``b 5`` for ``b``), scorer-free ground
    truth for the MI diagnostic; None when ``observation`` is not a question.

    >>> states_symbols("key: a 3 b 5\\nadd: b a", "b 5 a 3 s 0"), states_symbols("key: a 3 b 5\\nadd: b a", "b 5")
    (True, False)
    """
    parsed = parse_observation(observation)
    if parsed is None:
        return None
    key, letters = parsed
    words = reasoning.split()
    stated = {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i] in key}
    return all(stated.get(letter) == str(key[letter]) for letter in letters)


@register("keysum")
class KeySumEnv(TextEnv):
    """Answer the sum mod 8 of the key's named symbols, one question per turn."""

    description = "Sum mod 8 of a key's named symbols, one question a turn; the model organism's task."
    action_words = None  # free-form: one symbol 0..7
    default_action_budget = 8
    multi_turn = True
    max_actions_per_turn = 1

    def __init__(
        self,
        key_size: int = 4,
        questions: int = 2,
        hard_share: float = 0.0,
        noise: float = 0.0,
        easy_letters: int = EASY,
        easy_shown: bool = False,
        split: str = "all",
        validation_share: float = 0.2,
    ) -> None:
        super().__init__()
        if not 2 <= key_size <= len(LETTERS):
            raise ValueError(f"key_size must be in [2, {len(LETTERS)}], got {key_size}; use key_size=4")
        if not 1 <= questions <= 8:
            raise ValueError(f"questions must be in [1, 8], got {questions}; use questions=2")
        for name, value in (("hard_share", hard_share), ("noise", noise), ("validation_share", validation_share)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} is a probability, expected 0 <= {name} <= 1, got {value}")
        reserved = round(validation_share * MOD**key_size)
        if split != "all" and not 0 < reserved < MOD**key_size:
            raise ValueError(
                f"validation_share={validation_share} leaves {reserved} of {MOD**key_size} keys for validation; "
                "each split needs at least one key: use a share between 0.05 and 0.95"
            )
        if easy_letters not in (1, EASY):
            raise ValueError(f"easy_letters must be 1 or {EASY}, got {easy_letters}; use easy_letters=1 or 2")
        if easy_shown and easy_letters != 1:
            raise ValueError(f"easy_shown needs easy_letters=1 (one-letter questions), got easy_letters={easy_letters}")
        if split not in ("train", "validation", "all"):
            raise ValueError(f"split must be 'train', 'validation' or 'all', got {split!r}")
        if hard_share > 0 and key_size < HARD:
            raise ValueError(f"hard questions name {HARD} letters; key_size must be >= {HARD}, got {key_size}")
        self.key_size, self.num_questions, self.hard_share = key_size, questions, float(hard_share)
        self.noise, self.split, self.validation_share = float(noise), split, float(validation_share)
        self.easy_letters, self.easy_shown = int(easy_letters), bool(easy_shown)
        self.key: dict[str, int] | None = None

    @property
    def instruction(self) -> str:
        return (
            "A key maps letters to symbols 0 to 7. Each turn names some letters: answer the sum of their "
            "symbols mod 8, one symbol."
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        check_no_options("keysum", options)
        while True:  # rejection: about 1 / share draws for the smaller split
            symbols = tuple(int(s) for s in self.np_random.integers(MOD, size=self.key_size))
            if key_in_split(symbols, self.split, self.validation_share):
                break
        self.key = dict(zip(LETTERS, symbols, strict=False))
        self.hard = bool(self.np_random.random() < self.hard_share)
        size = HARD if self.hard else self.easy_letters
        self.asked = [
            "".join(LETTERS[int(i)] for i in self.np_random.permutation(self.key_size)[:size])
            for _ in range(self.num_questions)
        ]
        self.current, self.correct = 0, 0
        return self.render(), {"success": False, "state_key": "0"}

    def answer(self) -> int:
        """The correct answer to the current question."""
        return sum(self.key[letter] for letter in self.asked[self.current]) % MOD

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.key is None:
            raise RuntimeError("call reset() before step()")
        done = self.current >= self.num_questions
        text = action.strip() if isinstance(action, str) else ""
        valid = not done and len(text) == 1 and text in "01234567"
        reward = 0.0
        if valid:
            given = int(text)
            if self.np_random.random() < self.noise:
                given = int(self.np_random.integers(MOD))
            reward = float(given == self.answer())
            self.correct += int(reward)
            self.current += 1
        finished = self.current >= self.num_questions
        info = {
            "success": finished and self.correct == self.num_questions,
            "action_valid": valid,
            "action_effective": valid,
            "state_key": str(self.current),
        }
        return self.render(), reward, finished, False, info

    def render(self) -> str:
        if self.key is None:
            raise RuntimeError("call reset() before render()")
        if self.current >= self.num_questions:
            return "done"
        pairs = " ".join(f"{letter} {symbol}" for letter, symbol in self.key.items())
        question = " ".join(self.asked[self.current])
        if self.easy_shown and not self.hard:
            question += f" {SHOWN} {self.answer()}"
        return f"key: {pairs}\nadd: {question}"

    @staticmethod
    def reasoning_kind(observation: str, reasoning: str) -> str | None:
        """Scorer-free ground truth for the MI diagnostic: ``grounded`` (the reasoning states every named symbol
        correctly), ``template`` (it holds no symbol at all) or ``other``; None when ``observation`` is not a
        question.

        >>> obs = "key: a 3 b 5\\nadd: b a"
        >>> [KeySumEnv.reasoning_kind(obs, z) for z in ("b 5 a 3 s 0", "let me think", "b 4 a 3")]
        ['grounded', 'template', 'other']
        """
        stated = states_symbols(observation, reasoning)
        if stated is None:
            return None
        if stated:
            return "grounded"
        return "template" if not any(ch.isdigit() for ch in reasoning) else "other"
