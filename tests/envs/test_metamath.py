"""MetaMathQA: retry halving, label extraction and canonical formatting, synthetic labels re-derived, sources."""

import doctest
import json
import pathlib
import re
import sys
import types
from fractions import Fraction

import numpy as np
import pytest

import mirl.envs.data as data
import mirl.envs.math.metamath as metamath
from mirl.envs import check_env, make
from mirl.envs.data import split_of
from mirl.envs.math.metamath import (
    CORRECT,
    HF_DATASET,
    INCORRECT,
    TEMPLATES,
    MetaMathQA,
    extract_label,
    format_answer,
    normalize_answer,
    synthetic_row,
)

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "metamath_tiny.jsonl"
FIXTURE_ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
CANONICAL = re.compile(r"-?(0|[1-9]\d*)(/[1-9]\d*)?")


@pytest.fixture(autouse=True)
def fresh_caches():
    data.clear_caches()
    yield
    data.clear_caches()


def env_on(query, **kwargs):
    """A MetaMathQA env (fixture file as source) reset onto the row with this query."""
    row = next(r for r in FIXTURE_ROWS if r["query"] == query)
    env = MetaMathQA(source="local", path=str(FIXTURE), split=split_of(row["original_question"]), **kwargs)
    for seed in range(len(FIXTURE_ROWS)):
        if env.reset(seed=seed)[0] == query:
            return env
    raise AssertionError(f"no seed reaches {query!r}")


SQRT = "Compute $\\sqrt{144} + 5^2$."  # label 37


@pytest.mark.parametrize(("wrong_first", "reward"), [(0, 1.0), (1, 0.5), (2, 0.25), (3, 0.125), (4, 0.0625)])
def test_reward_halves_with_each_retry(wrong_first, reward):
    env = env_on(SQRT)
    for k in range(wrong_first):
        observation, got, terminated, truncated, info = env.step(str(30 + k))
        assert (observation, got, terminated, truncated) == (INCORRECT, 0.0, False, False)
        assert info["action_valid"] and not info["success"] and info["attempts"] == k + 1
    observation, got, terminated, truncated, info = env.step("37")
    assert (observation, got, terminated, truncated, info["success"]) == (CORRECT, reward, True, False, True)
    assert env.render() == CORRECT


def test_attempts_run_out_after_max_attempts():
    env = env_on(SQRT, max_attempts=2)
    assert env.step("1")[1:4] == (0.0, False, False)
    observation, reward, terminated, truncated, info = env.step("2")
    assert (observation, reward, terminated, truncated, info["success"]) == (INCORRECT, 0.0, True, False, False)
    observation, reward, terminated, truncated, info = env.step("37")  # too late: illegal, nothing changes
    assert (reward, terminated, info["action_valid"], info["success"]) == (0.0, True, False, False)
    assert observation == INCORRECT


def test_empty_answer_is_illegal_and_uses_no_attempt():
    env = env_on(SQRT)
    observation, reward, terminated, _, info = env.step("   ")
    assert (observation, reward, terminated, info["action_valid"]) == (SQRT, 0.0, False, False)
    assert not env.step("The answer is:")[4]["action_valid"]  # the bare prefix is empty too
    assert env.attempts == 0
    assert env.step("37")[1] == 1.0  # still the first attempt


@pytest.mark.parametrize(
    ("answer", "correct"),
    [
        ("37", True),
        (" 3 7\n", True),  # all whitespace is removed, as in the reference
        ("The answer is: 37", True),  # the leading prefix is stripped (a mirl addition)
        ("the answer is:37", True),
        ("37.0", False),  # string equality, not numeric: the label is canonical
        ("37.", False),
        ("thirty-seven", False),
        ("The answer is: 36", False),
    ],
)
def test_answer_matching(answer, correct):
    env = env_on(SQRT)
    assert env.step(answer)[4]["success"] is correct


