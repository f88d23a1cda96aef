"""The sampler/trainer log-prob mismatch over iterations (``rollout/logp_diff_*``, docs/gpu.md).

Left: mean and max |log pi_old - log mu| per trained token on a log axis (float32 sampling sits near 1e-6, bfloat16
near 1e-2, so a linear axis would hide one of them). Right: the sequence-level KL estimate, the share of tokens
whose ratio leaves [0.5, 2] and, when a rollout correction ran, the share of tokens its cap changed.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from mirl.report.plots import _lines, align_x, finish, new_figure
from mirl.report.rundir import Metrics

DIFFS = (("rollout/logp_diff_mean", "mean |d|"), ("rollout/logp_diff_max", "max |d|"))
SHARES = (
    ("rollout/mismatch_kl", "KL(sampler || trainer) per sequence"),
    ("rollout/ratio_outside_frac", "tokens with ratio outside [0.5, 2]"),
    ("rollout/correction_frac", "tokens the correction's cap changed"),
)


def mismatch_figure(metrics: Metrics) -> tuple[Figure | None, list[str]]:
    """Two panels of the mismatch metrics; None (with a note) for a run that never measured it."""
    if metrics.get("rollout/logp_diff_mean") is None:
        return None, ["rollout/logp_diff_mean not logged (algorithm.mismatch_every=0, or a run before it existed)"]
    figure, axes = new_figure(1, 2, 11, 3.6)
    notes = [f"{key} not logged" for key in _lines(axes[0, 0], metrics, DIFFS)]
    positive = [line for line in axes[0, 0].lines if (line.get_ydata() > 0).any()]
    if positive:
        axes[0, 0].set_yscale("log")
    finish(axes[0, 0], "trainer vs sampler log-prob, per token", "nats")
    _lines(axes[0, 1], metrics, SHARES)  # correction_frac is absent without a correction: no note
    finish(axes[0, 1], "sequence KL and ratio tails", "nats / fraction", y_range="zero")
    align_x(axes, metrics)
    return figure, notes
