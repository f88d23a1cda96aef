"""Mutual-information proxies from an in-batch cross-scoring matrix, and the four reasoning regimes.

This is part of the pure numeric core: torch and math only, no model, tokenizer, config or logger, so the
native trainer, the veRL plugin and the TRL adapter share it and tests check it with hand-made tensors.

Inputs. ``logp`` is an (M, N) score matrix: row i is a sampled reasoning z_i, column j a prompt x_j, and
``logp[i, j]`` is log p(z_i | x_j), per token (the ``_est`` family, L = S / |z_i|) or per sequence (the
``_seq`` family, S). ``true_col[i]`` is the column whose prompt produced z_i. ``col_group[j]`` (optional)
is an id of the distinct prompt behind column j: columns with equal ids hold token-identical prompts and
count as one prompt for retrieval. Below, L stands for either family and all means run over the rows
i = 1..M.

    matched_i           = L[i, true_col[i]]
    marginal_i          = logsumexp_j L[i, j] - log N       (score under the uniform mixture of the N columns)
    mi_estimate         = mean matched - mean marginal       (MI-Est; Monte-Carlo noise can push it below 0)
    conditional_entropy = -mean matched                      (H(Z|X))
    reasoning_entropy   = -mean marginal                     (H(Z))
    mi_upper_bound      = log N
    marginal_std        = population std (ddof 0) of marginal_i
    mi_zscore           = mean (matched_i - marginal_i) / (marginal_std + std_eps)
    mi_zscore_ema       = mean (matched_i - marginal_i) / (s_ema + std_eps)      (s_ema: see ZScoreEMA)

Undefined z-scores. When the spread in the denominator (marginal_std, or s_ema for the EMA variant) is below
std_eps, the floor makes up more than half of the denominator and the quotient reports the floor, not the data
(a batch whose marginals are all equal would read gap / 1e-3, e.g. -174 for a gap of -0.174). The z-score is
then undefined and returned as NaN; the trainer leaves NaN keys out of ``metrics.jsonl`` (docs/metrics.md).

Bounds. logsumexp_j L[i, j] >= matched_i, so matched_i - marginal_i <= log N and mi_estimate <= log N for
every matrix. logsumexp_j L[i, j] <= max_j L[i, j] + log N, so mi_estimate >= 0 whenever each row's matched
entry is its row maximum; for other matrices the estimate can be negative.

Retrieval. Each row ranks the columns by score, descending, ties toward the lower column index (a stable sort;
for top-1 this is torch.argmax's first-maximum rule). Row i is correct at k if any column equivalent to its
true column is among its first k_eff = min(k, N) ranked columns; ``retrieval_acc@k`` is the fraction of
correct rows. With c_i = number of columns equivalent to row i's true column,

    retrieval_chance    = mean_i c_i / N                     (1/N without duplicate prompts)
    retrieval_chance@k  = min(1, k_eff * retrieval_chance)
    retrieval_above_chance(@k) = retrieval_acc(@k) - retrieval_chance(@k)

Without duplicates chance@k = k_eff / N is exact for a random ranking; with duplicates it is the reference's
union-bound value, at least the exact random-ranking chance. Keys for k = 1 carry no suffix
(``retrieval_acc``, ``retrieval_chance``, ``retrieval_above_chance``) and are always reported, whether or
not 1 is in ``ks``; every other k in ``ks`` adds the three ``@k`` keys (``@k`` names the requested k, not
k_eff).

Deliberate choices beyond REFERENCE.md section 3: the tie rule above (the reference leaves it to its argmax),
the z-score EMA is updated with the current batch before it is used (so the first call gives
mi_zscore_ema == mi_zscore), and the regime thresholds below, which the paper draws as a picture, not numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

__all__ = ["REGIMES", "RegimeThresholds", "ZScoreEMA", "mi_proxies", "regime"]

REGIMES: tuple[str, ...] = (
    "diverse_grounded",  # high H(Z|X), high I(X;Z): varied and input-dependent (healthy)
    "template_collapse",  # high H(Z|X), low I(X;Z): varied but input-agnostic (invisible to entropy)
    "compressed_grounded",  # low H(Z|X), high I(X;Z): converged, still input-dependent (healthy)
    "low_entropy_collapse",  # low H(Z|X), low I(X;Z): one deterministic template for every input
)


@dataclass
class ZScoreEMA:
    """Exponential moving average of ``marginal_std``, the denominator of ``mi_zscore_ema``.

    ``update(s)`` sets s_ema = s on first use, then s_ema <- decay * s_ema + (1 - decay) * s; returns s_ema.
    It is mutable state on purpose (it lives across iterations and goes into checkpoints through
    ``state_dict`` / ``load_state_dict``). Keep one instance per scope (first-turn, trajectory) and per family
    (``_est``, ``_seq``): sharing one would mix the scales of different matrices. That bookkeeping is the
    caller's.

    >>> ema = ZScoreEMA()
    >>> ema.update(2.0), round(ema.update(1.0), 12)  # 2.0, then 0.9 * 2 + 0.1 * 1
    (2.0, 1.9)
    """

    decay: float = 0.9
    s_ema: float | None = None

    def __post_init__(self) -> None:
        self.decay = _check_decay(self.decay)
        if self.s_ema is not None:
            self.s_ema = _check_std("ZScoreEMA.s_ema", self.s_ema)

    def update(self, marginal_std: float) -> float:
        """Fold one batch's ``marginal_std`` into the average and return the new s_ema."""
        marginal_std = _check_std("marginal_std", marginal_std)
        if self.s_ema is None:
            self.s_ema = marginal_std
        else:
            self.s_ema = self.decay * self.s_ema + (1.0 - self.decay) * marginal_std
        return self.s_ema

    def state_dict(self) -> dict[str, float | None]:
        return {"decay": self.decay, "s_ema": self.s_ema}

    def load_state_dict(self, state: Mapping[str, float | None]) -> None:
        if set(state) != {"decay", "s_ema"}:
            raise ValueError(
                f"ZScoreEMA state must have exactly the keys ['decay', 's_ema'], got {sorted(state)}; "
                "pass a dict made by ZScoreEMA.state_dict()"
            )
        decay = _check_decay(state["decay"])
        s_ema = None if state["s_ema"] is None else _check_std("ZScoreEMA.s_ema", state["s_ema"])
        self.decay, self.s_ema = decay, s_ema


