"""The old log-probs the update takes, the sampler/trainer mismatch behind them, and its correction.

The sampler's log-probs mu (``batch.old_logprobs``) are the behaviour policy's. When a rollout correction is on, or
with ``recompute_old_logprobs``, one no-grad forward pass gives the trainer's own log-probs pi_old of the same tokens
at the sampling temperature before the update; the gap is logged as ``rollout/logp_diff_mean``,
``rollout/logp_diff_max``, ``rollout/mismatch_kl`` and ``rollout/ratio_outside_frac``
(:func:`mirl.algorithms.rollout_correction.mismatch_stats`, over the kept batch's trained tokens, before any
optimiser step). Without either, a scheduled measurement (``algorithm.mismatch_every``) needs no pass of its own:
the update's first optimiser step computes pi_old in its training forward pass and measures the gap on that step's
rows (:func:`mirl.trainer.update.update`; the whole kept batch when it fits one mini-batch). What the update uses:

    correction none:   old = mu (or pi_old with recompute_old_logprobs), no weights
    token_tis, ...:    old = pi_old, token weights w from (pi_old, mu)   (decoupled PPO; formulas in the core)
"""

from __future__ import annotations

import torch

from mirl.algorithms.rollout_correction import correction_weights, mismatch_stats
from mirl.config import AlgorithmConfig
from mirl.diagnostics.run import is_scheduled
from mirl.trainer import stages
from mirl.types import RolloutBatch


def behaviour_logprobs(
    learner, batch: RolloutBatch, config: AlgorithmConfig, iteration: int
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """(old log-probs (B, T) for the ratio, rollout weights (B, T) or None, ``rollout/*`` metrics); the metrics
    only when this pass runs (a correction or ``recompute_old_logprobs``), else :func:`measured_in_update` says
    whether the update measures them."""
    correction = learner.rollout_correction
    if correction == "none" and not config.recompute_old_logprobs:
        return batch.old_logprobs, None, {}
    sampler, mask = batch.old_logprobs, batch.response_mask
    trainer, metrics = measure(learner, batch)
    if correction == "none":
        return (trainer if config.recompute_old_logprobs else sampler), None, metrics
    weights, stats = correction_weights(trainer, sampler, mask, mode=correction, cap=config.rollout_correction_cap)
    metrics["rollout/correction_weight_mean"] = float(stats["weight_mean"])
    metrics["rollout/correction_frac"] = float(stats["corrected_frac"])
    return trainer, weights, metrics


def measure(learner, batch: RolloutBatch) -> tuple[torch.Tensor, dict[str, float]]:
    """One no-grad pass: the trainer's pi_old (B, T) of the sampled tokens and the ``rollout/*`` mismatch metrics."""
    trainer = stages.old_logprobs(learner, batch, recompute=True)  # (B, T), 0 off the response tokens
    stats = mismatch_stats(trainer, batch.old_logprobs, batch.response_mask)
    return trainer, {f"rollout/{name}": float(value) for name, value in stats.items()}


def measured_in_update(learner, config: AlgorithmConfig, iteration: int) -> bool:
    """Whether the update's first step measures the mismatch: scheduled, and no pass of :func:`behaviour_logprobs`
    measured it already."""
    scheduled = config.mismatch_every > 0 and is_scheduled(iteration, config.mismatch_every)
    return scheduled and learner.rollout_correction == "none" and not config.recompute_old_logprobs
