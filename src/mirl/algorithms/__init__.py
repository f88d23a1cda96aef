"""The numeric RL core: advantages (episode- and turn-level credit), losses, aggregation, presets. Torch and math only.

Nothing here imports a model, tokenizer, config or logger: arguments are tensors and numbers, so the native
trainer and the integrations share one implementation and tests check it with hand-made tensors.
"""

from mirl.algorithms.advantages import gae_advantages, grpo_advantages, returns_on_last_token, whiten
from mirl.algorithms.aggregation import AGGREGATIONS, aggregate, aggregation_normaliser
from mirl.algorithms.credit import (
    CREDIT_ESTIMATOR,
    bilevel_gae,
    discounted_returns,
    step_group_advantages,
    turn_return_advantages,
    turn_values_on_tokens,
)
from mirl.algorithms.logits import entropy_from_logits, logprobs_from_logits
from mirl.algorithms.losses import KL_ESTIMATORS, kl_penalty, policy_loss, value_loss
from mirl.algorithms.masked import masked_mean, masked_sum, masked_var
from mirl.algorithms.objective import loss_terms
from mirl.algorithms.presets import (
    ADVANTAGE_ESTIMATORS,
    PRESETS,
    AlgorithmPreset,
    compute_advantages,
    get_preset,
)
from mirl.algorithms.rollout_correction import CORRECTIONS, correction_weights, mismatch_stats

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "CORRECTIONS",
    "CREDIT_ESTIMATOR",
    "KL_ESTIMATORS",
    "PRESETS",
    "AlgorithmPreset",
    "aggregate",
    "aggregation_normaliser",
    "bilevel_gae",
    "discounted_returns",
    "compute_advantages",
    "correction_weights",
    "entropy_from_logits",
    "gae_advantages",
    "get_preset",
    "grpo_advantages",
    "kl_penalty",
    "logprobs_from_logits",
    "loss_terms",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "mismatch_stats",
    "policy_loss",
    "returns_on_last_token",
    "step_group_advantages",
    "turn_return_advantages",
    "turn_values_on_tokens",
    "value_loss",
    "whiten",
]
