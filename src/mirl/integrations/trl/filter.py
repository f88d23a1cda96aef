"""SNR-Aware Filtering inside TRL's ``GRPOTrainer`` (TRL 1.16).

Per generation batch, the ``N = P * K`` rewards gathered across processes (TRL keeps the ``K = num_generations``
rollouts of a prompt on consecutive rows) are reshaped to ``(P, K)`` and handed to
:func:`mirl.filtering.select_groups`, exactly as the native trainer does. Ranking uses the *raw* rewards
``r_i = sum_f w_f * r_{i,f}`` (reward weights applied, NaN counted as 0), taken from ``_calculate_rewards`` before
TRL aggregates or normalises anything, never the advantages: with ``multi_objective_aggregation="normalize_then_sum"``
TRL's summed reward is already a per-group z-score, so every group with spread would look alike (the trap the
review of TRL PR #7242 found in that proposal), and the advantages are z-scores under ``scale_rewards="group"``
(tested: a step keeps the group with the larger raw variance, where the advantages tie). The selection is made
identically on every process from the gathered rewards; each process then handles its own rows.

Every process runs the same collectives in the same order whatever its rows hold: the gather of the new
normaliser runs even on a process whose rows are all kept (one that skipped it would leave the others waiting).

A dropped row ``i`` gets ``A_i = 0`` and ``tool_mask_i = 0`` on every token (TRL multiplies ``completion_mask``
by ``tool_mask`` for the loss only), and ``num_items_in_batch`` is recomputed as the gathered count of loss
tokens. Then the dropped rows leave the local batch before TRL splits it into micro-batches
(:func:`compact_rows`): only the kept rows are forwarded and back-propagated, topped up with masked rows to the
same count on every process (the most any process keeps, rounded up to ``steps_per_generation`` micro-batches of
equal size: TRL gathers per-row metrics, which needs equal row counts), and the completion columns are cut to the
longest remaining row. How the filtered step compares with a step on the kept groups only, per
``loss_type``:

- ``dapo``, ``cispo``, ``vespo``: ``sum(l * m) / num_items_in_batch`` with the global normaliser: equal (same
  numerator, same normaliser), for any number of micro-batches and processes.
- ``bnpo``: ``sum(l * m) / sum(m)`` over each local micro-batch: equal with one process and one micro-batch per
  generation batch; otherwise the micro-batches hold other rows than a kept-only batch would, and the step differs.
- ``grpo``, ``sapo``, ``luspo``, ``dr_grpo``: a mean over the rows of the micro-batch (``dr_grpo``: over rows x
  ``max_completion_length``); the top-up rows count in it, so the scale differs; a warning says so once.

Kept rows keep the advantages TRL computed, which with ``scale_rewards="group"`` (the default) depend on their
own group only, so the rewards of dropped groups never enter the step. With ``scale_rewards="batch"`` or
``multi_objective_aggregation="normalize_then_sum"`` the advantages use batch-wide statistics that include the
dropped groups; a warning says so once.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch
from trl import GRPOTrainer

from mirl.config import FilterConfig
from mirl.diagnostics.groups import label_counts, label_groups
from mirl.filtering import Selection, upstream_metrics
from mirl.integrations.trl.config import SNRFilterGRPOConfig
from mirl.integrations.trl.envs import refuse_unused_vllm
from mirl.trainer.stages import select_rows

EXACT_LOSS_TYPES = ("dapo", "cispo", "vespo")  # global normaliser; bnpo is exact in one case only (module docs)
EXACT_REWARD_SCALING = ("group", "none")
# tool_mask where TRL's tool loop made one: the diagnostics split the completion into turns by it
UNFILTERED_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "tool_mask")
# what GRPOTrainer's generation batch holds for a text model: (B, ...) tensors, plus the scalar normaliser
ROW_KEYS = frozenset(
    ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "tool_mask",
     "old_per_token_logps", "sampling_per_token_logps", "ref_per_token_logps", "importance_sampling_ratio")
)  # fmt: skip


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


def train_rows(rows: torch.Tensor, num_processes: int, steps: int) -> int:
    """Rows each process trains on: the most any process keeps, rounded up to a multiple of ``steps`` (>= steps).

    TRL splits the local batch into ``steps = steps_per_generation`` micro-batches of equal size, and gathers
    per-row metrics across processes, so every process needs the same row count; ``rows`` is the gathered
    ``(N,)`` keep mask, the same on every process, so no collective is needed.

    >>> train_rows(torch.tensor([True, True, True, False, True, False, False, False]), 2, 2)
    4
    """
    most = int(rows.view(num_processes, -1).sum(dim=1).max())
    return steps * max(1, math.ceil(most / steps))


def compact_rows(output: dict, keep: torch.Tensor, size: int) -> dict:
    """``size`` rows to train on: the kept ones, topped up with dropped (masked) rows; ``size`` from :func:`train_rows`.

    The top-up rows carry ``A = 0`` and a zero loss mask (:func:`mask_dropped_rows`), so they add nothing to the
    loss. Rows keep their order. The completion columns are then cut after the last attended token of the
    remaining rows (right padding only; the left-padded prompt is left as it is). A batch holding anything else
    (images, per-image lists) is returned unchanged: its dropped rows stay masked, not removed.

    >>> out = {"completion_ids": torch.tensor([[5, 6, 0], [7, 0, 0], [8, 9, 4]]),
    ...        "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
    ...        "advantages": torch.tensor([1.0, 2.0, 0.0]), "num_items_in_batch": torch.tensor(3)}
    >>> small = compact_rows(out, torch.tensor([True, True, False]), 2)
    >>> small["completion_ids"].tolist(), small["advantages"].tolist()
    ([[5, 6], [7, 0]], [1.0, 2.0])
    """
    if set(output) - ROW_KEYS - {"num_items_in_batch"} or size >= keep.numel():
        return output
    kept, dropped = keep.nonzero().flatten(), (~keep).nonzero().flatten()
    rows = torch.cat([kept, dropped[: size - kept.numel()]]).sort().values  # (size,)
    columns = output["completion_ids"].shape[1]
    used = output["completion_mask"][rows].sum(0).nonzero()  # columns some remaining row attends to
    width = int(used.max()) + 1 if used.numel() else columns
    out = {}
    for key, value in output.items():
        if key == "num_items_in_batch":
            out[key] = value
            continue
        value = value[rows.to(value.device)]
        completion_aligned = key not in ("prompt_ids", "prompt_mask") and value.dim() == 2
        out[key] = value[:, :width] if completion_aligned and value.shape[1] == columns else value
    return out


class SNRFilterGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that trains only on the prompt groups ``mirl.filtering.select_groups`` keeps.

    Args:
        model, reward_funcs, **kwargs: those of ``trl.GRPOTrainer``.
        args: an :class:`~mirl.integrations.trl.SNRFilterGRPOConfig`; its ``filter_*`` fields are mirl's ``filter``
            block and ``filter_strategy`` must be set (``"none"`` trains unfiltered).

    Equivalence (module docstring): for ``loss_type`` in ``dapo``, ``cispo``, ``vespo`` one step equals a
    ``GRPOTrainer`` step on a batch of the kept groups only; other loss types are warned about once. With
    ``filter_strategy="none"`` nothing is touched and the step is bitwise that of ``GRPOTrainer``.

    The ``filter/*`` metrics (same names and meanings as the native trainer) go to TRL's logger, and the same
    selection under the upstream proposal's names, ``reward_variance_filtering/*``
    (:func:`mirl.filtering.upstream_metrics`); ``groups_too_coarse`` is not among them and those groups count as
    ``groups_too_hard`` (telling them apart needs the parsed actions of every group, which TRL's batch does not
    carry).
    """

    def __init__(self, model, reward_funcs=None, args: SNRFilterGRPOConfig | None = None, **kwargs) -> None:
        if not isinstance(args, SNRFilterGRPOConfig):
            raise TypeError(
                "SNRFilterGRPOTrainer takes its filter from the training arguments: pass "
                f"args=SNRFilterGRPOConfig(..., filter_strategy='top_p'), got {type(args).__name__}"
            )
        self.filter_config = args.filter_config
        filter_rows(torch.zeros(2), 2, self.filter_config)  # bad values fail here, not at step 1
        refuse_unused_vllm(args, kwargs.get("rollout_func"))
        self._raw_rewards: torch.Tensor | None = None
        self.last_selection: Selection | None = None
        self.empty_streak = 0  # consecutive generation batches with nothing kept
        self.unfiltered_batch: dict[str, torch.Tensor] = {}  # this process's token rows before filtering
        super().__init__(model, reward_funcs, args, **kwargs)
        self._warn_inexact()

    def _warn_inexact(self) -> None:
        if self.filter_config.strategy == "none":
            return
        one_micro_batch = self.args.steps_per_generation == 1 and self.accelerator.num_processes == 1
        if self.loss_type not in EXACT_LOSS_TYPES and not (self.loss_type == "bnpo" and one_micro_batch):
            warnings.warn(
                f"SNRFilterGRPOTrainer: loss_type={self.loss_type!r} normalises per micro-batch, so the filtered "
                f"step differs from a step on the kept groups only; use loss_type in {EXACT_LOSS_TYPES} for an "
                "exact filter",
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
            return output  # the same on every process: training mode and the config are shared
        selection, rows = filter_rows(self._raw_rewards, self.num_generations, self.filter_config)  # (N,)
        self.last_selection = selection
        self.empty_streak = self.empty_streak + 1 if selection.empty else 0
        metrics = dict(selection.metrics, kept_trajectories=float(rows.sum()), empty_streak=float(self.empty_streak))
        metrics |= group_label_counts(self._raw_rewards, self.num_generations, self.filter_config.success_threshold)
        for key, value in metrics.items():
            self._metrics["train"][f"filter/{key}"].append(float(value))
        returns = self._raw_rewards.detach().double().view(-1, self.num_generations)  # (P, K)
        for key, value in upstream_metrics(returns, selection.keep, self.filter_config.ddof).items():
            self._metrics["train"][key].append(value)
        keep = local_rows(rows, self.accelerator.process_index, output["advantages"].shape[0])  # (B,)
        self.unfiltered_batch = {key: output[key] for key in UNFILTERED_KEYS if key in output}  # diagnostics score it
        output = mask_dropped_rows(output, keep, self.accelerator.gather)  # a collective: every process, always
        size = train_rows(rows, self.accelerator.num_processes, self.args.steps_per_generation)
        return compact_rows(output, keep, size)
