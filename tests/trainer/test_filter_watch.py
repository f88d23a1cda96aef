"""The softmax-mode keep warning: once, after a streak of near-total keeps, never in linear mode."""

import doctest

from mirl.trainer import filter_watch
from mirl.trainer.filter_watch import SoftmaxKeepWatch


def test_doctests():
    assert doctest.testmod(filter_watch).failed == 0


def test_the_streak_must_be_consecutive_and_the_mode_softmax():
    watch = SoftmaxKeepWatch(mode="softmax", strategy="top_p")
    kept = [0.9, 0.9, 0.5, 0.9, 0.9, 0.9, 0.9]  # the 0.5 breaks the first streak
    said = [watch.check(i, {"filter/kept_ratio": k}) for i, k in enumerate(kept, start=1)]
    assert [s is not None for s in said] == [False, False, False, False, False, True, False]
    assert "iteration 6: 90%" in said[5] and "filter.mode=linear" in said[5]
    linear = SoftmaxKeepWatch(mode="linear", strategy="top_p")
    assert all(linear.check(i, {"filter/kept_ratio": 1.0}) is None for i in range(1, 6))
    off = SoftmaxKeepWatch(mode="softmax", strategy="none")
    assert all(off.check(i, {"filter/kept_ratio": 1.0}) is None for i in range(1, 6))
    assert SoftmaxKeepWatch(mode="softmax", strategy="top_p").check(1, {}) is None  # an empty step logs nothing
