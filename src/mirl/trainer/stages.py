"""The stages of one iteration, each a small function the loop calls in order (DESIGN.md data flow)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import torch

from mirl.algorithms import AlgorithmPreset, gae_advantages, grpo_advantages, masked_mean, masked_var, whiten
from mirl.config import Config, FilterConfig
from mirl.filtering import Selection, has_spread, select_groups, select_trajectories
from mirl.filtering.metrics import selection_metrics
from mirl.rollout import collate
from mirl.rollout.failures import infrastructure_share, malformed_share
from mirl.rollout.reasoning_measures import reasoning_metrics, wording_bonus_frac
from mirl.trainer.episode_progress import EpisodeTurns, play_counted
from mirl.trainer.specs import train_specs
from mirl.types import Episode, RolloutBatch


def group_returns(episodes: list[Episode], num_groups: int, group_size: int) -> torch.Tensor:
    """(P, K) float64 episode returns, row p = group p, column k = sample k."""
    returns = torch.zeros(num_groups, group_size, dtype=torch.float64)
    for episode in episodes:
        returns[episode.group, episode.sample] = episode.total_reward
    return returns


def _regroup(episodes: list[Episode], group: int) -> list[Episode]:
    return [dataclasses.replace(e, group=group) for e in episodes]


def collect(
    policy, config: Config, iteration: int, sampling_seed: int, progress: Callable[[int, int], None] | None = None
) -> tuple[list[Episode], int]:
    """P groups of K episodes. With dynamic sampling, zero-spread groups are dropped and refilled with fresh
    prompts for up to ``dynamic_sampling_max_rounds`` extra rounds; returns the episodes and rounds used.

    ``progress(done, total)``, if given, counts episode turns (:mod:`mirl.trainer.episode_progress`): the first
    round's P x K x T from ``(0, P K T)``; each refill round adds P K T to the total.
    """
    P, K, T = config.rollout.prompts_per_iteration, config.rollout.group_size, config.rollout.max_turns
    rollout = iteration_rollout(config.rollout, iteration)
    specs = train_specs(config, iteration)
    counter = EpisodeTurns(progress, P * K, T)
    episodes = play_counted(policy, specs, K, rollout, sampling_seed, counter, f"iteration {iteration}'s rollout")
    if not config.algorithm.dynamic_sampling:
        return episodes, 0
    groups = [[e for e in episodes if e.group == p] for p in range(P)]
    kept = [g for g in groups if _spread(g)]
    rounds = 0
    while len(kept) < P and rounds < config.algorithm.dynamic_sampling_max_rounds:
        rounds += 1
        specs = train_specs(config, iteration, first_index=P * rounds)
        counter = EpisodeTurns(progress, P * K, T, before=P * K * T * rounds)
        fresh = play_counted(policy, specs, K, rollout, sampling_seed + 7919 * rounds, counter)
        kept += [g for g in ([e for e in fresh if e.group == p] for p in range(P)) if _spread(g)]
    chosen = (kept + [g for g in groups if not _spread(g)])[:P]
    return [e for p, group in enumerate(chosen) for e in _regroup(group, p)], rounds


def wording_bonus(rollout, iteration: int) -> float:
    """The wording bonus in force at ``iteration`` (1-based): ``rollout.wording_bonus``, or with
    ``rollout.wording_bonus_ramp`` R > 0, ``min(1, iteration / R)`` of it.

    >>> from mirl.config import RolloutConfig
    >>> [wording_bonus(RolloutConfig(wording_bonus=1.0, wording_bonus_ramp=4), i) for i in (1, 2, 4, 9)]
    [0.25, 0.5, 1.0, 1.0]
    """
    if rollout.wording_bonus_ramp <= 0:
        return rollout.wording_bonus
    return rollout.wording_bonus * min(1.0, iteration / rollout.wording_bonus_ramp)


def iteration_rollout(rollout, iteration: int):
    """``rollout`` with the wording bonus of ``iteration`` and the ramp resolved (itself when there is no ramp): the
    rollout engine plays a fixed bonus and refuses an unresolved ramp."""
    if rollout.wording_bonus_ramp <= 0:
        return rollout
    return dataclasses.replace(rollout, wording_bonus=wording_bonus(rollout, iteration), wording_bonus_ramp=0)


def _spread(group: list[Episode]) -> bool:
    """Whether the group's returns differ: the filter's one no-spread rule (``mirl.filtering.has_spread``)."""
    if len(group) < 2:
        return False
    returns = torch.tensor([[e.total_reward for e in group]], dtype=torch.float64)  # (1, K)
    return bool(has_spread(returns)[0])


def select(returns: torch.Tensor, config: Config, turn_scores: torch.Tensor | None = None):
    """Group selection (REFERENCE §4) and the (P, K) bool mask of trajectories to train on."""
    return select_rows(returns, config.filter, turn_scores)


def _turn_signal(returns: torch.Tensor, turn_scores: torch.Tensor | None) -> torch.Tensor:
    if turn_scores is None:
        raise ValueError("filter.signal=turn needs the turn-level scores (P,) of mirl.trainer.credit; pass them")
    return turn_scores


SIGNALS = {"episode": lambda returns, turn_scores: returns, "turn": _turn_signal}
"""filter.signal -> what ``select_groups`` ranks: the (P, K) returns or the (P,) turn-level scores."""


def select_rows(
    returns: torch.Tensor, f: FilterConfig, turn_scores: torch.Tensor | None = None
) -> tuple[Selection, torch.Tensor]:
    """:func:`select` for a ``filter`` block alone (the TRL integration holds no full config).

    With ``f.signal == "turn"`` the groups are ranked by ``turn_scores`` (P,) instead of the spread of ``returns``;
    the spread and outcome metrics still describe the episode returns.
    """
    ranked = SIGNALS[f.signal](returns, turn_scores)
    selection = select_groups(
        ranked,
        strategy=f.strategy,
        value=f.value,
        mode=f.mode,
        statistic=f.statistic,
        include_zero=f.include_zero,
        largest=f.largest,
        eps=f.eps,
        band=(f.band_lo, f.band_hi) if f.strategy == "band" else None,
        success_threshold=f.success_threshold,
        ddof=f.ddof,
    )
    if ranked.dim() == 1:  # ranked by scores alone: the spread and outcome metrics still describe the returns
        metrics = selection_metrics(selection.scores, selection.keep, returns, f.success_threshold, f.ddof)
        selection = dataclasses.replace(selection, metrics=metrics)
    rows = selection.keep[:, None].expand_as(returns).clone()  # (P, K)
    if f.trajectories_per_group > 0:
        rows &= select_trajectories(returns, f.trajectories_per_group)
    return selection, rows


LOSS_SCALES = {"none": lambda kept: 1.0, "linear": lambda kept: kept, "sqrt": math.sqrt}


def _episode_advantages(preset: AlgorithmPreset, batch: RolloutBatch, returns: torch.Tensor, kept, learner):
    """grpo / dr_grpo: the group-normalised return of each row's episode, broadcast over its response tokens."""
    per_episode = grpo_advantages(returns, scale_by_std=preset.scale_by_std)  # (P, K), stats over all K
    rows = torch.tensor([per_episode[e.group, e.sample] for e in kept], dtype=torch.float32)[batch.episode_ids]
    advantages = torch.where(batch.response_mask, rows[:, None], 0.0)  # (B, T)
    if preset.whiten_advantages:
        advantages = whiten(advantages, batch.response_mask)
    return advantages, None, None


