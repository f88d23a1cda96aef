"""``SNRFilterGRPOConfig``: TRL's ``GRPOConfig`` with mirl's ``filter`` block as ``filter_*`` fields, and the upstream
proposal's ``reward_variance_*`` fields (TRL PR #7242).

Being fields of the training arguments, the filter settings are parsed by TRL's CLI and YAML loader
(``TrlParser``, ``HfArgumentParser``), printed with the arguments, saved with the run (``training_args.bin``,
``args.to_dict()`` in every logger's run config) and restored on resume, like every other GRPO setting.

Two ways to set the filter, which can be mixed as long as they agree:

- mirl's: ``filter_strategy`` and the other ``filter_*`` fields (same names, meanings and defaults as mirl's
  ``filter`` block; a field left at ``None`` takes mirl's default: linear top-p 0.9 on the in-group reward std,
  ddof 1, groups without spread out of the ranking);
- the upstream proposal's: ``reward_variance_filtering`` (``"top_p"`` or ``"top_k"``; ``None`` = off),
  ``reward_variance_top_p`` (0.9), ``reward_variance_top_k`` (1, a number of groups),
  ``reward_variance_filtering_include_zero`` (false), ``reward_variance_filtering_selection_eps`` (0.01): linear
  top-p on the sample variance (ddof 1), or ``top_k_abs`` (:mod:`mirl.filtering.upstream`).

A ``filter_*`` field set to a value that the ``reward_variance_*`` fields set differently is an error naming both.
The filter has no default: with neither ``filter_strategy`` nor ``reward_variance_filtering`` set,
:class:`~mirl.integrations.trl.SNRFilterGRPOTrainer` refuses the arguments and says what to set (a filtered
trainer whose filter nobody chose would change the training signal silently).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from trl import GRPOConfig

from mirl.config import FilterConfig
from mirl.filtering.upstream import read_upstream

_DEFAULT = FilterConfig()
# FilterConfig fields with no filter_* field: TRL's batch carries episode returns only, so groups are ranked by
# their episode spread (signal "episode"), never by turn-level advantages
NOT_IN_TRL = frozenset({"signal"})
# the upstream canonical name -> the TRL field (variance_ddof has none: TRL's proposal uses the sample variance)
UPSTREAM_FIELDS = {
    "enable": "reward_variance_filtering",
    "strategy": "reward_variance_filtering",
    "top_p": "reward_variance_top_p",
    "top_k": "reward_variance_top_k",
    "include_zero": "reward_variance_filtering_include_zero",
    "variance_ddof": "reward_variance_filtering",
    "selection_eps": "reward_variance_filtering_selection_eps",
}


def _help(text: str, default=None):
    return field(default=default, metadata={"help": text})


def _mirl(text: str, name: str):
    return _help(f"{text} None: mirl's default ({getattr(_DEFAULT, name)}).")


@dataclass
class SNRFilterGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus SNR-Aware Filtering: ``filter_*`` = mirl's ``filter`` block, ``reward_variance_*`` = the
    upstream proposal's fields (module docstring)."""

    filter_strategy: str | None = _help(
        "SNR-Aware Filtering strategy: top_p, top_k, top_k_abs, min_p, band, or none (no filtering). Required, "
        "unless reward_variance_filtering is set."
    )
    filter_value: float | None = _mirl("p for top_p / min_p, fraction for top_k, count for top_k_abs.", "value")
    filter_mode: str | None = _mirl("linear (recommended) or softmax (the paper's main table).", "mode")
    filter_statistic: str | None = _mirl("Per-group score: std (reference), var, mean, sum.", "statistic")
    filter_ddof: int | None = _mirl("Delta degrees of freedom of std and var: 1 (sample) or 0.", "ddof")
    filter_include_zero: bool | None = _mirl("Keep the groups without spread in the ranking.", "include_zero")
    filter_largest: bool | None = _mirl("Rank largest scores first; false inverts the ranking.", "largest")
    filter_eps: float | None = _mirl("Slack subtracted from the top-p mass target.", "eps")
    filter_band_lo: float | None = _mirl("Lower end of the rank range kept by strategy band.", "band_lo")
    filter_band_hi: float | None = _mirl("Upper end of the rank range kept by strategy band.", "band_hi")
    filter_trajectories_per_group: int | None = _mirl(
        "Keep this many trajectories per kept group (top and bottom halves); 0 = all.", "trajectories_per_group"
    )
    filter_success_threshold: float | None = _mirl(
        "A return at or above this counts as success when labelling groups.", "success_threshold"
    )
    reward_variance_filtering: str | None = _help(
        "Upstream name (TRL PR #7242): top_p or top_k filters prompt groups by reward variance; None = off."
    )
    reward_variance_top_p: float | None = _help("Upstream name: share of the variance mass to keep. None: 0.9.")
    reward_variance_top_k: int | None = _help("Upstream name: number of highest-variance groups kept. None: 1.")
    reward_variance_filtering_include_zero: bool | None = _help(
        "Upstream name: keep zero-variance groups in the ranking. None: false."
    )
    reward_variance_filtering_selection_eps: float | None = _help(
        "Upstream name: slack subtracted from the variance-mass target. None: 0.01."
    )

    @property
    def filter_config(self) -> FilterConfig:
        """The filter as mirl's :class:`FilterConfig` (module docstring); ``ValueError`` (one line) when no filter
        was chosen, for a bad upstream value, or for a field set both ways with different values."""
        names = [f.name for f in dataclasses.fields(FilterConfig) if f.name not in NOT_IN_TRL]
        given = {name: getattr(self, f"filter_{name}") for name in names}
        given = {name: value for name, value in given.items() if value is not None}
        strategy = self.reward_variance_filtering
        upstream = {key: getattr(self, name) for key, name in UPSTREAM_FIELDS.items() if key != "variance_ddof"}
        upstream["enable"] = None if strategy is None else True
        enabled_as = (
            f"reward_variance_filtering={strategy!r}" if strategy is not None else "reward_variance_filtering='top_p'"
        )
        keys = read_upstream(
            upstream,
            given,
            names=dict(UPSTREAM_FIELDS),
            mirl_prefix="filter_",
            enabled_as=enabled_as,
        )
        if "strategy" not in keys:
            raise ValueError(
                "SNRFilterGRPOConfig.filter_strategy is not set; choose the filter explicitly, e.g. "
                "filter_strategy='top_p' (with filter_value=0.9), reward_variance_filtering='top_p' (the upstream "
                "field), or filter_strategy='none' to train unfiltered"
            )
        return FilterConfig(**keys)
