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


def stepped_retrieval() -> np.ndarray:
    """0.3 + WIGGLE for 20 diagnosed iterations, then 0.1 + WIGGLE for 10: a step down after diagnosed 20."""
    return np.concatenate([0.3 + WIGGLE, 0.1 + WIGGLE[:10]])


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
    # |diff| is 0.02 everywhere but at the step (0.29 -> 0.11: 0.18), so the median is 0.02 and s_R = 1.4826 x 0.02
    # / sqrt 2 = 0.020968. At k = 20: before 0.30, after 0.10, standard error 0.020968 x sqrt(1/20 + 1/10) =
    # 0.008121, z = 0.2 / 0.008121 = 24.63, the largest over k; diagnosed iteration 21 is the first after the change.
    found = collapse_onset(np.arange(1, 31), stepped_retrieval(), flat_entropy())
    assert (found.iteration, found.entropy_held) == (21, True)
    assert found.retrieval == pytest.approx((0.30, 0.10), rel=1e-9)
    assert found.z == pytest.approx(0.2 / (1.4826 * 0.02 / np.sqrt(2) * np.sqrt(1 / 20 + 1 / 10)), rel=1e-9)
    assert found.entropy == pytest.approx((2.40, 2.40), rel=1e-9)
    # through the verdict, diagnosed on even iterations only: diagnosed 21 is iteration 42
    result = verdict(write(tmp_path, stepped_retrieval(), flat_entropy()))
    fact = result.fact("collapse onset")
    assert (
        fact.value
        == "input dependence fell at iteration 42 (retrieval 0.30 -> 0.10) while H(Z|X) stayed up (2.40 -> 2.40)"
    )
    assert fact.tone == "bad" and "a drop of 24.6 standard errors" in fact.detail
    assert fact.detail.endswith("; trajectory scope")
    assert result.health == "check"  # an onset with H held never leaves a run "healthy"
    assert "collapse onset input dependence fell at iteration 42" in result.line()


def test_retrieval_and_entropy_falling_together_is_not_template_collapse(tmp_path):
    # H steps from 2.4 to 1.4 at the same point: a drop of 1.0 against 3 x 0.020968 x sqrt(0.15) = 0.0244
    entropy = np.concatenate([flat_entropy(20), 1.4 - WIGGLE[:10]])
    found = collapse_onset(np.arange(1, 31), stepped_retrieval(), entropy)
    assert (found.iteration, found.entropy_held) == (21, False)
    fact = verdict(write(tmp_path, stepped_retrieval(), entropy)).fact("collapse onset")
    assert (fact.value, fact.tone) == ("input dependence and H(Z|X) fell together at iteration 42", "warn")
    assert "H(Z|X) 2.40 -> 1.40 nats/token" in fact.detail


def test_a_fall_with_low_entropy_is_not_called_template_collapse(tmp_path):
    # H stays at 0.2 nats/token, under the regime threshold 0.5: compressed reasoning, not template collapse
    low = np.full(30, 0.2)
    fact = verdict(write(tmp_path, stepped_retrieval(), low)).fact("collapse onset")
    assert fact.tone == "warn" and fact.value.endswith("with H(Z|X) low (0.20): not template collapse")


def test_rising_or_recovering_retrieval_has_no_onset(tmp_path):
    rising = 0.1 + 0.01 * np.arange(1, 31) + np.resize(WIGGLE, 30)
    assert collapse_onset(np.arange(1, 31), rising, flat_entropy()) is None
    dip = np.concatenate([0.3 + WIGGLE, 0.25 + WIGGLE[:4], 0.3 + WIGGLE[:6]])  # down 0.05 for 4, then back
    # best split k = 20: before 0.30, after (4 x 0.25 + 6 x 0.30) / 10 = 0.28, z = 0.02 / 0.008121 = 2.5 < 4
    assert collapse_onset(np.arange(1, 31), dip, flat_entropy()) is None
    result = verdict(write(tmp_path, rising, flat_entropy()))
    assert result.fact("collapse onset") is None and result.health == "healthy"


def test_fewer_than_15_diagnosed_iterations_have_no_onset(tmp_path):
    sharp = np.array([0.30, 0.32] * 5 + [0.10, 0.12] * 5)  # the doctest's step: found with 20 diagnosed
    assert collapse_onset(np.arange(1, 21), sharp, np.full(20, 2.0)).iteration == 11
    assert collapse_onset(np.arange(1, 15), sharp[:14], np.full(14, 2.0)) is None
    # 28 iterations but only 14 diagnosed (every other one): no fact
    assert verdict(write(tmp_path, sharp[:14], np.full(14, 2.0))).fact("collapse onset") is None


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="got lengths 15, 15 and 14"):
        collapse_onset(np.arange(15), np.zeros(15), np.zeros(14))


def test_plots_mark_the_onset_with_a_dashed_line(tmp_path):
    metrics = write(tmp_path, stepped_retrieval(), flat_entropy()).metrics
    figure, _ = diagnostics_figure(metrics)
    retrieval, entropy = figure.axes[4], figure.axes[3]  # (3, 2) grid, row-major: [2, 0] and [1, 1]
    for ax in (retrieval, entropy):
        (line,) = [line for line in ax.lines if line.get_label() == "trajectory collapse onset (42)"]
        assert line.get_linestyle() == "--" and list(line.get_xdata()) == [42, 42]
    key, _ = key_figure(metrics, "trajectory", Criteria())
    assert "trajectory collapse onset (42)" in [text.get_text() for text in key.axes[1].get_legend().get_texts()]
