"""SNR-Aware Filtering inside TRL's ``GRPOTrainer`` (TRL 1.16).

Per generation batch, the ``N = P * K`` rewards gathered across processes (TRL keeps the ``K = num_generations``
rollouts of a prompt on consecutive rows) are reshaped to ``(P, K)`` and handed to
:func:`mirl.filtering.select_groups`, exactly as the native trainer does. Ranking uses the *raw* rewards
``r_i = sum_f w_f * r_{i,f}`` (reward weights applied, NaN counted as 0), never the normalised advantages.

A dropped row ``i`` gets ``A_i = 0`` and ``tool_mask_i = 0`` on every token (TRL multiplies ``completion_mask``
by ``tool_mask`` for the loss only), and ``num_items_in_batch`` is recomputed as the gathered count of loss
tokens. How that reaches each ``loss_type``:

- ``dapo``, ``cispo``, ``vespo``: ``sum(l * m) / num_items_in_batch``: equal to the loss of a batch made of the
  kept rows only (same numerator, same normaliser).
- ``bnpo``: ``sum(l * m) / sum(m)`` over the local micro-batch: equal as well.
- ``grpo``, ``sapo``, ``luspo``: a mean over the B rows of the micro-batch; a masked row adds 0 but still counts
  in B, so the loss is ``kept_rows / B`` times that of the kept-only batch. ``dr_grpo`` divides by
  ``B * max_completion_length``: the same factor. The direction is right, the scale is not; a warning says so
  once.

Kept rows keep the advantages TRL computed, which with ``scale_rewards="group"`` (the default) depend on their
own group only, so the rewards of dropped groups never enter the step. With ``scale_rewards="batch"`` or
``multi_objective_aggregation="normalize_then_sum"`` the advantages use batch-wide statistics that include the
dropped groups; a warning says so once.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping

import torch
from trl import GRPOTrainer

from mirl.config import FilterConfig
from mirl.diagnostics.groups import label_counts, label_groups
from mirl.filtering import Selection
from mirl.trainer.stages import select_rows

EXACT_LOSS_TYPES = ("dapo", "cispo", "vespo", "bnpo")
EXACT_REWARD_SCALING = ("group", "none")


def as_filter_config(config: FilterConfig | Mapping | None) -> FilterConfig:
    """A :class:`FilterConfig` from a config block, a mapping of its fields, or None (the defaults).

    >>> as_filter_config({"strategy": "top_k_abs", "value": 2}).value
    2
    """
    if config is None:
        return FilterConfig()
    if isinstance(config, FilterConfig):
        return config
    if not isinstance(config, Mapping):
        raise TypeError(f"filter_config must be a FilterConfig, a mapping or None, got {type(config).__name__}")
    names = {f.name for f in dataclasses.fields(FilterConfig)}
    unknown = sorted(set(config) - names)
    if unknown:
        raise ValueError(f"unknown filter key(s) {unknown}; valid keys: {sorted(names)}")
    return FilterConfig(**dict(config))


def filter_rows(rewards: torch.Tensor, num_generations: int, config: FilterConfig) -> tuple[Selection, torch.Tensor]:
    """Select groups on the gathered raw rewards; returns the selection and the ``(N,)`` bool row mask.

    ``rewards``: ``(N,)`` with ``N = P * K`` and group ``p`` on rows ``p*K .. p*K+K-1``. With
    ``config.trajectories_per_group > 0`` the kept groups are further thinned to their extreme rollouts.

    >>> cfg = FilterConfig(strategy="top_k_abs", value=1, include_zero=False)
    >>> filter_rows(torch.tensor([0.0, 0.0, 0.0, 1.0]), 2, cfg)[1].tolist()
    [False, False, True, True]
    """
    if rewards.dim() != 1 or rewards.numel() % num_generations != 0:
        raise ValueError(
            f"expected (P*K,) rewards with K=num_generations={num_generations}, got shape {tuple(rewards.shape)}"
        )
    returns = rewards.detach().double().view(-1, num_generations)  # (P, K)
    selection, rows = select_rows(returns, config)  # the native trainer's selection, (P, K) rows
    return selection, rows.reshape(-1)  # (N,)


def local_rows(rows: torch.Tensor, process_index: int, local: int) -> torch.Tensor:
    """This process's ``(B,)`` slice of the gathered ``(N,)`` row mask: rows ``process_index * B ..`` (TRL's order).

    >>> local_rows(torch.tensor([True, False, False, True]), 1, 2).tolist()
    [False, True]
    """
    if rows.numel() < (process_index + 1) * local:
        raise ValueError(f"{rows.numel()} gathered rows cannot hold process {process_index}'s {local} rows")
    return rows[process_index * local : (process_index + 1) * local]


def group_label_counts(rewards: torch.Tensor, num_generations: int, success_threshold: float) -> dict[str, float]:
    """The native trainer's ``groups_*`` counts (``mirl.diagnostics.groups``) from the ``(P*K,)`` raw rewards.

    Without the parsed actions a zero-spread failing group cannot be told "too coarse" from "too hard": it counts
    as ``groups_too_hard`` and ``groups_too_coarse`` is left out.

    >>> counts = group_label_counts(torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 1.0]), 2, 1.0)
    >>> counts["groups_mixed"], counts["groups_too_hard"], counts["groups_too_easy"], "groups_too_coarse" in counts
    (1.0, 1.0, 1.0, False)
    """
    returns = rewards.detach().double().view(-1, num_generations)  # (P, K)
    counts = label_counts(label_groups([], returns, success_threshold=success_threshold))
    del counts["groups_too_coarse"]
    return counts


def mask_dropped_rows(output: dict, keep: torch.Tensor, gather: Callable[[torch.Tensor], torch.Tensor]) -> dict:
    """Zero the advantage and the loss mask of the local rows with ``keep[i] = False``; recompute the normaliser.

    ``output`` is what ``GRPOTrainer._generate_and_score_completions`` returns for this process (B local rows);
    ``keep`` is ``(B,)`` bool. ``num_items_in_batch = sum over processes of sum(completion_mask * tool_mask)``.
    A new dict is returned; ``output`` is not modified.
    """
    out = dict(output)
    completion_mask = out["completion_mask"]  # (B, C)
    keep = keep.to(completion_mask.device)
    advantages = out["advantages"]  # (B,) or (B, C)
    row = keep.view(-1, *([1] * (advantages.dim() - 1)))
    out["advantages"] = torch.where(row, advantages, torch.zeros_like(advantages))
    tool_mask = out.get("tool_mask", torch.ones_like(completion_mask))  # (B, C)
    out["tool_mask"] = tool_mask * keep[:, None].to(tool_mask.dtype)
    loss_mask = completion_mask * out["tool_mask"]
    out["num_items_in_batch"] = gather(loss_mask.sum()).sum()
    return out


class SNRFilterGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that trains only on the prompt groups ``mirl.filtering.select_groups`` keeps.

    Args:
        *args, **kwargs: those of ``trl.GRPOTrainer``.
        filter_config: mirl's ``filter`` block (a ``FilterConfig``) or a mapping with the same keys (``strategy``,
            ``value``, ``mode``, ``statistic``, ``include_zero``, ...); None = mirl's defaults (linear top-p 0.9).

    Equivalence (module docstring): for ``loss_type`` in ``dapo``, ``cispo``, ``vespo``, ``bnpo`` one step equals
    a ``GRPOTrainer`` step on a batch of the kept groups only; ``grpo``, ``sapo``, ``luspo`` and ``dr_grpo``
    average over a fixed row count and are scaled by ``kept_rows / B`` (warned once). With
    ``strategy="none"`` nothing is touched and the step is bitwise that of ``GRPOTrainer``.

    Selection happens on the gathered rewards, identically on every process; each process masks its own slice.
    The ``filter/*`` metrics (same names and meanings as the native trainer) go to TRL's logger;
    ``groups_too_coarse`` is not among them and those groups count as ``groups_too_hard`` (telling them apart needs
    the parsed actions of every group, which TRL's batch does not carry).
    """

    def __init__(self, *args, filter_config: FilterConfig | Mapping | None = None, **kwargs) -> None:
        self.filter_config = as_filter_config(filter_config)
        filter_rows(torch.zeros(2), 2, self.filter_config)  # bad values fail here, not at step 1
        self._raw_rewards: torch.Tensor | None = None
        self.last_selection: Selection | None = None
        self.empty_streak = 0  # consecutive generation batches with nothing kept
        super().__init__(*args, **kwargs)
        self._warn_inexact()

    def _warn_inexact(self) -> None:
        if self.filter_config.strategy == "none":
            return
        if self.loss_type not in EXACT_LOSS_TYPES:
            warnings.warn(
                f"SNRFilterGRPOTrainer: loss_type={self.loss_type!r} averages over a fixed number of rows, so dropped "
                f"rows still dilute the loss by kept/B; use loss_type in {EXACT_LOSS_TYPES} for an exact filter",
                stacklevel=3,
            )
        batch_stats = self.scale_rewards not in EXACT_REWARD_SCALING
        if batch_stats or self.multi_objective_aggregation != "sum_then_normalize":
            warnings.warn(
                "SNRFilterGRPOTrainer: scale_rewards='batch' or multi_objective_aggregation='normalize_then_sum' "
                "normalise advantages with statistics that include the dropped groups; use scale_rewards='group'",
                stacklevel=3,
            )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # (N, F) gathered
        weights = self.reward_weights.to(per_func.device)  # (F,)
        self._raw_rewards = (per_func * weights[None, :]).nansum(dim=1)  # (N,)
        return per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training or self.filter_config.strategy == "none":
            return output
        selection, rows = filter_rows(self._raw_rewards, self.num_generations, self.filter_config)  # (N,)
        self.last_selection = selection
        self.empty_streak = self.empty_streak + 1 if selection.empty else 0
        metrics = dict(selection.metrics, kept_trajectories=float(rows.sum()), empty_streak=float(self.empty_streak))
        metrics |= group_label_counts(self._raw_rewards, self.num_generations, self.filter_config.success_threshold)
        for key, value in metrics.items():
            self._metrics["train"][f"filter/{key}"].append(float(value))
        keep = local_rows(rows, self.accelerator.process_index, output["advantages"].shape[0])  # (B,)
        if bool(keep.all()):
            return output
        return mask_dropped_rows(output, keep, self.accelerator.gather)
