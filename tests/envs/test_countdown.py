"""Countdown: rewards 1 / 0.1 / 0, hostile answers, generator solvability by brute force, seeds and splits."""

import itertools
import json
import pathlib
import sys
import types
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mirl.envs.data as data
from mirl.envs import check_env, make
from mirl.envs.data import split_of
from mirl.envs.math.arith import evaluate
from mirl.envs.math.countdown import HF_DATASET, Countdown, generate, instance_key

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "countdown_tiny.jsonl"
FIXTURE_ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]


@pytest.fixture(autouse=True)
def fresh_caches():
    data.clear_caches()
    yield
    data.clear_caches()


def reachable(values, ops):
    """Every value an expression over all of ``values`` can take (brute force over pairs, exact fractions)."""
    if len(values) == 1:
        return {values[0]}
    found = set()
    for i, j in itertools.permutations(range(len(values)), 2):
        rest = [v for k, v in enumerate(values) if k not in (i, j)]
        a, b = values[i], values[j]
        results = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}
        for op in ops:
            if results[op] is not None:
                found |= reachable([*rest, results[op]], ops)
    return found


def solvable(numbers, target, ops):
    return Fraction(target) in reachable([Fraction(n) for n in numbers], ops)


def env_on(target, nums):
    """A Countdown env reset onto the fixture row with this target and numbers."""
    env = Countdown(source="local", path=str(FIXTURE), split=split_of(instance_key(nums, target)))
    for seed in range(len(FIXTURE_ROWS)):
        env.reset(seed=seed)
        if env.instance.target == target and list(env.instance.numbers) == nums:
            return env
    raise AssertionError(f"no seed reaches {target} {nums}")


@pytest.mark.parametrize(
    ("answer", "reward", "success", "valid"),
    [
        ("44 + 19 + 35", 1.0, True, True),  # 44 + 19 + 35 = 98
        ("(35 + 44) + 19", 1.0, True, True),  # any order, same multiset
        (" 19+44+35 \n", 1.0, True, True),
        ("44 + 19 - 35", 0.1, False, True),  # right numbers, 28 != 98
        ("44 * 19 / 35", 0.1, False, True),  # 836/35 != 98
        ("44 + 19 + 36", 0.0, False, True),  # 36 is not a given number
        ("44 + 54", 0.0, False, True),  # value 98, but 19 and 35 unused and 54 not given
        ("44 + 19 + 35 + 0", 0.0, False, True),  # an extra number
        ("44 + 44 + 10", 0.0, False, True),  # 44 twice
        ("44 + 19 + 35 = 98", 0.0, False, False),  # '=' is outside the grammar
        ("98", 0.0, False, True),
    ],
)
def test_reward_outcomes(answer, reward, success, valid):
    env = env_on(98, [44, 19, 35])
    assert env.render() == "Numbers: [44, 19, 35]\nTarget: 98"
    observation, got, terminated, truncated, info = env.step(answer)
    assert (got, info["success"], info["action_valid"]) == (reward, success, valid)
    assert terminated and not truncated and env.render() == observation


def test_feedback_texts():
    env = env_on(98, [44, 19, 35])
    assert env.step("44 + 19 + 35")[0] == "Correct! The expression equals 98."
    env = env_on(98, [44, 19, 35])
    assert env.step("44 * 19 / 35")[0] == "The expression equals 836/35, not 98."
    env = env_on(98, [44, 19, 35])
    assert env.step("1 + 1")[0] == "The expression must use each of [44, 19, 35] exactly once."
    env = env_on(98, [44, 19, 35])
    assert env.step("4 / 0")[0] == "Invalid expression: division by zero."


HOSTILE = [
    "__import__('os').system('echo hacked')",
    "().__class__.__bases__[0].__subclasses__()",
    "open('/etc/passwd').read()",
    "44 .__add__(19)",
    "10**10**10",
    "44 ** 19 ** 35",
    "1e999",
    "44 / (19 - 19) + 35",
    "(" * 500 + "44 + 19 + 35" + ")" * 500,
    "44 + 19 + 35" + " + 0" * 2000,
    "x",
    "",
]


@pytest.mark.parametrize("answer", HOSTILE)
def test_hostile_answers_get_the_invalid_outcome(answer):
    env = env_on(98, [44, 19, 35])
    observation, reward, terminated, truncated, info = env.step(answer)
    assert reward == 0.0 and not info["action_valid"] and not info["success"]
    assert terminated and not truncated and observation.startswith("Invalid expression")


def test_step_after_the_answer_is_illegal():
    env = env_on(98, [44, 19, 35])
    env.step("44 + 19 + 35")
    observation, reward, terminated, truncated, info = env.step("44 + 19 + 35")
    assert (reward, terminated, info["action_valid"], info["success"]) == (0.0, True, False, True)
    assert observation == env.render() == "Correct! The expression equals 98."


@pytest.mark.parametrize("mode", ["plus_minus", "all_ops"])
def test_generated_instances_are_solvable(mode):
    ops = "+-" if mode == "plus_minus" else "+-*/"
    for seed in range(40):
        env = Countdown(mode=mode)
        env.reset(seed=seed)
        instance = env.instance
        assert 3 <= len(instance.numbers) <= 4 and all(1 <= n <= 99 for n in instance.numbers)
        witness = evaluate(instance.solution)
        assert witness.value == instance.target and sorted(witness.numbers) == sorted(instance.numbers)
        assert solvable(instance.numbers, instance.target, ops)  # independent proof by brute force
        assert env.step(instance.solution)[1] == 1.0


def test_witness_stays_within_the_evaluator_limits_for_large_instances():
    # 6 numbers up to 9999 can multiply past Limits.max_abs = 10**12; such candidates are redrawn
    env = Countdown(mode="all_ops", num_numbers=6, max_number=9999)
    for seed in range(5):
        env.reset(seed=seed)
        assert env.step(env.instance.solution)[1] == 1.0


