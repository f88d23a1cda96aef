"""Shared fixtures for the rollout tests."""

import pytest

from mirl.envs.registry import _REGISTRY
from mirl.policy.tiny import tiny_tokenizer

from .helpers import Corridor


@pytest.fixture
def corridor(monkeypatch):
    """Register :class:`Corridor` as "corridor" for one test (the registry is restored afterwards)."""
    monkeypatch.setitem(_REGISTRY, "corridor", Corridor)
    Corridor.name = "corridor"
    return Corridor


@pytest.fixture(scope="session")
def tok():
    return tiny_tokenizer()