def test_latex_and_fraction_labels_compare_as_text():
    env = env_on("What is 2/3 + 1/6?")
    assert env.label == "\\frac{5}{6}"
    assert env.step("5/6")[1] == 0.0  # a different string from the label
    assert env.step("\\FRAC{5}{6}")[1] == 0.5  # lower-cased on both sides
    env = env_on("A rope 9 metres long is cut into 4 equal pieces. How long is each piece in metres?")
    assert env.step("9 / 4")[1] == 1.0


def test_extract_label_and_normalize_answer():
    assert extract_label("x = 2.\nThe answer is: 2") == "2"
    assert extract_label("The answer is: 1. Check: The answer is:  -3/4 \n") == "-3/4"  # the last one counts
    assert extract_label("no label here") is None
    assert normalize_answer("The answer is:  -3 / 4 ") == "-3/4"
    assert normalize_answer("  The Answer Is: X ") == "x"
    assert normalize_answer("3/4 The answer is:") == "3/4theansweris:"  # only a leading prefix is stripped


def test_format_answer_is_canonical():
    assert format_answer(Fraction(6, -8)) == "-3/4"  # reduced, sign in front
    assert format_answer(Fraction(10, 5)) == "2"  # whole numbers have no denominator
    assert format_answer(Fraction(0, 7)) == "0"
    assert format_answer(-7) == "-7"
    assert format_answer(Fraction(3, 4)) == "3/4"
    for bad in (2.0, True, "3"):
        with pytest.raises(TypeError, match="int or a Fraction"):
            format_answer(bad)


def _label_of(row):
    return Fraction(extract_label(row["response"]))


def test_synthetic_labels_are_canonical_and_in_the_schema():
    for split in ("train", "validation"):
        for seed in range(200):
            row = synthetic_row(np.random.default_rng(seed), split)
            assert set(row) == {"query", "response", "type", "original_question"}
            assert row["original_question"] == row["query"] and split_of(row["query"]) == split
            label = extract_label(row["response"])
            assert CANONICAL.fullmatch(label), label
            value = Fraction(label)
            assert format_answer(value) == label  # canonical: reduced, no ".0", sign in front


def _rows(count=400):
    return [synthetic_row(np.random.default_rng(seed), "train") for seed in range(count)]


def test_linear_equation_labels_solve_the_equation():
    checked = 0
    for row in _rows():
        match = re.fullmatch(r"Solve for x: (-?\d+)x ([+-]) (\d+) = (-?\d+)\.", row["query"])
        if match:
            slope, sign, offset, rhs = int(match[1]), match[2], int(match[3]), int(match[4])
            x = _label_of(row)
            assert slope * x + (offset if sign == "+" else -offset) == rhs
            checked += 1
    assert checked > 10


def test_fraction_and_polynomial_labels():
    checked = 0
    for row in _rows():
        fraction = re.fullmatch(r"What is (\d+)/(\d+) ([+-]) (\d+)/(\d+)\? .*", row["query"])
        poly = re.fullmatch(r"What is the value of (\d+)x\^2 - (\d+)x ([+-]) (\d+) when x = (-?\d+)\?", row["query"])
        if fraction:
            a, b, c, d = (Fraction(int(fraction[i])) for i in (1, 2, 4, 5))
            assert _label_of(row) == (a / b + c / d if fraction[3] == "+" else a / b - c / d)
            checked += 1
        if poly:
            a, b, c, x = int(poly[1]), int(poly[2]), int(poly[4]), int(poly[5])
            assert _label_of(row) == a * x * x - b * x + (c if poly[3] == "+" else -c)
            checked += 1
    assert checked > 20


