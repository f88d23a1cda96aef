"""mirl.envs.math.arith: exact values by hand, hostile inputs, limits, parity with direct Fraction arithmetic."""

import ast
import builtins
import doctest
import pathlib
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mirl.envs.math.arith as arith
from mirl.envs.math.arith import ArithResult, Limits, evaluate


@pytest.mark.parametrize(
    ("text", "value", "numbers"),
    [
        ("(3 + 5) * 2", Fraction(16), (3, 5, 2)),  # 8 * 2
        ("3 + 5 * 2", Fraction(13), (3, 5, 2)),  # * binds tighter: 3 + 10
        ("10 - 4 - 3", Fraction(3), (10, 4, 3)),  # left to right: (10 - 4) - 3, not 10 - (4 - 3) = 9
        ("8 / 3 / 2", Fraction(4, 3), (8, 3, 2)),  # (8/3) / 2 = 8/6 = 4/3
        ("7 / 2 - 1", Fraction(5, 2), (7, 2, 1)),  # 7/2 - 2/2
        ("1 / 3 * 3", Fraction(1), (1, 3, 3)),  # exact: (1/3) * 3 = 1, no float rounding
        ("2 * 3 + 4 * 5", Fraction(26), (2, 3, 4, 5)),  # 6 + 20
        ("-3 + 5", Fraction(2), (3, 5)),  # unary minus on a literal
        ("-(2 - 7)", Fraction(5), (2, 7)),  # -(-5)
        ("--4", Fraction(4), (4,)),
        ("6 * -2", Fraction(-12), (6, 2)),
        ("  12\t", Fraction(12), (12,)),
        ("(((44)) + 19 + 35)", Fraction(98), (44, 19, 35)),
        ("(96 - 6) / (17 - 2)", Fraction(6), (96, 6, 17, 2)),  # 90 / 15
        ("1 / 7 + 1 / 7", Fraction(2, 7), (1, 7, 1, 7)),
        ("05 + 1", Fraction(6), (5, 1)),  # a leading zero reads as the same integer
    ],
)
def test_hand_checked_values(text, value, numbers):
    result = evaluate(text)
    assert result == ArithResult(value, numbers)
    assert type(result.value) is Fraction and result.ok


HOSTILE = [
    "__import__('os')",
    "__import__('os').system('echo hacked')",
    "().__class__.__bases__[0].__subclasses__()",
    "(1).__class__",
    "os.system('ls')",
    "print(1)",
    "abs(-3)",
    "x + 1",
    "2 ** 3",
    "10**10**10",
    "9**9**9**9",
    "1e999",
    "1.5 + 2",
    ".5",
    "4 / 0",
    "4 / (2 - 2)",
    "0 / 0",
    "(" * 1000 + "1" + ")" * 1000,
    "(" * 40 + "1" + ")" * 40,
    "-" * 100 + "1",
    "1+" * 5000 + "1",
    "9" * 50,
    "999999 * 999999 * 999999",  # (10**6 - 1)**3 > 10**12 = Limits.max_abs
    "'1' + '2'",
    "[1, 2]",
    "{1: 2}",
    "lambda: 1",
    "1 if 1 else 2",
    "3 % 2",
    "7 // 2",
    "1 = 1",
    "44 + 19 + 35 = 98",
    "",
    "   ",
    "()",
    "(1",
    "1)",
    "1 2",
    "+1",
    "1 +",
    "²",
    "١٢",  # Arabic-Indic digits: int() would accept them, the grammar does not
    "1\x00",
    "True + 1",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_inputs_are_invalid_without_running_anything(text, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the evaluator must not call eval/exec/compile/__import__")

    for name in ("eval", "exec", "compile", "__import__"):
        monkeypatch.setattr(builtins, name, forbidden)
    result = evaluate(text)
    monkeypatch.undo()
    assert result.value is None and not result.ok
    assert isinstance(result.error, str) and result.error


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4 / (2 - 2)", "division by zero"),
        ("2 ** 3", "unexpected '*'"),
        ("1e999", "unexpected character 'e' at position 1"),
        ("1234567", "number with more than 6 digits at position 0"),
        ("", "empty expression"),
        ("(1", "missing closing parenthesis"),
        ("1 2", "unexpected '2' after a complete expression"),
    ],
)
def test_error_messages(text, message):
    assert evaluate(text).error == message


def test_no_dynamic_execution_in_the_source():
    tree = ast.parse(pathlib.Path(arith.__file__).read_text())
    imported = {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names
    }
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not ({"ast", "builtins", "importlib"} & (imported | modules))
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not (calls & {"eval", "exec", "compile", "__import__", "getattr"})


def test_depth_limit_counts_parentheses_and_minus_signs():
    limits = Limits(max_depth=3)
    assert evaluate("(((1)))", limits).value == 1  # innermost literal at depth 3
    assert evaluate("((((1))))", limits).error == "nesting deeper than 3"
    assert evaluate("---1", limits).value == -1
    assert evaluate("----1", limits).error == "nesting deeper than 3"
    assert evaluate("(" * 32 + "7" + ")" * 32).value == 7  # default max_depth = 32
    assert not evaluate("(" * 33 + "7" + ")" * 33).ok


def test_length_digit_and_magnitude_limits():
    assert evaluate("1+2+3+4+5", Limits(max_length=9)).value == 15
    assert evaluate("1+2+3+4+56", Limits(max_length=9)).error == "expression longer than 9 characters"
    assert evaluate("123456").value == 123456
    assert not evaluate("1234567").ok
    assert evaluate("999999 * 999999").value == 999998000001  # (10**6 - 1)**2 = 10**12 - 2*10**6 + 1 <= 10**12
    assert evaluate("1 / 999999 / 999999").value == Fraction(1, 999998000001)
    assert "magnitude" in evaluate("1 / 999999 / 999999 / 2").error  # denominator 1999996000002 > 10**12


def test_non_string_is_a_type_error():
    with pytest.raises(TypeError, match="expects the answer text as str"):
        evaluate(42)


def _tree(leaves):
    return st.recursive(leaves, lambda sub: st.tuples(sub, st.sampled_from("+-*/"), sub), max_leaves=6)


def _render(node):
    if isinstance(node, int):
        return str(node)
    left, op, right = node
    return f"({_render(left)} {op} {_render(right)})"


def _direct(node):
    """The slow obvious path: Python's own Fraction arithmetic on the tree, None on division by zero."""
    if isinstance(node, int):
        return Fraction(node)
    left, right = _direct(node[0]), _direct(node[2])
    if left is None or right is None or (node[1] == "/" and right == 0):
        return None
    return {"+": left + right, "-": left - right, "*": left * right, "/": left / right if right else None}[node[1]]


@settings(max_examples=300, deadline=None)
@given(_tree(st.integers(0, 30)))  # 30**6 * 32 terms < 10**12: no magnitude errors
def test_parity_with_direct_fraction_arithmetic(tree):
    expected = _direct(tree)
    result = evaluate(_render(tree))
    if expected is None:
        assert result.error == "division by zero"
    else:
        assert result.value == expected


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_any_text_gives_a_result_without_raising(text):
    result = evaluate(text)
    assert (result.value is None) == (result.error is not None)
    assert result.value is None or type(result.value) is Fraction


def test_docstring_examples():
    outcome = doctest.testmod(arith)
    assert outcome.attempted > 0 and outcome.failed == 0
