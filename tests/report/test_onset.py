"""The collapse onset on constructed retrieval and H(Z|X) series: the exact iteration, the "fell together" case,
no fact for rising or short runs, its effect on health, and the dashed line in the plots."""

import doctest
import json

import numpy as np
import pytest

from mirl.diagnostics.regimes import Criteria
from mirl.report import onset as onset_module
from mirl.report.onset import collapse_onset
from mirl.report.plots import diagnostics_figure
from mirl.report.plots_key import key_figure
from mirl.report.rundir import read_run
from mirl.report.verdict import verdict

WIGGLE = np.array([0.01, -0.01] * 10)  # deterministic noise: +0.01 on odd, -0.01 on even diagnosed iterations


def falling_retrieval(diagnosed: int = 30) -> np.ndarray:
    """0.3 + WIGGLE for 20 diagnosed iterations, then 0.3 - 0.01 per iteration: 0.29, 0.28, ..."""
    return np.concatenate([0.3 + WIGGLE, 0.3 - 0.01 * np.arange(1, diagnosed - 19)])


def flat_entropy(diagnosed: int = 30) -> np.ndarray:
    return 2.4 - np.resize(WIGGLE, diagnosed)  # 2.39 on odd, 2.41 on even diagnosed iterations


def write(tmp_path, retrieval, entropy, name="run"):
    """A finished run diagnosed on even iterations only (2, 4, ...): diagnosed iteration k is iteration 2k. Each
    diagnosis is a grounded regime with 64 pairs against chance 1/16, so without an onset the run is healthy."""
    run = tmp_path / name
    run.mkdir()
    updated = {"train/optimizer_steps": 1.0, "filter/kept_ratio": 0.5, "filter/empty": 0.0}
    lines = []
    for k, (acc, cond) in enumerate(zip(retrieval, entropy, strict=True), start=1):
        lines.append({"iteration": 2 * k - 1, **updated})
        scope = "diag/trajectory"
        diag = {
            f"{scope}/regime": "diverse_grounded",
            f"{scope}/est/retrieval_acc": float(acc),
            f"{scope}/est/retrieval_chance": 0.0625,
            f"{scope}/pairs": 64,
            f"{scope}/columns": 16,
            f"{scope}/est/conditional_entropy": float(cond),
            f"{scope}/est/mi_estimate": 1.0,
            f"{scope}/sample_temperature": 1.0,
        }
        lines.append({"iteration": 2 * k, **updated, **diag})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (run / "summary.json").write_text(json.dumps({"status": "finished", "iterations_done": len(lines)}))
    return read_run(run)


def test_doctests():
    assert doctest.testmod(onset_module).failed == 0


def test_onset_at_the_known_iteration_while_entropy_stays_up(tmp_path):
    # Noise from successive differences: 19 of 0.02 (the wiggle), one 0 (0.29 -> 0.29 at k = 21), nine 0.01; the
    # median of the 29 is 0.02, s_R = 1.4826 x 0.02 / sqrt(2) = 0.020968, band = 3 s_R / sqrt 5 = 0.028132.
    # R5 is 0.302 at odd k (three 0.31, two 0.29), 0.298 at even k: best 0.302 first at k = 5.
    # From k = 21, R = 0.29, 0.28, 0.27, ...: R5(24) = (0.29 + 0.29 + 0.28 + 0.27 + 0.26) / 5 = 0.278 >= 0.302 -
    # 0.028132 = 0.273868, R5(25) = (0.29 + 0.28 + 0.27 + 0.26 + 0.25) / 5 = 0.270 < 0.273868 -> onset at k = 25.
    # H alternates 2.39 / 2.41 (s_H = s_R): H5(5) = H5(25) = (3 x 2.39 + 2 x 2.41) / 5 = 2.398: H stayed up.
    found = collapse_onset(np.arange(1, 31), falling_retrieval(), flat_entropy())
    assert (found.iteration, found.reference, found.entropy_held) == (25, 5, True)
    assert found.retrieval == pytest.approx((0.302, 0.270), rel=1e-9)
    assert found.entropy == pytest.approx((2.398, 2.398), rel=1e-9)
    # through the verdict, diagnosed on even iterations only: diagnosed k = 25 is iteration 50, k = 5 iteration 10
    result = verdict(write(tmp_path, falling_retrieval(), flat_entropy()))
    fact = result.fact("collapse onset")
    assert fact.value == (
        "input dependence fell at iteration 50 (retrieval 0.30 -> 0.27) while H(Z|X) stayed up "
        "(2.40 -> 2.40 nats/token)"
    )
    assert fact.tone == "bad"
    assert "means at iteration 10, the best so far, and at 50)" in fact.detail
    assert "band of 3 SDs of a 5-iteration mean, noise from successive differences" in fact.detail
    assert fact.detail.endswith("; trajectory scope")
    # latest retrieval 0.2 of 64 pairs is above chance and no warning stands: the onset alone makes it "check"
    assert result.fact("input dependence").tone == "ok" and result.warnings == ()
    assert result.health == "check"
    assert "collapse onset input dependence fell at iteration 50" in result.line()


