"""A warning for a filter that keeps almost everything: softmax-mode top-p on rewards whose groups tie.

The paper's main table runs the SNR-Aware filter in softmax mode. Softmax turns the group scores into weights
``exp(s_g) / sum exp(s_h)``; when most groups have the same spread (binary rewards, where a group's std takes few
values) the weights are nearly uniform and top-p 0.9 keeps nearly every group: with 4 of 8 groups half solved
and 4 unsolved it keeps 7, where linear mode keeps the 4 with spread. Such a run is close to no filtering at all,
which a user comparing "filter on" with "filter off" should know.

>>> watch = SoftmaxKeepWatch(mode="softmax", strategy="top_p")
>>> [watch.check(i, {"filter/kept_ratio": 0.875}) is not None for i in (1, 2, 3, 4)]
[False, False, True, False]
"""

from __future__ import annotations

KEEP_SHARE, STREAK = 0.8, 3  # warn when more than 80 % of groups are kept for 3 iterations in a row


class SoftmaxKeepWatch:
    """``check(iteration, metrics)`` -> the warning once, when a softmax-mode filter keeps > 80 % of groups for
    ``STREAK`` consecutive iterations; None otherwise (and always for other modes)."""

    def __init__(self, *, mode: str, strategy: str) -> None:
        self.active = mode == "softmax" and strategy != "none"
        self.streak, self.warned = 0, False

    def check(self, iteration: int, metrics: dict) -> str | None:
        kept = metrics.get("filter/kept_ratio")
        if not self.active or self.warned or not isinstance(kept, int | float):
            return None
        self.streak = self.streak + 1 if kept > KEEP_SHARE else 0
        if self.streak < STREAK:
            return None
        self.warned = True
        return (
            f"the softmax-mode filter kept more than {KEEP_SHARE:.0%} of the groups for {STREAK} iterations in a row "
            f"(iteration {iteration}: {kept:.0%}); on rewards whose groups mostly tie in spread softmax top-p keeps "
            "nearly everything. filter.mode=linear ranks by spread itself"
        )
