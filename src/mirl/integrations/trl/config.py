"""``SNRFilterGRPOConfig``: TRL's ``GRPOConfig`` with mirl's ``filter`` block as ``filter_*`` fields.

Being fields of the training arguments, the filter settings are parsed by TRL's CLI and YAML loader
(``TrlParser``, ``HfArgumentParser``), printed with the arguments, saved with the run (``training_args.bin``,
``args.to_dict()`` in every logger's run config) and restored on resume, like every other GRPO setting.

``filter_strategy`` has no default: a filtered trainer whose filter nobody chose would change the training signal
silently, so :class:`~mirl.integrations.trl.SNRFilterGRPOTrainer` refuses ``None`` and says what to set. The
other fields default to mirl's ``FilterConfig`` defaults (linear top-p 0.9 on the in-group reward std, zero-spread
groups out of the ranking).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from trl import GRPOConfig

from mirl.config import FilterConfig

_DEFAULT = FilterConfig()
# FilterConfig fields with no filter_* field: TRL's batch carries episode returns only, so groups are ranked by
# their episode spread (signal "episode"), never by turn-level advantages
NOT_IN_TRL = frozenset({"signal"})


def _help(text: str, default=None):
    return field(default=default, metadata={"help": text})


@dataclass
class SNRFilterGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus SNR-Aware Filtering (``filter_*`` = the fields of mirl's ``filter`` block)."""

    filter_strategy: str | None = _help(
        "SNR-Aware Filtering strategy: top_p, top_k, top_k_abs, min_p, band, or none (no filtering). Required."
    )
    filter_value: float = _help("p for top_p / min_p, fraction for top_k, count for top_k_abs.", _DEFAULT.value)
    filter_mode: str = _help("linear (recommended) or softmax (the paper's main table).", _DEFAULT.mode)
    filter_statistic: str = _help("Per-group score: std (reference), var, mean, sum.", _DEFAULT.statistic)
    filter_include_zero: bool = _help("Keep zero-score groups in the ranking.", _DEFAULT.include_zero)
    filter_largest: bool = _help("Rank largest scores first; false inverts the ranking.", _DEFAULT.largest)
    filter_eps: float = _help("Slack subtracted from the top-p mass target.", _DEFAULT.eps)
    filter_band_lo: float = _help("Lower end of the rank range kept by strategy band.", _DEFAULT.band_lo)
    filter_band_hi: float = _help("Upper end of the rank range kept by strategy band.", _DEFAULT.band_hi)
    filter_trajectories_per_group: int = _help(
        "Keep this many trajectories per kept group (top and bottom halves); 0 = all.", _DEFAULT.trajectories_per_group
    )
    filter_success_threshold: float = _help(
        "A return at or above this counts as success when labelling groups.", _DEFAULT.success_threshold
    )

    @property
    def filter_config(self) -> FilterConfig:
        """The ``filter_*`` fields as mirl's :class:`FilterConfig`; ``ValueError`` when no strategy was chosen."""
        if self.filter_strategy is None:
            raise ValueError(
                "SNRFilterGRPOConfig.filter_strategy is not set; choose the filter explicitly, e.g. "
                "filter_strategy='top_p' (with filter_value=0.9), or filter_strategy='none' to train unfiltered"
            )
        names = [f.name for f in dataclasses.fields(FilterConfig) if f.name not in NOT_IN_TRL]
        return FilterConfig(**{name: getattr(self, f"filter_{name}") for name in names})
