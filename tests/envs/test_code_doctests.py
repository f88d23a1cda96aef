"""The examples in the docstrings of the code-execution modules run."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["mirl.envs.code.sandbox", "mirl.envs.code.deepcoder", "mirl.cli.envs"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result