def mi_proxies(
    logp: torch.Tensor,
    true_col: torch.Tensor,
    *,
    col_group: torch.Tensor | None = None,
    ks: Sequence[int] = (1, 2, 4, 8),
    std_eps: float = 1e-3,
    ema: ZScoreEMA | None = None,
) -> dict[str, float]:
    """MI-Est, entropies, z-scores and retrieval accuracy of an (M, N) cross-scoring matrix.

    Formulas and key names are in the module docstring. Computation is in float64 whatever the input float
    dtype; values come back as Python floats. If ``ema`` is given it is updated in place with this batch's
    ``marginal_std`` before ``mi_zscore_ema`` is computed; without it ``mi_zscore_ema`` equals ``mi_zscore``.

    Two reasonings, two prompts, p(z_i | x_i) = 3/4 and p(z_i | x_j) = 1/4 for j != i:
    matched = log 3/4, marginal = log((3/4 + 1/4) / 2) = log 1/2, so MI-Est = log 1.5 = 0.405465 of at most
    log 2 = 0.693147, H(Z|X) = -log 3/4 = 0.287682, and each row's argmax is its own prompt.

    >>> logp = torch.tensor([[0.75, 0.25], [0.25, 0.75]]).log()
    >>> out = mi_proxies(logp, torch.tensor([0, 1]))
    >>> [round(out[k], 6) for k in ("mi_estimate", "mi_upper_bound", "conditional_entropy")]
    [0.405465, 0.693147, 0.287682]
    >>> out["retrieval_acc"], out["retrieval_chance"], out["retrieval_above_chance"]
    (1.0, 0.5, 0.5)
    """
    scores, true_col, group = _validate(logp, true_col, col_group)
    ks = _check_ks(ks)
    if not _finite("std_eps", std_eps) > 0:
        raise ValueError(f"std_eps must be > 0 so the z-score denominator is never 0, got {std_eps!r}")
    out = _information_terms(scores, true_col, std_eps, ema)
    out.update(_retrieval_terms(scores, true_col, group, ks))
    return out