def test_word_problem_labels():
    checked = 0
    for row in _rows():
        numbers = [int(n) for n in re.findall(r"\d+", row["query"])]
        query = row["query"]
        if "pencils" in query:  # boxes * per box - given
            assert _label_of(row) == numbers[0] * numbers[1] - numbers[2]
        elif "jacket" in query:  # price * (100 - percent) / 100
            assert _label_of(row) == Fraction(numbers[0] * (100 - numbers[1]), 100)
        elif "cyclist" in query:  # distance / hours * later
            assert _label_of(row) == Fraction(numbers[0] * numbers[2], numbers[1])
        elif "quiz scores" in query:  # mean of the listed scores
            assert _label_of(row) == Fraction(sum(numbers[1:]), numbers[0])
        elif "earns" in query:  # rate * hours - spent
            assert _label_of(row) == numbers[0] * numbers[1] - numbers[2]
        elif "cookies" in query:  # cookies / friends
            assert _label_of(row) == Fraction(numbers[0], numbers[1])
        else:
            continue
        checked += 1
    assert checked > 150  # 6 of the 9 templates, about 2/3 of 400 rows


def test_every_template_is_drawn():
    markers = ("pencils", "earns", "cookies", "cyclist", "jacket", "quiz", "Solve for x", "x^2", "lowest terms")
    seen = {marker for row in _rows(300) for marker in markers if marker in row["query"]}
    assert len(TEMPLATES) == len(markers) and seen == set(markers)


@pytest.mark.parametrize("split", ["train", "validation"])
def test_same_seed_same_question_different_seeds_differ(split):
    env = MetaMathQA(split=split)
    questions = [env.reset(seed=seed)[0] for seed in range(20)]
    assert questions == [env.reset(seed=seed)[0] for seed in range(20)]
    assert len(set(questions)) == 20


def test_synthetic_train_and_validation_never_share_a_question():
    questions = {}
    for split in ("train", "validation"):
        env = MetaMathQA(split=split)
        questions[split] = {env.reset(seed=seed)[0] for seed in range(300)}
    assert not questions["train"] & questions["validation"]


def test_local_split_follows_original_question():
    validation = MetaMathQA(source="local", path=str(FIXTURE), split="validation")
    train = MetaMathQA(source="local", path=str(FIXTURE), split="train")
    seen_validation = {validation.reset(seed=seed)[0] for seed in range(20)}
    seen_train = {train.reset(seed=seed)[0] for seed in range(20)}
    # the two Cato rows (a question and its GSM_SV variant) share original_question and both go to validation
    assert len(seen_validation) == 2 and all("Cato" in q for q in seen_validation)
    assert len(seen_train) == 10 and not any("Cato" in q for q in seen_train)


def test_hf_source_reads_the_metamath_schema(monkeypatch):
    calls = []

    def load_dataset(path, split=None):
        calls.append((path, split))
        return list(FIXTURE_ROWS)

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    env = make("metamath", source="hf", split="validation")
    observation, _ = env.reset(seed=0)
    assert calls == [(HF_DATASET, "train")] and "Cato" in observation
    answer = "25" if "value of the unknown variable X" in observation else "16"  # GSM_SV asks for X = 25
    assert env.step(answer)[:4] == (CORRECT, 1.0, True, False)


def test_missing_label_fails_loudly(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"query": "q", "response": "no label", "type": "t", "original_question": "q"}) + "\n")
    env = MetaMathQA(source="local", path=str(path), split=split_of("q"))
    with pytest.raises(ValueError, match="row has no 'The answer is:'"):
        env.reset(seed=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_attempts": 0}, "max_attempts must be an int >= 1"),
        ({"source": "local"}, "source='local' needs path="),
        ({"split": "dev"}, "split must be one of"),
    ],
)
def test_bad_options_fail_loudly(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MetaMathQA(**kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"split": "validation"}, {"source": "local", "path": str(FIXTURE)}])
def test_contract(kwargs):
    env = make("metamath", **kwargs)
    check_env(env)
    assert env.default_action_budget == 5 and env.max_actions_per_turn == 1 and env.multi_turn
    assert env.action_words is None and "3/4" in env.instruction


def test_docstring_examples():
    outcome = doctest.testmod(metamath)
    assert outcome.attempted > 0 and outcome.failed == 0
