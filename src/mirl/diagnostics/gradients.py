"""Gradient decomposition per reward-spread bucket: the SNR mechanism of REFERENCE.md section 5 (paper Fig. 3).

The kept batch's rows are split by their group's reward spread, plus an ``all`` bucket of every row. A prompt
group is never split: buckets are cut over groups, and each bucket holds all rows of its groups.

- ``"quantile"``: the G distinct groups sorted by spread, ascending (stable: ties keep the order in which the
  groups first appear in the batch), cut into ``n = min(6, G)`` equal-size buckets ``b0`` (lowest spread) ..
  ``b{n-1}`` of ``G // n`` groups each, the remainder going into the last (as the paper's analysis does);
- ``"fixed"``: ``b0`` = [0, 1), ``b1`` = [1, 2), ..., ``b4`` = [4, 5), ``b5`` = [5, inf).

Empty buckets are left out. For each bucket and each loss component

    task     = aggregate(L_clip)                            (the clipped PPO surrogate, ``policy_loss``)
    entropy  = -entropy_coef * aggregate(H_token)
    kl       = kl_coef * aggregate(KL_kind(pi || pi_ref))

with the preset's aggregation and the bucket's own normaliser, the gradient of that component alone is
accumulated over micro-batches (a fresh forward pass through ``policy.token_logprobs`` per component) and its
total L2 norm over all trainable parameters is read, before any clipping. No optimiser step is taken: every
parameter's ``.grad`` is set aside before the first backward pass and put back afterwards (the very same tensor
objects, so an accumulation in progress is untouched), and weights are never written. A component whose
coefficient is 0 has the exact gradient 0 and is not computed.

By Cauchy-Schwarz, ||g_task(x)|| <= sqrt(Var[R | x]) sqrt(E ||grad log pi||^2): with GRPO-style group
advantages a zero-spread group has advantages 0 and a task gradient of exactly 0, while its entropy and KL
gradients are not 0, so low-spread buckets are regularisation-dominated.

Keys (all floats): ``grad/{bucket}/{component}/norm``, ``.../norm_per_sample`` (norm / trajectories in the
bucket: distinct ``episode_ids``), ``.../norm_per_token`` (norm / response tokens in the bucket),
``grad/{bucket}/spread_mean`` (mean spread over the bucket's distinct groups) and ``grad/{bucket}/samples``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mirl.algorithms import AlgorithmPreset, aggregation_normaliser, loss_terms
from mirl.types import RolloutBatch

BUCKETINGS: tuple[str, ...] = ("quantile", "fixed")
NUM_BUCKETS = 6
COMPONENTS: tuple[str, ...] = ("task", "entropy", "kl")


def spread_buckets(spreads: torch.Tensor, group_ids: torch.Tensor, mode: str = "quantile") -> dict[str, torch.Tensor]:
    """Row indices of the non-empty buckets ``b0`` .. ``b5`` (module docstring), lowest spread first.

    Rows of one group share its spread and always land in the same bucket. Seven groups of one row each:

    >>> spreads = torch.tensor([0.0, 3.0, 0.5, 1.0, 2.0, 7.0, 0.0])
    >>> {name: rows.tolist() for name, rows in spread_buckets(spreads, torch.arange(7)).items()}  # 7 // 6 = 1
    {'b0': [0], 'b1': [6], 'b2': [2], 'b3': [3], 'b4': [4], 'b5': [1, 5]}
    >>> {name: rows.tolist() for name, rows in spread_buckets(spreads, torch.arange(7), "fixed").items()}
    {'b0': [0, 2, 6], 'b1': [3], 'b2': [4], 'b3': [1], 'b5': [5]}

    Three groups of two rows: min(6, 3) = 3 buckets of one group each.

    >>> groups = torch.tensor([4, 4, 9, 9, 2, 2])
    >>> {name: rows.tolist() for name, rows in spread_buckets(torch.tensor([1.0, 1, 0, 0, 2, 2]), groups).items()}
    {'b0': [2, 3], 'b1': [0, 1], 'b2': [4, 5]}
    """
    if spreads.dim() != 1 or not spreads.is_floating_point():
        raise ValueError(f"spreads must be a 1-D float tensor (B,), got {spreads.dtype} {tuple(spreads.shape)}")
    if tuple(group_ids.shape) != tuple(spreads.shape):
        raise ValueError(
            f"group_ids must have the shape of spreads {tuple(spreads.shape)}, got {tuple(group_ids.shape)}"
        )
    if mode == "quantile":
        buckets = _quantile_buckets(spreads, group_ids)
    elif mode == "fixed":
        bins = spreads.floor().clamp(0, NUM_BUCKETS - 1).long()  # (B,) [k, k+1) -> k, [5, inf) -> 5
        buckets = {f"b{k}": (bins == k).nonzero().squeeze(1) for k in range(NUM_BUCKETS)}
    else:
        raise ValueError(f"buckets must be one of {', '.join(BUCKETINGS)}, got {mode!r}")
    return {name: rows for name, rows in buckets.items() if rows.numel() > 0}


def _quantile_buckets(spreads: torch.Tensor, group_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Groups sorted by spread, cut into min(6, G) buckets of G // n groups (remainder into the last)."""
    ids = group_ids.tolist()
    groups = list(dict.fromkeys(ids))  # distinct groups in order of first appearance
    first_row = [ids.index(g) for g in groups]
    group_spreads = torch.stack([spreads[r] for r in first_row]) if groups else spreads[:0]  # (G,)
    order = torch.sort(group_spreads, stable=True).indices.tolist()  # group positions, lowest spread first
    count = min(NUM_BUCKETS, len(groups))
    size = len(groups) // count if count else 0
    cuts = [k * size for k in range(count)] + [len(groups)]
    buckets = {}
    for k in range(count):
        members = {groups[i] for i in order[cuts[k] : cuts[k + 1]]}
        buckets[f"b{k}"] = torch.tensor([r for r, g in enumerate(ids) if g in members], dtype=torch.long)
    return buckets


