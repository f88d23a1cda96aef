"""Text environments with a Gymnasium-style contract (see :mod:`mirl.envs.base`), their registry and checker.

Importing this package registers every built-in environment: ``sokoban``, ``frozenlake``, ``bandit``,
``countdown`` and ``metamath``; and ``searchqa`` (retrieval, :mod:`mirl.envs.searchqa`).

>>> from mirl.envs import make, registry
>>> env = make("frozenlake", success_rate=1.0)
>>> observation, info = env.reset(seed=0)
>>> "frozenlake" in registry
True
"""

from mirl.envs import bandit, countdown, frozenlake, metamath, searchqa, sokoban, webshop  # noqa: F401  (registration)
from mirl.envs.base import TextEnv
from mirl.envs.checker import ContractError, check_env
from mirl.envs.registry import env_options, make, register, registry

__all__ = ["ContractError", "TextEnv", "check_env", "env_options", "make", "register", "registry"]
