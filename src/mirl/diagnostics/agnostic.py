"""The agnostic share: which fraction of a batch's reasonings show no detectable input dependence in their own row.

Part of the pure numeric core (torch and math only). MI-Est and retrieval are batch averages: a batch with half its
reasonings templated reads as a blend, and a retrieval threshold only trips once nearly every row has lost its
prompt (docs/metrics.md, "Agnostic share"). This estimator reads each row on its own and counts.

Row statistic. For row i of an (M, N) score matrix L with G distinct prompts (``col_group``; a prompt repeated
in several columns counts once, at its best column), the normalised rank of the matched score among the other
G - 1 prompts' scores, ties counted half:

    q_i = (#{g != own_i : s_ig < m_i} + 1/2 #{g != own_i : s_ig = m_i}) / (G - 1)      in [0, 1]

A reasoning that does not depend on its input (a template) was as likely under any prompt, so its matched score is
exchangeable with the others and q_i is uniform on {0, 1/(G-1), ..., 1}: E[q | agnostic] = 1/2 exactly, whatever
the model or the length of the reasoning. A reasoning that depends on its input ranks its own prompt high:
E[q | dependent] = d, the test's power in rank units (1 when every dependent row ranks its own prompt first).

Mixture estimator. With a share a of agnostic rows, mean q = a / 2 + (1 - a) d, so

    agnostic_share = (d - mean q) / (d - 1/2),   clipped to [0, 1]
    interval       = the same map of mean q -/+ z * sd(q) / sqrt(M)    (sd with ddof 1; z = 1.96 at 95 %)

The 1/2 is exact (the false-positive side needs no calibration); d is the one setting, the mean rank of
input-dependent rows, chosen on committed organism batches (``DEPENDENT_RANK``; studies/results/regimes/). A
mean of ranks rather than a count of rows under a cut (Storey's estimator) because it has a third of the variance
for the same batch: a uniform rank has variance 1/12, a coin at 1/2 has 1/4.

Eight reasonings over eight prompts; rows 0-3 rank their own prompt first (q = 1), rows 4-7 rank it 2nd, 4th,
5th and 7th of 8 (q = 6/7, 4/7, 3/7, 1/7): mean q = (4 + 14/7) / 8 = 0.75, share = (1 - 0.75) / (1 - 0.5) = 0.5.

>>> logp = torch.full((8, 8), -3.0)
>>> logp[range(8), range(8)] = -1.0                  # rows 0-3: own prompt first
>>> for row, above in zip(range(4, 8), (1, 3, 4, 6)):
...     logp[row, row] = -2.5                        # rows 4-7: own prompt below `above` others
...     logp[row, [c for c in range(8) if c != row][:above]] = -2.0
>>> out = agnostic_share(logp, torch.arange(8), dependent_rank=1.0)
>>> round(out["agnostic_share"], 6), out["agnostic_share_ci_low"] < 0.5 < out["agnostic_share_ci_high"]
(0.5, True)
"""

from __future__ import annotations

import math

import torch

DEPENDENT_RANK = 1.0  # d: mean normalised rank of an input-dependent row (calibrated: studies/results/regimes/)
KEYS = ("agnostic_share", "agnostic_share_ci_low", "agnostic_share_ci_high")


def own_ranks(logp: torch.Tensor, true_col: torch.Tensor, col_group: torch.Tensor | None = None) -> torch.Tensor:
    """q_i (M,) of the module docstring, in float64; NaN for every row when fewer than 2 distinct prompts exist.

    Row 0 beats both other prompts, row 1 ties one and beats none, row 2 beats one of two:

    >>> logp = torch.tensor([[0.0, -1.0, -2.0], [-1.0, -1.0, 0.0], [-2.0, 0.0, -1.0]])
    >>> own_ranks(logp, torch.tensor([0, 1, 2])).tolist()
    [1.0, 0.25, 0.5]
    """
    scores = logp.detach().to(torch.float64)
    rows, cols = scores.shape
    group = torch.arange(cols) if col_group is None else col_group.to(torch.long).cpu()
    ids, inverse = torch.unique(group, return_inverse=True)  # (G,), (N,) column -> prompt index
    prompts = len(ids)
    if prompts < 2:
        return torch.full((rows,), math.nan, dtype=torch.float64)
    # (M, G): each prompt's best column score per row; equal prompts give equal scores, the max picks one of them
    per_prompt = torch.full((rows, prompts), -math.inf, dtype=torch.float64)
    per_prompt = per_prompt.scatter_reduce(1, inverse.expand(rows, cols), scores.cpu(), reduce="amax")
    own = inverse[true_col.to(torch.long).cpu()]  # (M,)
    matched = per_prompt.gather(1, own[:, None])  # (M, 1)
    others = torch.ones_like(per_prompt, dtype=torch.bool).scatter(1, own[:, None], False)  # (M, G)
    below = ((per_prompt < matched) & others).sum(dim=1).to(torch.float64)
    tied = ((per_prompt == matched) & others).sum(dim=1).to(torch.float64)
    return (below + 0.5 * tied) / (prompts - 1)


def agnostic_share(
    logp: torch.Tensor,
    true_col: torch.Tensor,
    *,
    col_group: torch.Tensor | None = None,
    dependent_rank: float = DEPENDENT_RANK,
    level: float = 0.95,
) -> dict[str, float]:
    """The agnostic share of an (M, N) score matrix and its interval (module docstring), as :data:`KEYS`.

    ``logp``, ``true_col`` and ``col_group`` as for :func:`mirl.diagnostics.info.mi_proxies`. NaN for every key
    when fewer than 2 distinct prompts were scored; with one row the interval is the whole of [0, 1].

    >>> logp = torch.eye(4) - 1.0                      # every reasoning fits its own prompt best
    >>> agnostic_share(logp, torch.arange(4))["agnostic_share"]
    0.0
    """
    if not 0.5 < dependent_rank <= 1.0:
        raise ValueError(f"dependent_rank must be in (0.5, 1], got {dependent_rank!r}; the default is {DEPENDENT_RANK}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    q = own_ranks(logp, true_col, col_group)  # (M,)
    if not len(q) or torch.isnan(q).any():
        return dict.fromkeys(KEYS, math.nan)
    z = _normal_quantile(0.5 + level / 2)
    mean = float(q.mean())
    half = z * float(q.std()) / math.sqrt(len(q)) if len(q) > 1 else math.inf

    def share(mean_rank: float) -> float:
        return min(1.0, max(0.0, (dependent_rank - mean_rank) / (dependent_rank - 0.5)))

    # a higher mean rank is a lower share: the interval's ends swap
    return dict(zip(KEYS, (share(mean), share(mean + half), share(mean - half)), strict=True))


def _normal_quantile(p: float) -> float:
    """The standard normal quantile, by bisection on erf (no scipy in the core).

    >>> round(_normal_quantile(0.975), 4)
    1.96
    """
    low, high = -10.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2