@torch.no_grad()
def critic_values(learner, batch: RolloutBatch) -> torch.Tensor:
    """(B, T) the critic's values of the batch, in chunks of 8 rows."""
    device = next(learner.critic.parameters()).device
    return torch.cat(
        [
            learner.critic(
                batch.input_ids[rows].to(device), batch.attention_mask[rows].to(device), **batch.image_args(rows)
            ).cpu()
            for rows in torch.split(torch.arange(batch.num_rows), 8)
        ]
    )  # (B, T)


@torch.no_grad()
def _gae(preset: AlgorithmPreset, batch: RolloutBatch, returns: torch.Tensor, kept, learner):
    """ppo / dapo: GAE over the response tokens with the critic's values; env text is skipped, not discounted."""
    values = critic_values(learner, batch)  # (B, T)
    advantages, targets = gae_advantages(
        batch.token_rewards, values, batch.response_mask, gamma=preset.gamma, lam=preset.lam
    )
    if preset.whiten_advantages:
        advantages = whiten(advantages, batch.response_mask)
    return advantages, targets, values


ADVANTAGES = {"grpo": _episode_advantages, "gae": _gae}


def advantages(preset: AlgorithmPreset, batch: RolloutBatch, returns, kept: list[Episode], learner):
    """(advantages (B, T), value targets (B, T) | None, old values (B, T) | None) by the preset's estimator."""
    return ADVANTAGES[preset.estimator](preset, batch, returns, kept, learner)


