"""The family layout keeps every import path of the flat one: old module names are the same module objects."""

import importlib

import pytest

import mirl.envs
from mirl.envs import FLAT_NAMES

# every module of mirl.envs before the family layout (grid was a module, now a package re-exporting it)
FLAT_MODULES = sorted(FLAT_NAMES) + ["base", "checker", "commands", "data", "grid", "registry"]


@pytest.mark.parametrize("flat", FLAT_MODULES)
def test_flat_module_paths_import(flat):
    module = importlib.import_module(f"mirl.envs.{flat}")
    assert module.__file__.endswith(".py")
    if flat in FLAT_NAMES:  # (mirl.envs.registry the attribute is the registry mapping, as before)
        assert getattr(mirl.envs, flat) is module
        assert module is importlib.import_module(f"mirl.envs.{FLAT_NAMES[flat]}")
        assert module.__name__ == f"mirl.envs.{FLAT_NAMES[flat]}"


def test_flat_names_import_the_same_objects():
    from mirl.envs.code_problems import CodeProblem
    from mirl.envs.sandbox import SandboxPool
    from mirl.envs.sokoban import SokobanEnv
    from mirl.envs.webshop_data import load_webshop

    from mirl.envs.grid import MOVES, check_no_options, render_board
    from mirl.envs.grid.board import MOVES as board_moves

    assert MOVES is board_moves and callable(check_no_options) and callable(render_board)
    assert SandboxPool is importlib.import_module("mirl.envs.code.sandbox").SandboxPool
    assert SokobanEnv is mirl.envs.registry["sokoban"]
    assert CodeProblem.__module__ == "mirl.envs.code.problems"
    assert load_webshop.__module__ == "mirl.envs.shop.data"


def test_a_patch_through_the_flat_name_reaches_the_family_module(monkeypatch):
    family = importlib.import_module("mirl.envs.search.retrieval")
    monkeypatch.setattr("mirl.envs.retrieval.MARKER_FOR_TEST", 1, raising=False)
    assert family.MARKER_FOR_TEST == 1