def gradient_decomposition(
    policy,
    batch: RolloutBatch,
    advantages: torch.Tensor,
    spreads: torch.Tensor,
    preset: AlgorithmPreset,
    *,
    buckets: str = "quantile",
    ref_logprobs: torch.Tensor | None = None,
    micro_batch_size: int = 4,
    temperature: float = 1.0,
) -> dict[str, float]:
    """Per-bucket, per-component gradient norms of the loss of ``preset`` (module docstring).

    Args:
        policy: exposes ``model`` (a torch module) and ``token_logprobs(ids, mask, with_entropy=...)``.
        batch: the kept rows (B).
        advantages: (B, T) per-token advantages, read where ``batch.response_mask``.
        spreads: (B,) float: reward spread (in-group std of returns) of each row's group.
        preset: supplies ``agg``, ``eps_low``, ``eps_high``, ``dual_clip``, ``entropy_coef``, ``kl_coef``,
            ``kl_kind``.
        buckets: ``"quantile"`` or ``"fixed"``.
        ref_logprobs: (B, T) reference-policy log-probs of the batch tokens; required when ``preset.kl_coef > 0``.
        micro_batch_size: rows per forward/backward pass.
        temperature: the rollout's sampling temperature; log-probs and entropies use ``softmax(logits / T)``, as
            in the update.
    """
    _check_inputs(batch, advantages, spreads, preset, ref_logprobs, micro_batch_size)
    params = [p for p in policy.model.parameters() if p.requires_grad]
    saved = [p.grad for p in params]
    out: dict[str, float] = {}
    try:
        by_spread = spread_buckets(spreads.float(), batch.group_ids, buckets)
        for name, rows in {"all": torch.arange(batch.num_rows), **by_spread}.items():
            ref = None if ref_logprobs is None else ref_logprobs[rows]
            bucket = _Bucket(batch.select(rows), advantages[rows], ref, spreads[rows])
            passes = (micro_batch_size, temperature)
            out.update(_bucket_norms(policy, params, bucket, preset, passes, prefix=f"grad/{name}"))
    finally:
        for p, grad in zip(params, saved, strict=True):
            p.grad = grad
    return out


