"""The examples in the rollout docstrings (and the scripted policy's) run."""

import doctest
import importlib

import pytest

MODULES = [
    "mirl.rollout.parsing",
    "mirl.rollout.prompts",
    "mirl.rollout.generation",
    "mirl.rollout.reasoning_measures",
    "mirl.policy.scripted",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result
