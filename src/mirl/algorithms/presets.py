"""Algorithm presets: PPO, DAPO, GRPO and Dr. GRPO as data.

The four algorithms of the paper's main table differ only in the advantage estimator, its scaling, the clip
range, the critic and the loss aggregation (REFERENCE.md section 6). A preset names those choices; a trainer
reads them and never branches on the algorithm's name:

    preset = get_preset("grpo", entropy_coef=0.0)
    advantages, value_targets = compute_advantages(preset, group_returns=returns, mask=mask)
    loss, stats = policy_loss(logp, old_logp, advantages, mask, eps_low=preset.eps_low,
                              eps_high=preset.eps_high, dual_clip=preset.dual_clip, agg=preset.agg)

Deliberate deviations from the reference: its base config uses eps 0.2 / 0.28 for every algorithm, so its
"ppo" and "dapo" runs are one configuration; here ppo clips symmetrically (0.2 / 0.2) and dapo is PPO with
clip-higher (0.28). grpo and dr_grpo keep the reference's 0.2 / 0.28. dr_grpo aggregates with
seq-mean-token-sum as the paper's table configures it (the Dr. GRPO paper's constant normaliser is
available as ``agg="seq-mean-token-sum-norm"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from mirl.algorithms._table import did_you_mean, lookup
from mirl.algorithms.advantages import gae_advantages, grpo_advantages, returns_on_last_token, whiten
from mirl.algorithms.aggregation import AGGREGATIONS
from mirl.algorithms.credit import CREDIT_ESTIMATOR
from mirl.algorithms.losses import KL_ESTIMATORS
from mirl.algorithms.masked import check_mask

AdvantageEstimator = Callable[..., tuple[Tensor, Tensor | None]]


@dataclass(frozen=True)
class AlgorithmPreset:
    """The choices that make an RL algorithm out of the shared PPO-style update."""

    name: str  # preset name, for logs
    estimator: str  # advantage estimator, a key of ADVANTAGE_ESTIMATORS: "gae" (critic) | "grpo" (group)
    scale_by_std: bool  # grpo: divide group-centred returns by the group std (False = Dr. GRPO)
    agg: str  # loss aggregation, a key of AGGREGATIONS
    eps_low: float  # ratio clip below: 1 - eps_low
    eps_high: float  # ratio clip above: 1 + eps_high (> eps_low = clip-higher)
    dual_clip: float | None  # bound -A * c on the loss of negative-advantage tokens; None = off
    use_critic: bool  # train a value head (required by the gae estimator)
    whiten_advantages: bool  # normalise advantages over the batch's trained tokens
    kl_coef: float = 0.0  # weight of the KL(pi || pi_ref) penalty in the loss; 0 = no reference model
    kl_kind: str = "k3"  # KL estimator, a key of KL_ESTIMATORS
    entropy_coef: float = 0.001  # weight of the entropy bonus (subtracted from the loss)
    task_coef: float = 1.0  # weight of the task (policy-gradient) term; 0 leaves the regularisers alone
    value_clip: float | None = 0.5  # largest move of a value from its old estimate that gets a gradient
    gamma: float = 1.0  # discount per trained token (gae)
    lam: float = 1.0  # GAE lambda (gae)
    credit: str = "episode"  # credit assignment, a key of CREDIT_ESTIMATOR (mirl.algorithms.credit)
    credit_gamma: float = 1.0  # discount per turn of turn-level returns (turn, step_groups) and turn-level GAE
    credit_lam: float = 1.0  # turn-level GAE lambda (bilevel_gae)
    step_weight: float = 1.0  # weight of the step-group advantage (step_groups)

    def __post_init__(self) -> None:
        lookup(ADVANTAGE_ESTIMATORS, self.estimator, f"preset {self.name!r}: advantage estimator")
        lookup(AGGREGATIONS, self.agg, f"preset {self.name!r}: aggregation")
        lookup(KL_ESTIMATORS, self.kl_kind, f"preset {self.name!r}: KL estimator")
        needed = lookup(CREDIT_ESTIMATOR, self.credit, f"preset {self.name!r}: credit")
        if needed is not None and needed != self.estimator:
            raise ValueError(
                f"preset {self.name!r}: credit {self.credit!r} works with the {needed!r} estimator, got "
                f"{self.estimator!r}; pick a preset with {needed!r} ({CREDIT_PRESETS[needed]}) or credit='episode'"
            )
        if self.estimator == "gae" and not self.use_critic:
            raise ValueError(
                f"preset {self.name!r}: estimator 'gae' needs values; set use_critic=True or estimator='grpo'"
            )
        checks = {
            "0 <= eps_low < 1": 0.0 <= self.eps_low < 1.0,
            "eps_high >= 0": self.eps_high >= 0.0,
            "dual_clip > 1 or None": self.dual_clip is None or self.dual_clip > 1.0,
            "value_clip > 0 or None": self.value_clip is None or self.value_clip > 0.0,
            "kl_coef >= 0 and entropy_coef >= 0": self.kl_coef >= 0.0 and self.entropy_coef >= 0.0,
            "task_coef >= 0": self.task_coef >= 0.0,
            "0 <= gamma <= 1 and 0 <= lam <= 1": 0.0 <= self.gamma <= 1.0 and 0.0 <= self.lam <= 1.0,
            "0 <= credit_gamma <= 1 and 0 <= credit_lam <= 1": 0.0 <= self.credit_gamma <= 1.0
            and 0.0 <= self.credit_lam <= 1.0,
            "step_weight >= 0": self.step_weight >= 0.0,
        }
        broken = [rule for rule, holds in checks.items() if not holds]
        if broken:
            raise ValueError(f"preset {self.name!r} breaks {broken}: {self}")


CREDIT_PRESETS = {"grpo": "grpo, dr_grpo", "gae": "ppo, dapo"}


def _check_rows(group_returns: Tensor, mask: Tensor) -> None:
    check_mask(mask)
    if group_returns.ndim != 2 or mask.ndim != 2 or group_returns.numel() != mask.shape[0]:
        raise ValueError(
            f"group_returns (P, K) must hold one return per mask row (B = P * K, row p * K + k), got "
            f"{tuple(group_returns.shape)} returns for mask {tuple(mask.shape)}"
        )


def _gae_estimator(
    preset: AlgorithmPreset,
    group_returns: Tensor,
    mask: Tensor,
    values: Tensor | None,
    token_rewards: Tensor | None,
) -> tuple[Tensor, Tensor]:
    if values is None:
        raise ValueError(f"preset {preset.name!r} estimates advantages with GAE and needs the critic's values (B, T)")
    if token_rewards is None:
        token_rewards = returns_on_last_token(group_returns.reshape(-1), mask)  # (B, T)
    advantages, returns = gae_advantages(token_rewards, values, mask, gamma=preset.gamma, lam=preset.lam)
    if preset.whiten_advantages:
        advantages = whiten(advantages, mask)
    return advantages, returns


def _grpo_estimator(
    preset: AlgorithmPreset,
    group_returns: Tensor,
    mask: Tensor,
    values: Tensor | None,
    token_rewards: Tensor | None,
) -> tuple[Tensor, None]:
    if values is not None or token_rewards is not None:
        raise ValueError(
            f"preset {preset.name!r} uses group returns only and would ignore values / token_rewards; "
            "pass neither, or use a gae preset (ppo, dapo) for per-token credit"
        )
    per_row = grpo_advantages(group_returns, scale_by_std=preset.scale_by_std).reshape(-1, 1)  # (B, 1)
    advantages = torch.where(mask, per_row, per_row.new_zeros(()))  # (B, T): broadcast to trained tokens
    if preset.whiten_advantages:
        advantages = whiten(advantages, mask)
    return advantages, None


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {"gae": _gae_estimator, "grpo": _grpo_estimator}
"""name -> f(preset, group_returns, mask, values, token_rewards) -> (advantages, value targets or None)."""


def compute_advantages(
    preset: AlgorithmPreset,
    *,
    group_returns: Tensor,
    mask: Tensor,
    values: Tensor | None = None,
    token_rewards: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Per-token advantages (B, T) and value targets (B, T) (None without a critic) by ``preset.estimator``.

    Args:
        preset: the algorithm.
        group_returns: (P, K) episode returns; row ``p * K + k`` of ``mask`` is sample k of prompt p.
        mask: (B, T) bool, True = trained (model-generated) token.
        values: (B, T) detached critic values; required by gae, refused by grpo.
        token_rewards: (B, T) per-token rewards for gae; default = each episode return on its row's last
            trained token. Refused by grpo.
    """
    _check_rows(group_returns, mask)
    return ADVANTAGE_ESTIMATORS[preset.estimator](preset, group_returns, mask, values, token_rewards)


