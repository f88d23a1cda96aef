"""Where template collapse set in: the iteration at which input dependence fell to a lower level beyond its noise,
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
MIN_BEFORE, MIN_AFTER = 1, 3  # diagnosed iterations before and after a change point at least
Z_FALL = 4.0  # the drop in mean retrieval must exceed this many standard errors (many splits are tried)
Z_ENTROPY = 3.0  # H(Z|X) fell with it when its mean dropped by more than this many standard errors
NOISE_FLOOR = 1e-3  # the SD used when the series has none (a constant series)
MAD_TO_SD = 1.4826  # median absolute deviation -> SD of a normal distribution


@dataclass(frozen=True)
class Onset:
    """The change point of retrieval accuracy R (see :func:`collapse_onset`)."""

    iteration: int  # the first iteration after the change
    retrieval: tuple[float, float]  # mean R before, after
    entropy: tuple[float, float]  # mean H before, after (nats/token)
    z: float  # the drop of R in standard errors
    entropy_held: bool  # True: H did not fall (template collapse when H is high); False: it fell with R


def _noise(values: np.ndarray) -> float:
    """The iteration-to-iteration noise SD: 1.4826 * median |v_i - v_(i-1)| / sqrt(2), robust to the steps and
    trends a collapse makes (a plain SD would count the collapse itself as noise); NOISE_FLOOR when it is 0 or
    undefined.

    >>> round(_noise(np.array([0.30, 0.32, 0.30, 0.32, 0.0])), 5)  # median |diff| 0.02 -> 1.4826 * 0.02 / sqrt(2)
    0.02097
    """
    sd = MAD_TO_SD * float(np.median(np.abs(np.diff(np.asarray(values, dtype=np.float64))))) / math.sqrt(2)
    return sd if sd > 0 else NOISE_FLOOR  # nan > 0 is False


def collapse_onset(iterations: np.ndarray, retrieval: np.ndarray, entropy: np.ndarray) -> Onset | None:
    """The iteration at which retrieval accuracy fell to a lower level for the rest of the run, or None.

    Over the T diagnosed iterations (arrays of shape (T,), ascending iterations): none when T < 15. Noise
    s_R = 1.4826 median |R_i - R_(i-1)| / sqrt(2) (:func:`_noise`), s_H likewise. For each split k with at least
    1 iteration before and 3 after, the drop z(k) = (mean R[:k] - mean R[k:]) / (s_R sqrt(1/k + 1/(T - k))); the
    change point k* maximises z, and R fell when z(k*) >= 4 (a threshold for the largest of many tried splits).
    H fell with it when mean H[:k*] - mean H[k*:] > 3 s_H sqrt(1/k* + 1/(T - k*)). A single change point: a
    slow decline is dated where its two sides differ most; a dip that recovers barely moves the means.

    R is 0.30 / 0.32 alternating for 10 iterations, then 0.10 / 0.12; H is constant. s_R = 1.4826 * 0.02 /
    sqrt(2) = 0.02097 (the one 0.2 step does not move the median); at k = 10 the drop is 0.20 with standard error
    0.02097 * sqrt(2 / 10) = 0.00938, z = 21.3:

    >>> r = np.array([0.30, 0.32] * 5 + [0.10, 0.12] * 5)
    >>> found = collapse_onset(np.arange(1, 21), r, np.full(20, 2.0))
    >>> found.iteration, [round(v, 3) for v in found.retrieval], round(found.z, 1), found.entropy_held
    (11, [0.31, 0.11], 21.3, True)
    """
    if not len(iterations) == len(retrieval) == len(entropy):
        raise ValueError(
            f"iterations, retrieval and entropy must have one value per diagnosed iteration, got lengths "
            f"{len(iterations)}, {len(retrieval)} and {len(entropy)}"
        )
    total = len(iterations)
    if total < MIN_ITERATIONS:
        return None
    r, h = np.asarray(retrieval, dtype=np.float64), np.asarray(entropy, dtype=np.float64)
    splits = np.arange(MIN_BEFORE, total - MIN_AFTER + 1)  # k: R[:k] before, R[k:] after
    prefix_r, prefix_h = np.concatenate([[0.0], np.cumsum(r)]), np.concatenate([[0.0], np.cumsum(h)])
    before_r, after_r = prefix_r[splits] / splits, (prefix_r[-1] - prefix_r[splits]) / (total - splits)
    scale = np.sqrt(1.0 / splits + 1.0 / (total - splits))  # (splits,)
    z = (before_r - after_r) / (_noise(r) * scale)
    best = int(np.argmax(z))
    if z[best] < Z_FALL:
        return None
    k = int(splits[best])
    before_h, after_h = prefix_h[k] / k, (prefix_h[-1] - prefix_h[k]) / (total - k)
    return Onset(
        iteration=int(iterations[k]),
        retrieval=(float(before_r[best]), float(after_r[best])),
        entropy=(float(before_h), float(after_h)),
        z=float(z[best]),
        entropy_held=bool(before_h - after_h <= Z_ENTROPY * _noise(h) * scale[best]),
    )


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