@dataclass(frozen=True)
class _Bucket:
    """The rows of one bucket and what their loss needs."""

    batch: RolloutBatch  # (b rows)
    advantages: torch.Tensor  # (b, T)
    ref_logprobs: torch.Tensor | None  # (b, T)
    spreads: torch.Tensor  # (b,)

    def spread_mean(self) -> float:
        """Mean spread over the bucket's distinct groups (a group's rows share one spread)."""
        groups = self.batch.group_ids.tolist()
        first = [groups.index(g) for g in dict.fromkeys(groups)]
        return float(self.spreads[first].double().mean())


def _bucket_norms(policy, params, bucket: _Bucket, preset, passes: tuple[int, float], *, prefix: str):
    """``passes`` = (micro-batch size, sampling temperature) of the forward passes."""
    samples = int(bucket.batch.episode_ids.unique().numel())
    tokens = bucket.batch.num_response_tokens
    out = {f"{prefix}/samples": float(samples), f"{prefix}/spread_mean": bucket.spread_mean()}
    for component in COMPONENTS:
        coef = {"task": preset.task_coef, "entropy": preset.entropy_coef, "kl": preset.kl_coef}[component]
        norm = 0.0 if coef == 0.0 else _component_norm(policy, params, bucket, preset, component, passes)
        out[f"{prefix}/{component}/norm"] = norm
        out[f"{prefix}/{component}/norm_per_sample"] = norm / max(samples, 1)
        out[f"{prefix}/{component}/norm_per_token"] = norm / max(tokens, 1)
    return out


def _component_norm(policy, params, bucket: _Bucket, preset, component: str, passes: tuple[int, float]) -> float:
    """L2 norm of the gradient of one component over the bucket, accumulated over micro-batches."""
    micro_batch_size, temperature = passes
    batch = bucket.batch
    normaliser = aggregation_normaliser(batch.response_mask, preset.agg)  # the whole bucket's, in every pass
    for p in params:
        p.grad = None
    for start in range(0, batch.num_rows, micro_batch_size):
        rows = torch.arange(start, min(start + micro_batch_size, batch.num_rows))
        length = int(batch.attention_mask[rows].sum(1).max())  # right-padded: trim the common padding
        logp, entropy = policy.token_logprobs(
            batch.input_ids[rows, :length],
            batch.attention_mask[rows, :length],
            with_entropy=component == "entropy",
            temperature=temperature,
            needed=batch.response_mask[rows, :length],
            **batch.image_args(rows),
        )
        mask = batch.response_mask[rows, :length].to(logp.device)
        device = logp.device
        ref = bucket.ref_logprobs[rows, :length].to(device) if component == "kl" else None
        terms, _ = loss_terms(
            preset,
            logp,
            batch.old_logprobs[rows, :length].to(device),
            bucket.advantages[rows, :length].to(device),
            mask,
            normaliser=normaliser,
            entropy=entropy,
            ref_logp=ref,
        )
        loss = terms[component]
        loss.backward()
    total = sum(float(p.grad.double().square().sum()) for p in params if p.grad is not None)
    return math.sqrt(total)


def _check_inputs(batch, advantages, spreads, preset, ref_logprobs, micro_batch_size) -> None:
    shape = tuple(batch.input_ids.shape)
    if tuple(advantages.shape) != shape:
        raise ValueError(f"advantages must have the batch shape {shape} (B, T), got {tuple(advantages.shape)}")
    if tuple(spreads.shape) != shape[:1]:
        raise ValueError(f"spreads must have shape ({shape[0]},) (one per row), got {tuple(spreads.shape)}")
    if ref_logprobs is not None and tuple(ref_logprobs.shape) != shape:
        raise ValueError(f"ref_logprobs must have the batch shape {shape}, got {tuple(ref_logprobs.shape)}")
    if preset.kl_coef > 0 and ref_logprobs is None:
        raise ValueError(
            f"preset {preset.name!r} has kl_coef={preset.kl_coef} but no ref_logprobs were given; pass the "
            "reference policy's log-probs of the batch or set kl_coef=0"
        )
    if isinstance(micro_batch_size, bool) or not isinstance(micro_batch_size, int) or micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be an int >= 1, got {micro_batch_size!r}")
    if batch.num_rows == 0:
        raise ValueError("the batch has no rows; run the decomposition on a non-empty kept batch")
