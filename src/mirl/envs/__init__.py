"""Environments with a Gymnasium-style contract (see :mod:`mirl.envs.base`), their registry and checker.

The environments live with their family: ``grid/`` (``sokoban``, ``frozenlake``), ``toy/`` (``bandit``), ``math/``
(``countdown``, ``metamath``), ``code/`` (``deepcoder`` and the sandbox that runs its programs), ``search/``
(``searchqa`` and its retrievers), ``shop/`` (``webshop``), ``puzzles/`` (``sudoku``, ``game2048``,
``rubiks2x2`` and their exact solvers) and ``remote/`` (``openenv``, the client of envs served over OpenEnv, and the
server behind ``mirl serve-env``). The contract, the registry, the checker and the
helpers several families share (data sources, text commands) sit here. Importing this package registers every
built-in environment.

The modules kept their earlier flat names as aliases (``mirl.envs.sokoban`` is ``mirl.envs.grid.sokoban``, the
same module object), so code written against the flat layout keeps working.

>>> from mirl.envs import make, registry
>>> env = make("frozenlake", success_rate=1.0)
>>> observation, info = env.reset(seed=0)
>>> "frozenlake" in registry
True
"""

import importlib as _importlib
import sys as _sys

from mirl.envs.base import TextEnv
from mirl.envs.checker import ContractError, check_env
from mirl.envs.code import deepcoder  # noqa: F401  (registration side effect)
from mirl.envs.grid import frozenlake, sokoban  # noqa: F401
from mirl.envs.lab import keysum  # noqa: F401
from mirl.envs.math import countdown, metamath  # noqa: F401
from mirl.envs.puzzles import game2048, rubiks, sudoku  # noqa: F401
from mirl.envs.registry import env_options, make, register, registry
from mirl.envs.remote import openenv  # noqa: F401  (the client of remote envs)
from mirl.envs.search import searchqa  # noqa: F401
from mirl.envs.shop import webshop  # noqa: F401
from mirl.envs.toy import bandit  # noqa: F401

# flat module name -> its module in the family layout
FLAT_NAMES = {
    "arith": "math.arith",
    "bandit": "toy.bandit",
    "catalogue": "shop.catalogue",
    "code_problems": "code.problems",
    "code_templates": "code.templates",
    "countdown": "math.countdown",
    "deepcoder": "code.deepcoder",
    "frozenlake": "grid.frozenlake",
    "knowledge": "search.knowledge",
    "metamath": "math.metamath",
    "retrieval": "search.retrieval",
    "sandbox": "code.sandbox",
    "sandbox_worker": "code.sandbox_worker",
    "searchqa": "search.searchqa",
    "shop_reward": "shop.reward",
    "sokoban": "grid.sokoban",
    "solvers": "grid.solvers",
    "webshop": "shop.webshop",
    "webshop_data": "shop.data",
}
for _flat, _family in FLAT_NAMES.items():
    _module = _importlib.import_module(f"{__name__}.{_family}")
    _sys.modules.setdefault(f"{__name__}.{_flat}", _module)
    globals().setdefault(_flat, _module)

__all__ = ["ContractError", "TextEnv", "check_env", "env_options", "make", "register", "registry"]
