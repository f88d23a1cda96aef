"""Progress of a rollout in episode turns, fine enough to show that a long generate call is moving.

``progress(done, total)`` counts episode turns: each round of E episodes over at most T turns adds E x T to the
total. A reply ticks when its episode finishes it (per reply with a backend that reports it through
:func:`mirl.policy.base.replies_finished`, else per ``generate`` call), and after turn t of a round the count is
(t + 1) x E on top of the earlier rounds: an episode that already ended counts its skipped turns, so every round
ends exactly at its share of the total.
"""

from __future__ import annotations

from collections.abc import Callable

from mirl.policy.base import replies_listened
from mirl.rollout import run_episodes
from mirl.rollout.failures import check_not_all_failed
from mirl.types import Episode

Progress = Callable[[int, int], None]


class EpisodeTurns:
    """The counter of one round; ``before`` = turns of earlier rounds, ``total`` = the bar's total so far.

    >>> calls = []
    >>> counter = EpisodeTurns(lambda done, total: calls.append(done), episodes=4, turns=2)
    >>> counter.replied(1); counter.replied(2); counter.turned(0, 3, 4); counter.replied(3); counter.finish()
    >>> calls  # 3 replies heard in turn 0 (4 after it), 3 in turn 1, the last turn
    [0, 1, 3, 4, 7, 8]
    """

    def __init__(self, progress: Progress | None, episodes: int, turns: int, before: int = 0) -> None:
        self.progress, self.episodes, self.turns, self.before = progress, episodes, turns, before
        self.turns_done, self.in_turn = 0, 0
        self._report()

    @property
    def total(self) -> int:
        return self.before + self.episodes * self.turns

    def replied(self, count: int) -> None:
        self.in_turn = min(self.in_turn + count, self.episodes)
        self._report()

    def turned(self, turn: int, active: int, episodes: int) -> None:
        self.turns_done, self.in_turn = turn + 1, 0
        self._report()

    def finish(self) -> None:
        self.turns_done, self.in_turn = self.turns, 0
        self._report()

    def _report(self) -> None:
        if self.progress is not None:
            done = self.before + min(self.turns_done * self.episodes + self.in_turn, self.episodes * self.turns)
            self.progress(done, self.total)


def play_counted(
    policy, specs, group_size: int, rollout, sampling_seed: int, counter: EpisodeTurns, what: str = "a rollout"
) -> list[Episode]:
    """``run_episodes`` with ``counter`` hearing every reply and turn, and finished at the end; a batch whose every
    episode ended by the same infrastructure failure is an error naming it (:mod:`mirl.rollout.failures`)."""
    with replies_listened(counter.replied):
        episodes = run_episodes(
            policy, specs, group_size, rollout, sampling_seed=sampling_seed, progress=counter.turned
        )
    counter.finish()
    check_not_all_failed(episodes, what)
    return episodes
