"""Diagnostics: is the reasoning still input-dependent?

Only the pure MI math (``info``) is imported here, so ``from mirl.diagnostics import mi_proxies`` never loads
transformers. The model-facing parts are imported as submodules by those who need them:
``mirl.diagnostics.scoring`` (cross-scoring matrices from a policy), ``mirl.diagnostics.sampling`` (pair
samplers) and ``mirl.diagnostics.gradients`` (per reward-spread bucket gradient norms).
"""

from .info import REGIMES, RegimeThresholds, ZScoreEMA, mi_proxies, regime

__all__ = ["REGIMES", "RegimeThresholds", "ZScoreEMA", "mi_proxies", "regime"]
