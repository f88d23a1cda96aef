"""DeepCoder: rewards for both test formats, the synthetic generator's own references, HumanEval and the hub schema."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirl.envs import make
from mirl.envs.code.deepcoder import extract_program, judge, syntax_error
from mirl.envs.code.problems import CodeProblem, CodeTest, hf_table, humaneval_problems, humaneval_tests
from mirl.envs.code.sandbox import Limits, SandboxPool
from mirl.envs.code.templates import TEMPLATES
from mirl.envs.data import split_of

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "deepcoder")
LIMITS = Limits(timeout_s=2.0)

# two tests each, so a program right on exactly one of them earns 1/2
FUNCTION = CodeProblem(
    "f", "add", "add", (CodeTest(args=(1, 2), expected_value=3), CodeTest(args=(5, 5), expected_value=10))
)
STDIN = CodeProblem(
    "s", "double", None, (CodeTest(stdin="4\n", expected_stdout="8\n"), CodeTest(stdin="1\n", expected_stdout="2"))
)
PROGRAMS = {  # (problem, program, reward)
    "function correct": (FUNCTION, "def add(a, b):\n    return a + b\n", 1.0),
    "function half": (FUNCTION, "def add(a, b):\n    return 3\n", 0.5),  # right only for (1, 2)
    "function syntax error": (FUNCTION, "def add(a, b)\n    return a + b\n", 0.0),
    "stdin correct": (STDIN, "print(2 * int(input()))\n", 1.0),
    "stdin half": (STDIN, "input()\nprint(8)\n", 0.5),  # right only for 4
    "stdin syntax error": (STDIN, "print(2 * int(input())\n", 0.0),
}


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2, limits=LIMITS) as sandbox:
        yield sandbox


def answer(program: str) -> str:
    return f"I will write it.\n```python\n{program}```\n"


def play(pool: SandboxPool, problem: CodeProblem, program: str):
    env = make("deepcoder")
    env.reset(seed=0)
    env.problem, env.pool = problem, pool
    return env.step(answer(program))


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_reward_is_the_fraction_of_tests_passed(pool, case):
    problem, program, reward = PROGRAMS[case]
    observation, got, terminated, truncated, info = play(pool, problem, program)
    assert (got, terminated, truncated, info["success"]) == (reward, True, False, reward == 1.0)
    assert info["action_valid"] and info["passed"] == int(reward * 2)
    if "syntax" in case:
        assert info["error"].startswith("syntax error: ") and "line 1" in info["error"] and info["tests"] == []
        assert observation.startswith("syntax error")
    else:
        assert [t["stop"] for t in info["tests"]] == ["ok", "ok"] and info["error"] is None


def test_answer_without_a_code_block_is_illegal_and_later_steps_are_inert(pool):
    env = make("deepcoder")
    env.reset(seed=1)
    env.pool = pool
    _, reward, terminated, _, info = env.step("def add(a, b): return a + b")
    assert (reward, terminated, info["action_valid"], info["error"]) == (0.0, True, False, "no code block")
    _, reward, terminated, _, info = env.step(answer("print(1)"))
    assert (reward, terminated, info["action_valid"]) == (0.0, True, False)


def test_program_extraction_and_parse_check():
    assert extract_program("x\n```py\na = 1\n```\n```python\nb = 2\n```") == "a = 1\n"
    assert extract_program("```\nprint(2)\n```") == "print(2)\n"
    assert syntax_error("print(1)\n") is None and syntax_error("(" * 300).startswith("syntax error")


def _reference_passes(pool: SandboxPool, seeds: range) -> set[str]:
    env, formats = make("deepcoder"), set()
    for seed in seeds:
        env.reset(seed=seed)
        outcomes = judge(env.problem.solution, env.problem, pool, LIMITS)
        assert all(o["passed"] for o in outcomes), (seed, env.problem.key, outcomes)
        formats.add(env.problem.test_format)
    return formats


def test_synthetic_references_pass_their_own_tests(pool):
    assert _reference_passes(pool, range(40)) == {"function", "stdin"}


@pytest.mark.slow
def test_synthetic_references_pass_their_own_tests_for_500_seeds(pool):
    assert _reference_passes(pool, range(500)) == {"function", "stdin"}


def test_synthetic_tiers_formats_and_disjoint_splits():
    train, validation = make("deepcoder", num_tests=3), make("deepcoder", split="validation", num_tests=3)
    train_keys = {train.reset(seed=s)[0] and train.problem.key for s in range(150)}
    validation_keys = {validation.reset(seed=s)[0] and validation.problem.key for s in range(150)}
    assert not train_keys & validation_keys
    assert {split_of(k) for k in train_keys} == {"train"} and {split_of(k) for k in validation_keys} == {"validation"}
    hard = make("deepcoder", difficulty="hard", test_format="stdin")
    names = {hard.reset(seed=s)[0] and hard.problem.key.split("|")[0] for s in range(60)}
    assert names <= {t.name for t in TEMPLATES if t.tier == "hard"} and len(names) >= 4
    assert hard.problem.function is None and len(hard.problem.tests) == 6


def test_options_are_checked():
    bad_options = ({"source": "web"}, {"num_tests": 0}, {"timeout_s": 0}, {"difficulty": "expert"}, {"subset": "x"})
    for bad in (*bad_options, {"require_isolation": "yes"}):
        with pytest.raises(ValueError):
            make("deepcoder", **bad)
    with pytest.raises(ValueError, match="evaluation set"):
        make("deepcoder", source="humaneval")


def test_humaneval_asserts_become_tests():
    source = (
        "def check(candidate):\n"
        "    assert candidate([1, 2], 3) == (1, 2)\n"
        "    assert abs(candidate(2.0) - 0.5) < 1e-6\n"
        "    assert not candidate('x')\n"
        "    assert candidate('y')\n"
        "    for x in range(3):\n"
        "        assert candidate(x) == x\n"  # not literal: left out
    )
    tests = humaneval_tests(source)
    assert [(t.args, t.expected_value) for t in tests] == [
        (([1, 2], 3), [1, 2]),
        ((2.0,), 0.5),
        (("x",), False),
        (("y",), True),
    ]


def test_humaneval_is_an_evaluation_set_whose_canonical_solutions_pass(pool):
    problems = humaneval_problems()
    assert 150 <= len(problems) <= 164 and problems[0].key == "HumanEval/0"
    env = make("deepcoder", source="humaneval", split="validation")
    env.reset(seed=0)
    for problem in problems[:8]:
        assert all(o["passed"] for o in judge(problem.solution, problem, pool, LIMITS)), problem.key


@pytest.mark.slow
def test_every_humaneval_canonical_solution_passes(pool):
    for problem in humaneval_problems():
        assert all(o["passed"] for o in judge(problem.solution, problem, pool, LIMITS)), problem.key


SOLUTIONS = {  # fixture problem -> a correct program
    "You are given": "a, b = map(int, input().split())\nprint(a + b)\n",
    "Given an array": (
        "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
        "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return [seen[target - x], i]\n            seen[x] = i\n"
    ),
    "The first line": "input()\nprint(max(map(int, input().split())))\n",
    "Read an integer": "n = int(input())\nprint(n * (n + 1) // 2)\n",
    "Write a function square": "def square(x):\n    return x * x\n",
    "Print the product": "a, b = map(int, input().split())\nprint(a * b)\n",
    "Write double": "def double(n):\n    return 2 * n\n",
}


@pytest.mark.parametrize(
    ("subset", "split"),
    [("lcbv5", "train"), ("primeintellect", "train"), ("taco", "train"), ("primeintellect", "validation")],
)
def test_hub_schema_rows_are_read_and_judged(pool, subset, split):
    env = make("deepcoder", source="hf", path=FIXTURE, subset=subset, split=split)
    env.pool = pool
    seen = set()
    for seed in range(6):
        observation, _ = env.reset(seed=seed)
        program = next(code for start, code in SOLUTIONS.items() if observation.startswith(start))
        _, reward, _, _, info = env.step(answer(program))
        assert reward == 1.0, (observation, info)
        seen.add(env.problem.test_format)
    expected = {"validation": {"stdin"}, "train": {"stdin", "function"}}[split]
    assert seen == expected  # the unreadable lcbv5 row is skipped
    if split == "validation":
        assert env.subset == "lcbv5" and "largest" in observation  # validated on lcbv5's test split


def test_hub_rows_need_the_datasets_files():
    with pytest.raises(FileNotFoundError, match="codeforces/test.jsonl"):
        hf_table(FIXTURE, "codeforces", "test")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.text(max_size=80), seed=st.integers(0, 2**32 - 1))
def test_any_fenced_text_is_judged_without_raising(pool, body, seed):
    # the registry-wide fuzz test (test_fuzz.py) rarely writes a fence; here every answer is run in the sandbox
    env = make("deepcoder", num_tests=2)
    env.reset(seed=seed)
    env.pool = pool
    observation, reward, terminated, truncated, info = env.step(answer(body + "\n"))
    assert observation == env.render() and 0.0 <= reward <= 1.0 and terminated and not truncated
    assert info["action_valid"] and len(info["tests"]) in (0, 2) and (info["error"] is None) == bool(info["tests"])
