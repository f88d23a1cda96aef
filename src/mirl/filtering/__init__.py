"""SNR-Aware Filtering: choose the prompt groups (and rollouts) an RL update trains on.

Pure numeric core (torch and math only): arguments are tensors and numbers, so the native trainer, the veRL
plugin and the TRL adapter share the exact same selection.

>>> import torch
>>> from mirl.filtering import select_groups
>>> returns = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])  # (P=3, K=2); stds 0.707.., 0, 0
>>> select_groups(returns, strategy="top_p", value=0.9).keep.tolist()
[True, False, False]
"""

from mirl.filtering.metrics import selection_metrics, spread_ratio, upstream_metrics
from mirl.filtering.rules import RULES, TOP_P_MODES, rank_groups
from mirl.filtering.scores import (
    SPREAD_RTOL,
    STATISTICS,
    classify_groups,
    group_scores,
    group_spread,
    has_spread,
)
from mirl.filtering.select import Selection, select_groups, select_trajectories
from mirl.filtering.turns import turn_signal_metrics, turn_spread

__all__ = [
    "RULES",
    "SPREAD_RTOL",
    "STATISTICS",
    "TOP_P_MODES",
    "Selection",
    "classify_groups",
    "group_scores",
    "group_spread",
    "has_spread",
    "rank_groups",
    "select_groups",
    "select_trajectories",
    "selection_metrics",
    "spread_ratio",
    "turn_signal_metrics",
    "turn_spread",
    "upstream_metrics",
]
