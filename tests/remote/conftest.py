"""The tokenizer of the remote-env tests: the tiny in-process one."""

import pytest

from mirl.policy.tiny import tiny_tokenizer


@pytest.fixture(scope="session")
def tok():
    return tiny_tokenizer()
