"""Fixtures of every test: BM25 indices of the search envs go to a per-session temporary cache."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_index_cache(tmp_path_factory):
    """``MIRL_CACHE`` points at a temporary directory for the session, never at the user's cache."""
    previous = os.environ.get("MIRL_CACHE")
    os.environ["MIRL_CACHE"] = str(tmp_path_factory.mktemp("mirl-cache"))
    yield
    if previous is None:
        os.environ.pop("MIRL_CACHE", None)
    else:
        os.environ["MIRL_CACHE"] = previous
