"""The examples in the policy docstrings run."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["packing", "sampling", "shared_prompts", "tiny", "tiny_vl", "vision_inputs", "vllm"])
def test_docstring_examples(name):
    module = importlib.import_module(f"mirl.policy.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result
