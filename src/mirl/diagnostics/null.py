"""A permutation null for the MI proxies: what MI-Est and retrieval read when Z carries no information about X.

Part of the pure numeric core (torch and math only). MI-Est is not 0 in expectation when the reasoning is
independent of the prompt: the matched score of a row is one draw among its N columns while the marginal is a
log-mean-exp over all of them, and log-mean-exp >= mean, so under independence MI-Est is biased below 0 (and
retrieval above chance fluctuates around 0 with a spread set by M and N). Reading a raw MI-Est of -0.01 as "no
information" or +0.01 as "some" is then guesswork. The null removes the guess by shuffling the attribution
within the batch:

    for d = 1..D:  pi_d = a uniformly random permutation of the rows
                   null_d = proxy(L, true_col[pi_d])            (same scores, attribution broken)
    null_mean   = mean_d null_d,      null_std = std_d null_d (ddof 1)
    corrected   = raw - null_mean
    [ci_low, ci_high] = [raw - q_{1-a/2}(null), raw - q_{a/2}(null)]     (a = 1 - level)

For retrieval above chance the corrected value is the same statistic with its bias removed
(``retrieval_above_chance_corrected``). For MI-Est it is not an MI estimate: MI-Est's marginal term does not move
under a shuffle, so raw - null_mean = mean_i matched_i - mean_d mean_i L[i, true_col[pi_d(i)]], the matched scores
minus the average score of a row under a random one of the batch's prompts: a contrast, with no log N bound (the
example below reads 0 - (-3 x 7/8) = 2.625 nats in expectation at N = 8, above log 8 = 2.08). It is named
``mi_contrast``, with its interval ``mi_contrast_ci_low`` / ``_ci_high``; use it to test "no input dependence" (an
interval holding 0), and raw ``mi_estimate`` (at most log N) wherever an amount of information is meant.

>>> logp = 3.0 * torch.eye(8) - 3.0                    # each of 8 reasonings fits its own prompt best
>>> out = permutation_null(logp, torch.arange(8), draws=200, generator=torch.Generator().manual_seed(0))
>>> round(out["mi_contrast"], 1), out["mi_contrast_ci_low"] > 0, out["retrieval_above_chance_ci_low"] > 0
(2.6, True, True)
"""

from __future__ import annotations

import math

import torch

from mirl.diagnostics.info import mi_proxies

NULL_STATS: tuple[str, ...] = ("mi_estimate", "retrieval_above_chance")
# stat -> (name of raw - null_mean, prefix of its interval); module docstring
CORRECTED: dict[str, tuple[str, str]] = {
    "mi_estimate": ("mi_contrast", "mi_contrast"),
    "retrieval_above_chance": ("retrieval_above_chance_corrected", "retrieval_above_chance"),
}


def null_keys(stat: str) -> tuple[str, ...]:
    """The five keys :func:`permutation_null` writes for ``stat``.

    >>> null_keys("mi_estimate")
    ('mi_estimate_null_mean', 'mi_estimate_null_std', 'mi_contrast', 'mi_contrast_ci_low', 'mi_contrast_ci_high')
    """
    corrected, interval = CORRECTED[stat]
    return (f"{stat}_null_mean", f"{stat}_null_std", corrected, f"{interval}_ci_low", f"{interval}_ci_high")


def permutation_null(
    logp: torch.Tensor,
    true_col: torch.Tensor,
    *,
    col_group: torch.Tensor | None = None,
    draws: int = 200,
    level: float = 0.95,
    generator: torch.Generator,
) -> dict[str, float]:
    """:func:`null_keys` of each stat in NULL_STATS (module docstring), from ``draws`` shuffles.

    ``logp`` (M, N), ``true_col`` (M,) and ``col_group`` (N,) as for :func:`mi_proxies`. With one row there is
    nothing to shuffle and every value is NaN.
    """
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 2:
        raise ValueError(f"draws must be an int >= 2, got {draws!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    raw = mi_proxies(logp, true_col, col_group=col_group, ks=(1,))
    rows = true_col.shape[0]
    if rows < 2:
        return {key: math.nan for stat in NULL_STATS for key in null_keys(stat)}
    null = _null_draws(logp, true_col, col_group, draws, generator)
    null["mi_estimate"] -= raw["marginal_mean"]  # MI-Est = mean matched - mean marginal; the marginal never moves
    null["retrieval_above_chance"] -= raw["retrieval_chance"]  # the chance of a row multiset, the same too
    out = {}
    tail = (1.0 - level) / 2.0
    for stat in NULL_STATS:
        values = null[stat]
        low_q, high_q = torch.quantile(values, torch.tensor([tail, 1.0 - tail], dtype=torch.float64)).tolist()
        mean = float(values.mean())
        null_mean, null_std, corrected, ci_low, ci_high = null_keys(stat)
        out[null_mean], out[null_std] = mean, float(values.std())
        out[corrected], out[ci_low], out[ci_high] = raw[stat] - mean, raw[stat] - high_q, raw[stat] - low_q
    return out


def _null_draws(logp, true_col, col_group, draws: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Per draw: the mean matched score and the top-1 retrieval accuracy under a shuffled attribution (D,).

    MI-Est's marginal term and retrieval's chance do not depend on the attribution (a shuffle keeps the multiset
    of true columns), so only these two terms are recomputed, for all draws at once.
    """
    scores = logp.detach().to(torch.float64)
    rows = true_col.shape[0]
    group = torch.arange(scores.shape[1]) if col_group is None else col_group.to(torch.long)
    order = torch.stack([torch.randperm(rows, generator=generator) for _ in range(draws)])  # (D, M)
    shuffled = true_col.to(torch.long)[order]  # (D, M)
    matched = scores.gather(1, shuffled.T).T  # (D, M): L[i, true_col[pi_d(i)]]
    top = scores.argmax(dim=1)  # (M,) first maximum, as mi_proxies ranks ties
    hits = (group[top].unsqueeze(0) == group[shuffled]).to(torch.float64)  # (D, M)
    return {"mi_estimate": matched.mean(dim=1), "retrieval_above_chance": hits.mean(dim=1)}
