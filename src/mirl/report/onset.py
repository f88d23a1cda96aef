"""Where template collapse set in: the first diagnosed iteration at which input dependence fell beyond its noise,
and whether H(Z|X) stayed up there (docs/metrics.md, "Run verdict").

Template collapse is retrieval accuracy R (how well a reasoning picks out its own prompt) falling while the
conditional entropy H stays where it was: the reasonings stay varied but stop depending on the input. When H falls
with R, the policy is converging or collapsing to low entropy, a different story. The rule reads the per-token
(``est``) family of one scope, over the iterations that logged both series, so an evaluation schedule of every
k iterations is handled without gaps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mirl.report.rundir import Metrics

MIN_ITERATIONS = 15  # diagnosed iterations needed before any onset is named
WINDOW = 5  # trailing mean over this many diagnosed iterations
BAND_SDS = 3.0  # a fall is a drop of more than this many SDs of a WINDOW-iteration mean
NOISE_FLOOR = 1e-3  # the SD used when the series has none (a constant series)
MAD_TO_SD = 1.4826  # median absolute deviation -> SD of a normal distribution


@dataclass(frozen=True)
class Onset:
    """The first fall of the smoothed retrieval accuracy R5 below its best so far (see :func:`collapse_onset`)."""

    iteration: int  # where R5 fell
    reference: int  # where R5 had its best value so far
    retrieval: tuple[float, float]  # R5 at the reference, at the onset
    entropy: tuple[float, float]  # H5 at the reference, at the onset (nats/token)
    entropy_held: bool  # True: H5 stayed within its band (template collapse); False: it fell with R5


def _noise(values: np.ndarray) -> float:
    """The iteration-to-iteration noise SD: 1.4826 * median |v_i - v_(i-1)| / sqrt(2), robust to the steps and
    trends a collapse makes (a spread taken over the first iterations would count an early collapse as noise);
    NOISE_FLOOR when it is 0 or undefined.

    >>> round(_noise(np.array([0.30, 0.32, 0.30, 0.32, 0.0])), 5)  # median |diff| 0.02 -> 1.4826 * 0.02 / sqrt(2)
    0.02097
    """
    sd = MAD_TO_SD * float(np.median(np.abs(np.diff(np.asarray(values, dtype=np.float64))))) / math.sqrt(2)
    return sd if sd > 0 else NOISE_FLOOR  # nan > 0 is False


def collapse_onset(iterations: np.ndarray, retrieval: np.ndarray, entropy: np.ndarray) -> Onset | None:
    """The first diagnosed iteration at which retrieval accuracy fell beyond its noise, or None.

    Over the T diagnosed iterations (arrays of shape (T,), ascending iterations), with w = WINDOW = 5:

    - none when T < 15;
    - noise: s_R = 1.4826 median |R_i - R_(i-1)| / sqrt(2) over the whole run (:func:`_noise`), s_H likewise;
    - smoothing: R5(i), H5(i) = means of the last 5 diagnosed values, defined from the 5th on;
    - reference: ref(i) = the first diagnosed iteration where R5 is largest so far (up to i);
    - R fell at i when R5(i) < R5(ref) - 3 s_R / sqrt(5); H stayed up when H5(i) >= H5(ref) - 3 s_H / sqrt(5).

    The onset is the first i where R fell; ``entropy_held`` says whether H stayed up there (template collapse) or
    fell too. Later falls are not reported. A collapse inside the first 5 iterations is dated by the first
    5-iteration mean that lies beyond the band of the first one.

    R alternates 0.30 / 0.32 for 10 iterations, then drops 0.05 per iteration; H is constant. The median |diff| is
    0.02, s_R = 1.4826 * 0.02 / sqrt(2) = 0.02097, band 3 s_R / sqrt(5) = 0.02813; the best R5 is 0.312 (iterations
    2..6); R5 at 12 is (0.32 + 0.30 + 0.32 + 0.30 + 0.25) / 5 = 0.298 >= 0.2839, at 13 it is 0.274 < 0.2839:

    >>> r = np.array([0.30, 0.32] * 5 + [0.30, 0.25, 0.20, 0.15, 0.10])
    >>> found = collapse_onset(np.arange(1, 16), r, np.full(15, 2.0))
    >>> found.iteration, found.reference, [round(v, 3) for v in found.retrieval], found.entropy_held
    (13, 6, [0.312, 0.274], True)
    """
    if not len(iterations) == len(retrieval) == len(entropy):
        raise ValueError(
            f"iterations, retrieval and entropy must have one value per diagnosed iteration, got lengths "
            f"{len(iterations)}, {len(retrieval)} and {len(entropy)}"
        )
    if len(iterations) < MIN_ITERATIONS:
        return None
    band_r = BAND_SDS * _noise(retrieval) / math.sqrt(WINDOW)
    band_h = BAND_SDS * _noise(entropy) / math.sqrt(WINDOW)
    windows = np.lib.stride_tricks.sliding_window_view
    r5 = windows(np.asarray(retrieval, dtype=np.float64), WINDOW).mean(axis=1)  # (T - 4,): r5[j] ends at j + 4
    h5 = windows(np.asarray(entropy, dtype=np.float64), WINDOW).mean(axis=1)  # (T - 4,)
    for j in range(1, len(r5)):
        ref = int(np.argmax(r5[: j + 1]))
        if r5[j] < r5[ref] - band_r:
            return Onset(
                iteration=int(iterations[j + WINDOW - 1]),
                reference=int(iterations[ref + WINDOW - 1]),
                retrieval=(float(r5[ref]), float(r5[j])),
                entropy=(float(h5[ref]), float(h5[j])),
                entropy_held=bool(h5[j] >= h5[ref] - band_h),
            )
    return None


def onset_of(metrics: Metrics, scope: str) -> Onset | None:
    """:func:`collapse_onset` of ``diag/{scope}/est/retrieval_acc`` and ``.../conditional_entropy``, over the
    iterations that logged both."""
    retrieval = metrics.get(f"diag/{scope}/est/retrieval_acc")
    entropy = metrics.get(f"diag/{scope}/est/conditional_entropy")
    if retrieval is None or entropy is None:
        return None
    iterations, at_r, at_h = np.intersect1d(
        retrieval.iterations, entropy.iterations, assume_unique=True, return_indices=True
    )
    return collapse_onset(iterations, retrieval.values[at_r], entropy.values[at_h])
