"""Validation on fixed instances whose seeds never occur in training (see :mod:`mirl.trainer.specs`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mirl.config import Config
from mirl.policy.base import replies_listened
from mirl.rollout import run_episodes
from mirl.trainer.specs import validation_specs
from mirl.types import Episode

VALIDATION_SAMPLING_SEED = 7_777_777  # identical samples at every validation of every run with the same weights


def validate(policy, config: Config, progress: Callable[[int, int], None] | None = None) -> dict[str, float]:
    """success, return, pass@K and action validity, overall and per env (``val/*`` keys).

    ``progress(done, total)``, if given, counts episode turns: total = episodes x ``rollout.max_turns``; each
    reply ticks as its episode finishes it (per reply with backends that report it, else per generate call), and
    after turn t the count is (t + 1) x episodes (an episode that already ended counts its skipped turns). It
    starts at ``(0, total)`` and ends at ``(total, total)``.
    """
    K = config.validation.group_size
    rollout = dataclasses.replace(config.rollout, temperature=config.validation.temperature)
    specs = validation_specs(config)
    counter = _TurnCounter(progress, len(specs) * K, rollout.max_turns)
    with replies_listened(counter.replied):
        episodes = run_episodes(
            policy, specs, K, rollout, sampling_seed=VALIDATION_SAMPLING_SEED, progress=counter.turned
        )
    counter.finish()
    metrics = _summary(episodes, K, "")
    for env in sorted({spec.env for spec in specs}):
        metrics |= _summary([e for e in episodes if e.spec.env == env], K, f"/{env}")
    return metrics


class _TurnCounter:
    """Episode turns done, for ``validate``'s progress: replies heard in the current turn on top of whole turns.

    >>> calls = []
    >>> counter = _TurnCounter(lambda done, total: calls.append(done), episodes=4, turns=2)
    >>> counter.replied(1); counter.replied(2); counter.turned(0, 3, 4); counter.replied(3); counter.finish()
    >>> calls  # 3 replies heard in turn 0 (4 after it), 3 in turn 1, the last turn
    [0, 1, 3, 4, 7, 8]
    """

    def __init__(self, progress: Callable[[int, int], None] | None, episodes: int, turns: int) -> None:
        self.progress, self.episodes, self.total = progress, episodes, episodes * turns
        self.turns_done, self.in_turn = 0, 0
        self._report()

    def replied(self, count: int) -> None:
        self.in_turn = min(self.in_turn + count, self.episodes)
        self._report()

    def turned(self, turn: int, active: int, episodes: int) -> None:
        self.turns_done, self.in_turn = turn + 1, 0
        self._report()

    def finish(self) -> None:
        self.turns_done, self.in_turn = self.total // max(1, self.episodes), 0
        self._report()

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(min(self.turns_done * self.episodes + self.in_turn, self.total), self.total)


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