_PPO = AlgorithmPreset(
    name="ppo",
    estimator="gae",
    scale_by_std=False,
    agg="token-mean",
    eps_low=0.2,
    eps_high=0.2,
    dual_clip=3.0,
    use_critic=True,
    whiten_advantages=True,
)
_GRPO = AlgorithmPreset(
    name="grpo",
    estimator="grpo",
    scale_by_std=True,
    agg="seq-mean-token-mean",
    eps_low=0.2,
    eps_high=0.28,
    dual_clip=3.0,
    use_critic=False,
    whiten_advantages=False,
)
PRESETS: dict[str, AlgorithmPreset] = {
    "ppo": _PPO,
    "dapo": dataclasses.replace(_PPO, name="dapo", eps_high=0.28),
    "grpo": _GRPO,
    "dr_grpo": dataclasses.replace(_GRPO, name="dr_grpo", scale_by_std=False, agg="seq-mean-token-sum"),
}


def get_preset(name: str, **overrides) -> AlgorithmPreset:
    """The preset called ``name`` with any field replaced by ``overrides`` (validated again).

    >>> get_preset("dapo", entropy_coef=0.0).eps_high
    0.28
    """
    preset = lookup(PRESETS, name, "algorithm preset")
    fields = {field.name for field in dataclasses.fields(AlgorithmPreset)}
    for key in overrides:
        if key not in fields:
            raise ValueError(
                f"AlgorithmPreset has no field {key!r}{did_you_mean(key, fields)}; fields: {sorted(fields)}"
            )
    return dataclasses.replace(preset, **overrides)
