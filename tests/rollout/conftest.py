"""Shared fixtures for the rollout tests."""

import os

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


@pytest.fixture(scope="session", autouse=True)
def _private_index_cache(tmp_path_factory):
    """BM25 indices of the search envs go to a per-session temporary cache, never into the user's cache."""
    previous = os.environ.get("MIRL_CACHE")
    os.environ["MIRL_CACHE"] = str(tmp_path_factory.mktemp("mirl-cache"))
    yield
    if previous is None:
        os.environ.pop("MIRL_CACHE", None)
    else:
        os.environ["MIRL_CACHE"] = previous
