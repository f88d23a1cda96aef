"""Which env instances an iteration trains and validates on.

Instance seeds are a documented function of (run seed, iteration, prompt index), so a resumed run draws exactly
the instances the uninterrupted run would have drawn, and training and validation never share a seed:

    train_seed(s, i, p) = 2 * ((s * 1_000_003 + i) * 4096 + p)        (even)
    validation_seed(j)  = 2 * j + 1                                     (odd), j = 0 .. num_instances - 1

Dataset-backed envs that take a ``split`` option additionally get ``split="train"`` / ``"validation"`` so that
their rows are disjoint too.
"""

from __future__ import annotations

import inspect

from mirl.config import Config, EnvEntry
from mirl.types import EnvSpec

MAX_PROMPTS_PER_ITERATION = 4096


def train_seed(run_seed: int, iteration: int, prompt_index: int) -> int:
    if not 0 <= prompt_index < MAX_PROMPTS_PER_ITERATION:
        raise ValueError(f"prompt index must be in [0, {MAX_PROMPTS_PER_ITERATION}), got {prompt_index}")
    return 2 * ((run_seed * 1_000_003 + iteration) * MAX_PROMPTS_PER_ITERATION + prompt_index)


def validation_seed(index: int) -> int:
    return 2 * index + 1


def allocate(total: int, weights: list[float]) -> list[int]:
    """Split ``total`` slots by ``weights`` with the largest-remainder rule (ties to the earlier entry).

    >>> allocate(8, [1.0, 1.0, 2.0])
    [2, 2, 4]
    >>> allocate(5, [1.0, 1.0])
    [3, 2]
    """
    exact = [total * w / sum(weights) for w in weights]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _options(entry: EnvEntry, split: str) -> dict:
    from mirl.envs import registry

    options = dict(entry.options)
    if "split" in inspect.signature(registry[entry.name].__init__).parameters:
        options.setdefault("split", split)
    return options


def train_specs(config: Config, iteration: int, first_index: int = 0, count: int | None = None) -> list[EnvSpec]:
    """The P (or ``count``) prompt groups of an iteration, envs mixed by weight in a fixed order."""
    count = config.rollout.prompts_per_iteration if count is None else count
    per_env = allocate(count, [entry.weight for entry in config.envs])
    specs, index = [], first_index
    for entry, n in zip(config.envs, per_env, strict=True):
        options = _options(entry, "train")
        for _ in range(n):
            specs.append(EnvSpec(entry.name, train_seed(config.trainer.seed, iteration, index), options))
            index += 1
    return specs


def validation_specs(config: Config) -> list[EnvSpec]:
    """``validation.num_instances`` fixed instances per env, identical at every validation."""
    return [
        EnvSpec(entry.name, validation_seed(j), _options(entry, "validation"))
        for entry in config.envs
        for j in range(config.validation.num_instances)
    ]