def test_plus_minus_witness_uses_only_plus_and_minus():
    for seed in range(40):
        env = Countdown(mode="plus_minus", num_numbers=3)
        env.reset(seed=seed)
        assert set(env.instance.solution) <= set("0123456789 +-") and len(env.instance.numbers) == 3
        assert env.instance.target >= 1


def test_fixture_rows_are_solvable():
    for row in FIXTURE_ROWS:
        assert solvable(row["nums"], row["target"], "+-*/"), row


@pytest.mark.parametrize("kwargs", [{}, {"mode": "all_ops"}, {"split": "validation"}])
def test_same_seed_same_instance_different_seeds_differ(kwargs):
    env = Countdown(**kwargs)
    observations = [env.reset(seed=seed)[0] for seed in range(20)]
    assert observations == [env.reset(seed=seed)[0] for seed in range(20)]
    assert len(set(observations)) == 20


@pytest.mark.parametrize("mode", ["plus_minus", "all_ops"])
def test_synthetic_train_and_validation_never_share_an_instance(mode):
    keys = {}
    for split in ("train", "validation"):
        env = Countdown(mode=mode, split=split)
        keys[split] = set()
        for seed in range(300):
            env.reset(seed=seed)
            keys[split].add(instance_key(env.instance.numbers, env.instance.target))
        assert all(split_of(key) == split for key in keys[split])
    assert not keys["train"] & keys["validation"]


def test_generator_draws_only_from_the_given_rng():
    first = generate(np.random.default_rng(7), "train", "all_ops", (3, 4), 99)
    assert generate(np.random.default_rng(7), "train", "all_ops", (3, 4), 99) == first


def test_local_source_serves_fixture_rows_of_its_split():
    for split, expected in (("train", 11), ("validation", 2)):
        env = Countdown(source="local", path=str(FIXTURE), split=split)
        seen = set()
        for seed in range(expected):
            env.reset(seed=seed)
            seen.add(instance_key(env.instance.numbers, env.instance.target))
            assert env.instance.solution is None
        assert all(split_of(key) == split for key in seen)
    assert Countdown(source="local", path=str(FIXTURE), split="validation").reset(seed=0)[0].endswith("Target: 28")


def test_hf_source_reads_the_countdown_schema(monkeypatch):
    calls = []

    def load_dataset(path, split=None):
        calls.append((path, split))
        return list(FIXTURE_ROWS)

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    env = make("countdown", source="hf", split="validation")
    observation, _ = env.reset(seed=1)
    assert calls == [(HF_DATASET, "train")]
    assert sorted(env.instance.numbers) == [9, 17, 20] and env.instance.target == 28
    assert env.step("20 + 17 - 9")[1] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "fast"}, "mode must be one of 'plus_minus', 'all_ops', got 'fast'"),
        ({"source": "web"}, "source must be one of"),
        ({"split": "test"}, "split must be one of 'train', 'validation'"),
        ({"num_numbers": (1,)}, r"num_numbers must be counts in \[2, 6\]"),
        ({"num_numbers": ()}, r"num_numbers must be counts in \[2, 6\]"),
        ({"max_number": 0}, r"max_number must be an int in \[1, 9999\]"),
        ({"source": "local"}, "source='local' needs path="),
    ],
)
def test_bad_options_fail_loudly(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Countdown(**kwargs)


def test_reset_options_and_step_before_reset():
    env = Countdown()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("1 + 2")
    with pytest.raises(ValueError, match="takes no options"):
        env.reset(seed=0, options={"target": 5})


@pytest.mark.parametrize(
    "kwargs", [{}, {"mode": "all_ops", "num_numbers": 4}, {"source": "local", "path": str(FIXTURE)}]
)
def test_contract(kwargs):
    env = make("countdown", **kwargs)
    check_env(env)
    assert env.default_action_budget == 1 and env.max_actions_per_turn == 1 and not env.multi_turn
    assert env.action_words is None and "exactly once" in env.instruction


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_answer_is_scored_without_raising(answer):
    env = Countdown()
    env.reset(seed=3)
    _, reward, terminated, truncated, info = env.step(answer)
    assert reward in (0.0, 0.1, 1.0) and terminated and not truncated
    assert info["action_valid"] == evaluate(answer.strip()).ok


def test_reasoning_kind_checks_each_step_against_the_given_numbers_and_exact_arithmetic():
    env = Countdown()
    observation, _ = env.reset(seed=3)
    numbers = env.instance.numbers
    a, b = numbers[0], numbers[1]
    assert Countdown.reasoning_kind(observation, f"first {a} + {b} = {a + b} and {a + b} - {a} = {b}") == "grounded"
    assert Countdown.reasoning_kind(observation, f"{a} + {b} = {a + b + 1}") == "other"  # wrong sum
    assert Countdown.reasoning_kind(observation, "add them up carefully") == "template"
    assert Countdown.reasoning_kind(observation, f"I try {a} and {b}") == "other"  # numbers, no step
    obs = "Numbers: [12, 4, 3]\nTarget: 9"
    assert Countdown.reasoning_kind(obs, "12 / 4 = 3, 3 x 3 = 9") == "grounded"  # exact division, x as times
    assert Countdown.reasoning_kind(obs, "12 / 5 = 2") == "other"  # 5 not given, and 12/5 is not 2
    assert Countdown.reasoning_kind("Correct! The expression equals 9.", "12 / 4 = 3") is None  # not the question


def test_countdown_doctests():
    import doctest

    import mirl.envs.math.countdown as module

    assert doctest.testmod(module).failed == 0
