"""mirl inside Hugging Face TRL 1.16 (optional extra ``trl``): the filter, the diagnostics and the envs.

- :class:`SNRFilterGRPOTrainer` + :class:`SNRFilterGRPOConfig`: ``GRPOTrainer`` with SNR-Aware Filtering on the raw
  rewards of each batch, set by ``filter_*`` fields of the training arguments.
- :class:`CollapseDiagnosticsCallback`: the ``diag/*`` MI proxies of the last batch, logged to TRL's logger.
- :class:`MirlRollout`, :func:`dataset`, :func:`episode_return`: any registered mirl env played multi-turn
  through TRL's ``rollout_func``, token-in/token-out, env tokens masked out of the loss.
- :class:`MirlEnvironment`, :func:`environment_dataset`: any mirl env (or ``mirl.Task``) as a TRL
  ``environment_factory`` environment, acting through one tool.

Importing this package needs ``pip install 'mirl[trl]'`` (``trl>=1.16,<1.17``).
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("trl") is None:  # pragma: no cover - exercised only without the extra
    raise ImportError("mirl.integrations.trl needs TRL 1.16: pip install 'mirl[trl]'")

from mirl.integrations.trl.config import SNRFilterGRPOConfig  # noqa: E402
from mirl.integrations.trl.diagnostics import CollapseDiagnosticsCallback  # noqa: E402
from mirl.integrations.trl.environment import MirlEnvironment, environment_dataset  # noqa: E402
from mirl.integrations.trl.envs import MirlRollout, dataset, episode_return, parse_instance  # noqa: E402
from mirl.integrations.trl.filter import (  # noqa: E402
    SNRFilterGRPOTrainer,
    compact_rows,
    filter_rows,
    mask_dropped_rows,
)

__all__ = [
    "CollapseDiagnosticsCallback",
    "MirlEnvironment",
    "MirlRollout",
    "SNRFilterGRPOConfig",
    "SNRFilterGRPOTrainer",
    "compact_rows",
    "dataset",
    "environment_dataset",
    "episode_return",
    "filter_rows",
    "mask_dropped_rows",
    "parse_instance",
]