def advantage_metrics(advantages: torch.Tensor, batch: RolloutBatch) -> dict[str, float]:
    mask = batch.response_mask
    return {
        "train/advantage_mean": float(masked_mean(advantages, mask)),
        "train/advantage_std": float(masked_var(advantages, mask, unbiased=False).sqrt()),
        "train/rows": float(batch.num_rows),
    }


@torch.no_grad()
def old_logprobs(learner, batch: RolloutBatch, recompute: bool) -> torch.Tensor:
    """The sampled log-probs (token-in, token-out makes them exact) or, on request, a fresh forward pass at the
    sampling temperature."""
    if not recompute:
        return batch.old_logprobs
    return _forward_logprobs(functools.partial(learner.policy.token_logprobs, temperature=learner.temperature), batch)


@torch.no_grad()
def reference_logprobs(learner, batch: RolloutBatch) -> torch.Tensor | None:
    if learner.reference is None:
        return None
    return _forward_logprobs(learner.reference, batch)


def _forward_logprobs(fn, batch: RolloutBatch) -> torch.Tensor:
    """(B, T) log-probs of the response tokens (0 elsewhere: no logits are computed for prompt tokens)."""
    parts = []
    for rows in torch.split(torch.arange(batch.num_rows), 8):
        out = fn(
            batch.input_ids[rows],
            batch.attention_mask[rows],
            needed=batch.response_mask[rows],
            **batch.image_args(rows),
        )
        parts.append((out[0] if isinstance(out, tuple) else out).float().cpu())
    return torch.cat(parts)


def rollout_metrics(episodes: list[Episode], wording_regex: str = "") -> dict[str, float]:
    """The ``rollout/*`` and ``reasoning/*`` keys of a batch (mirl/catalogue.py); ``rollout/wording_bonus_frac``
    only with a ``wording_regex`` (the run's ``rollout.wording_regex``)."""
    turns = [turn for episode in episodes for turn in episode.turns]
    returns = torch.tensor([e.total_reward for e in episodes], dtype=torch.float64)
    n_turns = max(1, len(turns))
    reasoning = [len(t.reasoning_ids) for t in turns if t.reasoning_span is not None]
    metrics = {
        "rollout/success": sum(e.success for e in episodes) / len(episodes),
        "rollout/return_mean": float(returns.mean()),
        "rollout/return_std": float(returns.std(unbiased=False)),
        "rollout/turns_mean": len(turns) / len(episodes),
        "rollout/invalid_frac": sum(not t.format_valid for t in turns) / n_turns,
        "rollout/action_invalid_frac": sum(not t.actions_valid for t in turns) / n_turns,
        "rollout/response_tokens_mean": sum(len(t.response_ids) for t in turns) / n_turns,
        "rollout/reasoning_tokens_mean": sum(reasoning) / max(1, len(reasoning)),
        "rollout/valid_thinking_frac": sum(len(t.reasoning_ids) > 0 for t in turns) / n_turns,
        "rollout/truncated_frac": sum(t.finish_reason == "length" for t in turns) / n_turns,
        "rollout/context_capped_frac": sum(t.finish_reason == "context" for t in turns) / n_turns,
        "rollout/episodes": float(len(episodes)),
        "rollout/infra_failed_frac": infrastructure_share(e.end_reason for e in episodes),
        "rollout/env_malformed_frac": malformed_share(e.end_reason for e in episodes),
    }
    for env in sorted({e.spec.env for e in episodes}):
        mine = [e for e in episodes if e.spec.env == env]
        metrics[f"rollout/success/{env}"] = sum(e.success for e in mine) / len(mine)
        metrics[f"rollout/return/{env}"] = sum(e.total_reward for e in mine) / len(mine)
    if wording_regex:
        metrics["rollout/wording_bonus_frac"] = wording_bonus_frac(episodes, wording_regex)
    return metrics | reasoning_metrics(episodes)


def kept_batch(episodes: list[Episode], rows: torch.Tensor, pad_id: int) -> tuple[list[Episode], RolloutBatch | None]:
    """The episodes picked by the (P, K) mask and their collated batch.

    The batch is None when nothing is kept, or when no kept episode has a turn (every one ended before the model
    wrote a token, e.g. an observation longer than the context budget): there is nothing to train on.
    """
    kept = [e for e in episodes if rows[e.group, e.sample]]
    if not any(e.turns for e in kept):
        return kept, None
    return kept, collate(kept, pad_id=pad_id)