def regime(cond_entropy: float, mi: float, *, entropy_threshold: float, mi_threshold: float) -> str:
    """Name the reasoning regime (one of ``REGIMES``) from H(Z|X) and I(X;Z).

    "High" means value >= threshold. Both numbers must come from the same family (per-token ``_est`` or
    per-sequence ``_seq``), and the thresholds must be in that family's units; ``RegimeThresholds`` gives
    defaults and derives the MI threshold from log N.

    >>> regime(1.2, 0.05, entropy_threshold=0.5, mi_threshold=0.2)
    'template_collapse'
    >>> regime(0.1, 0.9, entropy_threshold=0.5, mi_threshold=0.2)
    'compressed_grounded'
    """
    named = {
        "cond_entropy": cond_entropy,
        "mi": mi,
        "entropy_threshold": entropy_threshold,
        "mi_threshold": mi_threshold,
    }
    cond_entropy, mi, entropy_threshold, mi_threshold = (_finite(f"regime: {n}", v) for n, v in named.items())
    high_entropy, high_mi = cond_entropy >= entropy_threshold, mi >= mi_threshold
    if high_entropy:
        return "diverse_grounded" if high_mi else "template_collapse"
    return "compressed_grounded" if high_mi else "low_entropy_collapse"


@dataclass(frozen=True)
class RegimeThresholds:
    """Default cut points between the four regimes, for the per-token (``_est``) family.

    The paper draws the regimes as quadrants without numbers; these defaults are interpretive aids, not a
    statistical test. ``entropy``: 0.5 nats per token. Sampling at temperature 1 from a model that still
    explores spends roughly 1-2 nats per reasoning token; a model that writes one fixed template spends well
    under 0.5. ``mi_fraction``: 0.1 of the bound log N. MI is capped by log N, which grows with the number
    of columns (log 8 = 2.08 for first-turn scope, log 64 = 4.16 for trajectory scope), so a fixed nat value
    would mean different things at different N; at under a tenth of the bound the reasoning barely
    identifies its prompt. For the per-sequence ``_seq`` family, scale ``entropy`` by the mean reasoning
    length.

    >>> RegimeThresholds().classify({"conditional_entropy": 1.3, "mi_estimate": 0.1, "mi_upper_bound": 2.0})
    'template_collapse'
    """

    entropy: float = 0.5  # H(Z|X) at or above this is "high"; nats in the units of the score matrix
    mi_fraction: float = 0.1  # I(X;Z) at or above mi_fraction * log N is "high"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.entropy) and self.entropy >= 0):
            raise ValueError(f"RegimeThresholds.entropy must be finite and >= 0, got {self.entropy}")
        if not (math.isfinite(self.mi_fraction) and 0 <= self.mi_fraction <= 1):
            raise ValueError(f"RegimeThresholds.mi_fraction must be in [0, 1], got {self.mi_fraction}")

    def classify(self, metrics: Mapping[str, float]) -> str:
        """Regime of a ``mi_proxies`` result (uses conditional_entropy, mi_estimate, mi_upper_bound)."""
        return regime(
            metrics["conditional_entropy"],
            metrics["mi_estimate"],
            entropy_threshold=self.entropy,
            mi_threshold=self.mi_fraction * metrics["mi_upper_bound"],
        )


def _information_terms(
    scores: torch.Tensor, true_col: torch.Tensor, std_eps: float, ema: ZScoreEMA | None
) -> dict[str, float]:
    num_cols = scores.shape[1]
    matched = scores.gather(1, true_col[:, None]).squeeze(1)  # (M,)
    marginal = torch.logsumexp(scores, dim=1) - math.log(num_cols)  # (M,)
    marginal_std = marginal.std(correction=0).item()
    gap_mean = (matched - marginal).mean().item()
    s_ema = (ema if ema is not None else ZScoreEMA()).update(marginal_std)
    matched_mean, marginal_mean = matched.mean().item(), marginal.mean().item()
    return {
        "mi_estimate": matched_mean - marginal_mean,
        "mi_upper_bound": math.log(num_cols),
        "conditional_entropy": -matched_mean,
        "reasoning_entropy": -marginal_mean,
        "matched_mean": matched_mean,
        "marginal_mean": marginal_mean,
        "marginal_std": marginal_std,
        "mi_zscore": _zscore(gap_mean, marginal_std, std_eps),
        "mi_zscore_ema": _zscore(gap_mean, s_ema, std_eps),
    }


