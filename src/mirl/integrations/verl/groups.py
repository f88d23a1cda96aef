"""SNR-Aware Filtering of one veRL step's finished sessions: rows in, kept row keys and the native metrics out.

veRL stores each finished session under the key ``{uid}_{session}_{index}`` (one prompt ``uid``, ``rollout.n``
sessions); :class:`MirlAgentLoop` writes one output per session (index 0). :func:`select_rows` groups the rows by
``uid`` (groups in order of first appearance, sessions by number), rebuilds each row's
:class:`~mirl.types.Episode` from its ids and ``extra_fields["mirl"]``, and then runs the native trainer's own
stages on them, so veRL and ``mirl train`` select and report identically:

- ``returns`` (P, K) = each row's reward (the sum of veRL's ``rm_scores``, i.e. the episode return);
- ``mirl.trainer.stages.select(returns, config)``: ``select_groups`` with the ``filter`` block, plus
  trajectory-level control when ``filter.trajectories_per_group > 0``;
- the metrics: ``rollout/*`` (``stages.rollout_metrics``), ``filter/*`` (the selection's metrics and the
  too easy / too hard / too coarse counts of ``mirl.diagnostics.groups``), ``filter/kept_trajectories``, and the
  same selection under the upstream proposal's names, ``reward_variance_filtering/*``
  (:func:`mirl.filtering.upstream_metrics`).

One row per trajectory. The score of a trajectory is its episode return, once: :class:`MirlAgentLoop` writes one
output per session (index 0) holding the whole episode, turn after turn, and its ``rm_scores`` sum to the return.
A session fanned out into one row per turn (keys ``{uid}_{session}_1``, ...; SkyRL's step-wise mode, where the
review of PR #2217 found every turn's reward entering the group's variance) is refused with an error rather than
scored per row; the native trainer's per-turn rows are filtered by trajectory (``mirl.trainer.stages``).

Groups with fewer sessions than the largest group (a failed session) cannot enter a (P, K) selection; they are
dropped and listed in ``incomplete``. Nothing is duplicated: every input key is either kept or dropped, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from mirl.config import Config
from mirl.diagnostics.groups import label_counts, label_groups
from mirl.filtering import upstream_metrics
from mirl.integrations.verl.episode import episode_from_fields
from mirl.types import Episode


@dataclass(frozen=True)
class Row:
    """One finished session as stored by veRL."""

    key: str  # "{uid}_{session}_{index}"
    reward: float  # sum of rm_scores: the episode return
    record: dict  # extra_fields["mirl"]
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]

    @property
    def uid(self) -> str:
        return self.key.split("_")[0]

    @property
    def session(self) -> int:
        parts = self.key.split("_")
        if len(parts) != 3 or parts[2] != "0":
            raise ValueError(
                f"row {self.key!r} is not a whole trajectory (veRL key '{{uid}}_{{session}}_0'): the filter scores "
                "each trajectory once by its return, so a session fanned out into one row per turn cannot be "
                "filtered; set actor_rollout_ref.rollout.agent.default_agent_loop=mirl (one row per episode)"
            )
        return int(parts[1])


@dataclass(frozen=True)
class StepSelection:
    """What one step keeps (``keep_keys``, in input order), drops, and logs."""

    keep_keys: tuple[str, ...]
    drop_keys: tuple[str, ...]
    uids: tuple[str, ...]  # (P,) the complete groups, in order
    returns: torch.Tensor  # (P, K)
    episodes: list[Episode]  # (P * K,) ordered by (group, session)
    metrics: dict[str, float] = field(default_factory=dict)
    incomplete: tuple[str, ...] = ()  # uids dropped for a missing session

    @property
    def empty(self) -> bool:
        return not self.keep_keys


def group_rows(rows: Sequence[Row]) -> tuple[dict[str, list[Row]], tuple[str, ...]]:
    """Complete groups (uid -> rows by session) and the uids of incomplete ones."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.uid, []).append(row)
    size = max((len(members) for members in groups.values()), default=0)
    incomplete = tuple(uid for uid, members in groups.items() if len(members) != size)
    complete = {
        uid: sorted(members, key=lambda r: r.session) for uid, members in groups.items() if uid not in incomplete
    }
    return complete, incomplete


def select_rows(rows: Sequence[Row], config: Config) -> StepSelection:
    """Group, rebuild the episodes, select with the native stages, and compute the native metrics."""
    from mirl.trainer import stages  # the native trainer's selection and rollout metrics, shared on purpose

    groups, incomplete = group_rows(rows)
    uids = tuple(groups)
    episodes = [
        episode_from_fields(r.prompt_ids, r.response_ids, r.record, group=p, sample=k)
        for p, uid in enumerate(uids)
        for k, r in enumerate(groups[uid])
    ]
    if not uids:
        raise ValueError("no complete group to select from; every group lost a session (see the agent loop errors)")
    returns = torch.tensor([[r.reward for r in groups[uid]] for uid in uids], dtype=torch.float64)  # (P, K)
    selection, keep = stages.select(returns, config)  # keep: (P, K) bool
    labels = label_groups(episodes, returns, success_threshold=config.filter.success_threshold)
    metrics = stages.rollout_metrics(episodes, config.rollout.wording_regex)
    metrics |= {f"filter/{k}": v for k, v in (selection.metrics | label_counts(labels)).items()}
    kept = {groups[uid][k].key for p, uid in enumerate(uids) for k in range(returns.shape[1]) if keep[p, k]}
    metrics["filter/kept_trajectories"] = float(len(kept))
    metrics |= upstream_metrics(returns, selection.keep, config.filter.ddof)
    return StepSelection(
        keep_keys=tuple(r.key for r in rows if r.key in kept),
        drop_keys=tuple(r.key for r in rows if r.key not in kept),
        uids=uids,
        returns=returns,
        episodes=episodes,
        metrics=metrics,
        incomplete=incomplete,
    )
