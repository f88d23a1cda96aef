"""Text environments with a Gymnasium-style contract (see :mod:`mirl.envs.base`), their registry and checker.

Importing this package registers every built-in environment: ``sokoban``, ``frozenlake``, ``bandit``,
``countdown``, ``metamath``, ``deepcoder`` (code, run in :mod:`mirl.envs.sandbox`), ``searchqa`` (retrieval,
:mod:`mirl.envs.searchqa`) and ``webshop``.

>>> from mirl.envs import make, registry
>>> env = make("frozenlake", success_rate=1.0)
>>> observation, info = env.reset(seed=0)
>>> "frozenlake" in registry
True
"""

from mirl.envs import (  # noqa: F401  (registration side effect)
    bandit,
    countdown,
    deepcoder,
    frozenlake,
    metamath,
    searchqa,
    sokoban,
    webshop,
)
from mirl.envs.base import TextEnv
from mirl.envs.checker import ContractError, check_env
from mirl.envs.registry import env_options, make, register, registry

__all__ = ["ContractError", "TextEnv", "check_env", "env_options", "make", "register", "registry"]
