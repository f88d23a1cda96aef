"""The numbers in the docstrings are checked: every example in mirl.algorithms runs."""

import doctest
import importlib

import pytest

MODULES = [
    "_table",
    "masked",
    "advantages",
    "credit",
    "aggregation",
    "losses",
    "logits",
    "presets",
    "rollout_correction",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"mirl.algorithms.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result
