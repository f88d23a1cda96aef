"""Validation on fixed instances whose seeds never occur in training (see :mod:`mirl.trainer.specs`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mirl.config import Config
from mirl.rollout.failures import infrastructure_share, malformed_share
from mirl.trainer.episode_progress import EpisodeTurns, play_counted
from mirl.trainer.specs import validation_specs
from mirl.types import Episode

VALIDATION_SAMPLING_SEED = 7_777_777  # identical samples at every validation of every run with the same weights


def validate(policy, config: Config, progress: Callable[[int, int], None] | None = None) -> dict[str, float]:
    """success, return, pass@K and action validity, overall and per env (``val/*`` keys).

    ``progress(done, total)``, if given, counts episode turns (:mod:`mirl.trainer.episode_progress`): total =
    episodes x ``rollout.max_turns``, from ``(0, total)`` to ``(total, total)``. The wording bonus is a training
    reward only: validation plays without it, so ``val/return`` is the task's return.
    """
    K = config.validation.group_size
    rollout = dataclasses.replace(
        config.rollout, temperature=config.validation.temperature, wording_bonus=0.0, wording_bonus_ramp=0
    )
    specs = validation_specs(config)
    counter = EpisodeTurns(progress, len(specs) * K, rollout.max_turns)
    episodes = play_counted(policy, specs, K, rollout, VALIDATION_SAMPLING_SEED, counter, "validation")
    metrics = _summary(episodes, K, "") | {
        "val/infra_failed_frac": infrastructure_share(e.end_reason for e in episodes),
        "val/env_malformed_frac": malformed_share(e.end_reason for e in episodes),
    }
    for env in sorted({spec.env for spec in specs}):
        metrics |= _summary([e for e in episodes if e.spec.env == env], K, f"/{env}")
    return metrics


def _summary(episodes: list[Episode], K: int, suffix: str) -> dict[str, float]:
    groups: dict[int, list[Episode]] = {}
    for episode in episodes:
        groups.setdefault(episode.group, []).append(episode)
    turns = [turn for e in episodes for turn in e.turns]
    return {
        f"val/success{suffix}": sum(e.success for e in episodes) / len(episodes),
        f"val/return{suffix}": sum(e.total_reward for e in episodes) / len(episodes),
        f"val/pass@{K}{suffix}": sum(any(e.success for e in g) for g in groups.values()) / len(groups),
        f"val/action_valid_frac{suffix}": sum(t.actions_valid for t in turns) / max(1, len(turns)),
    }