def _zscore(gap_mean: float, spread: float, std_eps: float) -> float:
    """gap / (spread + std_eps), or NaN when spread < std_eps (undefined: see the module docstring).

    >>> round(_zscore(0.2, 0.1, 1e-3), 6), math.isnan(_zscore(-0.174, 0.0, 1e-3))  # 0.2 / 0.101
    (1.980198, True)
    """
    return gap_mean / (spread + std_eps) if spread >= std_eps else math.nan


def _retrieval_terms(
    scores: torch.Tensor, true_col: torch.Tensor, group: torch.Tensor, ks: tuple[int, ...]
) -> dict[str, float]:
    num_cols = scores.shape[1]
    equivalent = group[None, :] == group[true_col][:, None]  # (M, N) True = same prompt as row's true column
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices  # (M, N) ties: lower index first
    # The true column is always equivalent to itself, so every row has a first hit.
    first_hit = equivalent.gather(1, order).to(torch.int64).argmax(dim=1)  # (M,) 0-based rank
    chance = (equivalent.sum(dim=1).to(torch.float64) / num_cols).mean().item()
    out: dict[str, float] = {}
    for k in sorted({1, *ks}):
        k_eff = min(k, num_cols)
        acc = (first_hit < k_eff).to(torch.float64).mean().item()
        chance_k = min(1.0, k_eff * chance)
        suffix = "" if k == 1 else f"@{k}"
        out[f"retrieval_acc{suffix}"] = acc
        out[f"retrieval_chance{suffix}"] = chance_k
        out[f"retrieval_above_chance{suffix}"] = acc - chance_k
    return out


def _validate(
    logp: torch.Tensor, true_col: torch.Tensor, col_group: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Check the inputs and return (float64 scores, int64 true_col, int64 col_group) on logp's device."""
    if not isinstance(logp, torch.Tensor) or logp.dim() != 2 or not logp.is_floating_point():
        got = (
            f"{logp.dtype} tensor of shape {tuple(logp.shape)}"
            if isinstance(logp, torch.Tensor)
            else type(logp).__name__
        )
        raise ValueError(f"logp must be a 2-D float tensor (M reasonings, N prompts), got {got}")
    num_rows, num_cols = logp.shape
    if num_rows < 1 or num_cols < 1:
        raise ValueError(f"logp needs M >= 1 rows and N >= 1 columns, got shape {tuple(logp.shape)}")
    if not torch.isfinite(logp).all():
        bad = int((~torch.isfinite(logp)).sum())
        raise ValueError(
            f"logp must be finite, got {bad} NaN/inf entries in shape {tuple(logp.shape)}; "
            "drop rows with empty reasonings before scoring"
        )
    true_col = _check_index("true_col", true_col, num_rows)
    if true_col.min() < 0 or true_col.max() >= num_cols:
        raise ValueError(
            f"true_col must index a column in [0, {num_cols}), got values from {int(true_col.min())} "
            f"to {int(true_col.max())}"
        )
    if col_group is None:
        group = torch.arange(num_cols)
    else:
        group = _check_index("col_group", col_group, num_cols)
    device = logp.device
    return logp.to(torch.float64), true_col.to(device), group.to(device)


def _check_index(name: str, index: torch.Tensor, length: int) -> torch.Tensor:
    if not isinstance(index, torch.Tensor) or index.is_floating_point() or index.dtype == torch.bool:
        got = index.dtype if isinstance(index, torch.Tensor) else type(index).__name__
        raise ValueError(f"{name} must be an integer (long) tensor, got {got}")
    if index.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},), got {tuple(index.shape)}")
    return index.to(torch.int64)


def _check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    ks = tuple(ks)
    if not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in ks):
        raise ValueError(f"ks must be integers >= 1, got {ks!r}; e.g. ks=(1, 2, 4, 8)")
    return ks


def _finite(name: str, value: float) -> float:
    """``value`` as a Python float; ValueError if it is not a finite real number."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite real number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    return number


def _check_decay(decay: float) -> float:
    decay = _finite("ZScoreEMA.decay", decay)
    if not 0 <= decay < 1:
        raise ValueError(f"ZScoreEMA.decay must be in [0, 1), got {decay!r}; the reference uses 0.9")
    return decay


def _check_std(name: str, value: float) -> float:
    value = _finite(name, value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0 (it is a standard deviation), got {value!r}")
    return value