def test_retrieval_and_entropy_falling_together_is_not_template_collapse(tmp_path):
    # R as above (R fell first at k = 25); H = 2.4 + wiggle to k = 20, then 2.3, 2.2, ...: H5(25) = (2.3 + 2.2 +
    # 2.1 + 2.0 + 1.9) / 5 = 2.1 < 2.398 - 3 s_H / sqrt 5 (s_H from |diff| of 0.02 and 0.1: at most 0.15) -> fell
    # together at k = 25 (iteration 50)
    entropy = np.concatenate([flat_entropy(20), 2.4 - 0.1 * np.arange(1, 11)])
    found = collapse_onset(np.arange(1, 31), falling_retrieval(), entropy)
    assert (found.iteration, found.entropy_held) == (25, False)
    assert found.entropy[1] == pytest.approx(2.1, rel=1e-9)
    result = verdict(write(tmp_path, falling_retrieval(), entropy))
    fact = result.fact("collapse onset")
    assert (fact.value, fact.tone) == ("input dependence and H(Z|X) fell together at iteration 50", "warn")
    assert "H(Z|X) 2.40 -> 2.10 nats/token" in fact.detail
    assert result.health == "healthy"  # only an onset with H held turns a healthy run into "check"


def test_rising_retrieval_has_no_onset(tmp_path):
    # R = 0.1 + 0.01 k + wiggle: R5 rises by (0.05 +- 0.02) / 5 > 0 each step, so it never drops below its best
    rising = 0.1 + 0.01 * np.arange(1, 31) + np.resize(WIGGLE, 30)
    assert collapse_onset(np.arange(1, 31), rising, flat_entropy()) is None
    result = verdict(write(tmp_path, rising, flat_entropy()))
    assert result.fact("collapse onset") is None and result.health == "healthy"


def test_fewer_than_15_diagnosed_iterations_have_no_onset(tmp_path):
    # R wiggles 0.30 / 0.32 for 10 diagnosed iterations, then drops 0.05 each: the onset is at 13 (the doctest),
    # but it is only named once 15 iterations are diagnosed
    sharp = np.array([0.30, 0.32] * 5 + [0.30, 0.25, 0.20, 0.15, 0.10])
    assert collapse_onset(np.arange(1, 16), sharp, np.full(15, 2.0)).iteration == 13
    assert collapse_onset(np.arange(1, 15), sharp[:14], np.full(14, 2.0)) is None
    # 28 iterations but only 14 diagnosed (every other one): no fact
    assert verdict(write(tmp_path, sharp[:14], np.full(14, 2.0))).fact("collapse onset") is None


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="got lengths 15, 15 and 14"):
        collapse_onset(np.arange(15), np.zeros(15), np.zeros(14))


def test_plots_mark_the_onset_with_a_dashed_line(tmp_path):
    metrics = write(tmp_path, falling_retrieval(), flat_entropy()).metrics
    figure, _ = diagnostics_figure(metrics)
    retrieval, entropy = figure.axes[4], figure.axes[3]  # (3, 2) grid, row-major: [2, 0] and [1, 1]
    for ax in (retrieval, entropy):
        (line,) = [line for line in ax.lines if line.get_label() == "trajectory collapse onset (50)"]
        assert line.get_linestyle() == "--" and list(line.get_xdata()) == [50, 50]
    key, _ = key_figure(metrics, "trajectory", Criteria())
    assert "trajectory collapse onset (50)" in [text.get_text() for text in key.axes[1].get_legend().get_texts()]
