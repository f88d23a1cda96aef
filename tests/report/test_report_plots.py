"""Figures: what each one draws (lines, thresholds, outlines, bars) and what it says when data is missing."""

import math

import numpy as np
import pytest
from matplotlib.patches import Rectangle

from mirl.report import plots, plots_batch, plots_mismatch
from mirl.report.rundir import Metrics, build_metrics, read_run


def _line_labels(ax) -> list[str]:
    return [line.get_label() for line in ax.lines if not line.get_label().startswith("_")]


def test_smooth_is_a_trailing_mean():
    # window 3 over [3, 6, 9, 0]: 3/1, (3+6)/2, (3+6+9)/3, (6+9+0)/3
    np.testing.assert_allclose(plots.smooth(np.array([3.0, 6.0, 9.0, 0.0]), 3), [3.0, 4.5, 6.0, 5.0], rtol=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        plots.training_figure,
        plots.diagnostics_figure,
        plots.filter_figure,
        plots.reasoning_figure,
        plots_batch.regime_figure,
        plots_batch.gradient_figure,
        plots_mismatch.mismatch_figure,
    ],
)
def test_every_figure_is_none_with_a_note_when_nothing_is_logged(make):
    figure, notes = make(Metrics())
    assert figure is None and notes


def test_training_figure_draws_one_line_per_env_plus_all(make_run):
    run = read_run(make_run(iterations=10, envs=("frozenlake", "sokoban")))
    figure, notes = plots.training_figure(run.metrics)
    success = figure.axes[0]
    assert _line_labels(success) == ["all envs", "frozenlake", "sokoban"]
    assert notes == []  # every panel has data: val at iteration 10


def test_training_figure_notes_missing_validation(make_run):
    run = read_run(make_run(iterations=8, omit=("val",)))
    figure, notes = plots.training_figure(run.metrics)
    assert notes == ["val/success not logged", "val/return not logged"]
    assert "no val/success logged yet" in [t.get_text() for t in figure.axes[1].texts]


def test_diagnostics_figure_has_both_scopes_and_chance_lines(make_run):
    run = read_run(make_run(iterations=10))
    figure, notes = plots.diagnostics_figure(run.metrics)
    mi, zscore, retrieval, entropy, cond, marginal = (figure.axes[i] for i in (0, 2, 4, 1, 3, 5))
    assert _line_labels(mi) == ["first-turn", "trajectory"]
    assert _line_labels(retrieval) == ["first-turn", "trajectory", "first-turn chance", "trajectory chance"]
    assert _line_labels(entropy) == ["train/entropy"]
    assert mi.get_title().startswith("MI-Est") and cond.get_title().startswith("H(Z|X)")
    assert marginal.get_title().startswith("H(Z)") and zscore.get_title().startswith("MI-ZScore-EMA")
    assert cond.get_ylim()[0] <= 0.0  # the entropy family keeps 0 in view so a flat curve looks flat
    assert notes == []


def test_agnostic_share_is_plotted_with_its_band_the_env_share_and_the_alarm():
    rows = []
    for i in range(1, 7):
        share = 0.1 * i
        rows.append({
            "iteration": i, "diag/trajectory/est/mi_estimate": 0.5, "diag/trajectory/est/agnostic_share": share,
            "diag/trajectory/est/agnostic_share_ci_low": share - 0.05,
            "diag/trajectory/est/agnostic_share_ci_high": share + 0.05,
            "diag/trajectory/template_share": share, "diag/trajectory/grounded_share": 1 - share,
            "diag/trajectory/alarm": float(i >= 5),
        })  # fmt: skip
    figure, _ = plots.diagnostics_figure(build_metrics(rows))
    agnostic, judged = figure.axes[6], figure.axes[7]
    assert agnostic.get_title().startswith("agnostic share")
    assert _line_labels(agnostic) == [
        "trajectory agnostic share",
        "trajectory template share (env)",
        "trajectory alarm (5)",
    ]
    band = agnostic.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == pytest.approx(0.05) and band[:, 1].max() == pytest.approx(0.65)
    assert _line_labels(judged) == ["trajectory grounded share (env)"]


def test_diagnostics_figure_without_mi_still_shows_entropy(make_run):
    run = read_run(make_run(iterations=6, omit=("diag",)))
    figure, notes = plots.diagnostics_figure(run.metrics)
    assert notes == ["no MI diagnostics (diag/<scope>/est/...) logged"]
    assert _line_labels(figure.axes[1]) == ["train/entropy"]


def _constant_lines(ax) -> tuple[list[float], list[float]]:
    vertical = [
        line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "--" and len(set(line.get_xdata())) == 1
    ]
    horizontal = [
        line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == "--" and len(set(line.get_ydata())) == 1
    ]
    return vertical, horizontal


def test_regime_plane_thresholds_come_from_config(make_run):
    run = read_run(make_run(iterations=10))
    figure, notes = plots_batch.regime_figure(run.metrics, "est", entropy_threshold=0.5, retrieval_threshold=0.15)
    first_turn, trajectory = figure.axes[:2]
    # the same retrieval threshold at any N: a share, unlike an MI value bounded by log N
    assert _constant_lines(first_turn) == ([0.5], [0.15]) and _constant_lines(trajectory) == ([0.5], [0.15])
    labels = {t.get_text() for t in trajectory.texts}
    assert {"TEMPLATE COLLAPSE", "diverse, grounded", "compressed, grounded", "low-entropy collapse"} <= labels
    assert trajectory.get_xlabel().startswith("H(Z|X)")
    assert trajectory.get_ylabel().startswith("input dependence: retrieval above chance")
    # the points are retrieval above chance (acc - chance), the value the regime call reads
    points = trajectory.collections[0].get_offsets()
    logged = run.metrics.get("diag/trajectory/est/retrieval_above_chance")
    assert points[:, 1].tolist() == pytest.approx(logged.values.tolist(), rel=1e-12)
    assert notes == []


SEQ = "diag/trajectory/seq"


def test_regime_plane_for_sequence_family_draws_no_per_token_entropy_threshold():
    metrics = build_metrics(
        [
            {"iteration": 1, f"{SEQ}/retrieval_above_chance": 0.5, f"{SEQ}/conditional_entropy": 30.0}
            | {f"{SEQ}/mi_estimate": 2.0},
            {"iteration": 5, f"{SEQ}/retrieval_above_chance": 0.1, f"{SEQ}/conditional_entropy": 31.0}
            | {f"{SEQ}/mi_estimate": 0.5},
        ]
    )
    figure, notes = plots_batch.regime_figure(metrics, "seq")
    assert _constant_lines(figure.axes[0]) == ([], [0.1])  # nats per sequence: no per-token entropy threshold
    assert notes == []


def test_reward_matrix_outlines_exactly_the_kept_groups():
    record = {
        "iteration": 7,
        "envs": ["frozenlake"] * 3,
        "seeds": [11, 12, 13],
        "returns": [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]],
        "kept": [True, False, True],
        "labels": ["mixed", "too_easy", "mixed"],
    }
    figure, notes = plots_batch.reward_matrix_figure([record])
    ax = figure.axes[0]
    outlines = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
    assert sorted(p.get_y() for p in outlines) == [-0.5, 1.5]  # rows 0 and 2
    assert ax.get_title() == "iteration 7: kept 2/3 groups"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["11 mixed", "12 too_easy", "13 mixed"]
    assert notes == []


def test_reward_matrix_skips_non_numeric_returns():
    figure, notes = plots_batch.reward_matrix_figure([{"iteration": 3, "returns": [["a", "b"]]}])
    assert figure is None
    assert notes == ["groups.jsonl iteration 3: returns are not numbers, skipped"]


def test_gradient_bars_are_means_over_decomposition_iterations():
    lines = [
        {"iteration": 10, "grad/b0/task/norm": 1.0, "grad/b0/kl/norm": 0.5, "grad/b1/task/norm": 2.0},
        {"iteration": 20, "grad/b0/task/norm": 3.0, "grad/b0/kl/norm": 0.5, "grad/b1/task/norm": 4.0},
    ]
    figure, notes = plots_batch.gradient_figure(build_metrics(lines))
    norm_ax = figure.axes[0]
    heights = [bar.get_height() for bar in norm_ax.patches]
    # task: b0 (1+3)/2 = 2, b1 (2+4)/2 = 3; kl: b0 0.5, b1 not logged (nan)
    np.testing.assert_allclose(heights[:3], [2.0, 3.0, 0.5], rtol=1e-12)
    assert math.isnan(heights[3])
    assert notes == ["grad/<bucket>/entropy/norm not logged"]
    assert "mean over 2 decomposition iteration(s): 10, 20" in figure.get_suptitle()


def test_reasoning_figure_plots_validity_as_one_minus_invalid_frac():
    metrics = build_metrics([{"iteration": i, "rollout/invalid_frac": 0.25} for i in (1, 2)])
    figure, notes = plots.reasoning_figure(metrics)
    validity = figure.axes[1]
    np.testing.assert_allclose(validity.lines[0].get_ydata(), [0.75, 0.75], rtol=1e-12)  # 1 - 0.25
    assert "rollout/reasoning_tokens_mean not logged" in notes


def test_figures_render_to_png(make_run):
    run = read_run(make_run(iterations=10))
    figure, _ = plots.filter_figure(run.metrics)
    assert plots.png_bytes(figure).startswith(b"\x89PNG\r\n\x1a\n")


def test_a_single_point_is_a_labelled_marker_on_an_axis_from_zero():
    # validation ran once, at iteration 4, with success 0.25 and return 4.0
    metrics = build_metrics(
        [{"iteration": i, "rollout/success": 0.1 * i} for i in range(1, 4)]
        + [{"iteration": 4, "rollout/success": 0.4, "val/success": 0.25, "val/return": 4.0}]
    )
    figure, _ = plots.training_figure(metrics)
    success, ret = figure.axes[1], figure.axes[3]  # validation success, validation return
    # the value is in the legend, not written beside the point (under the legend box, past the axes' right edge)
    assert len(success.texts) == len(ret.texts) == 0
    assert [t.get_text() for t in success.get_legend().get_texts()] == ["val/success: 0.25 (one value)"]
    assert [t.get_text() for t in ret.get_legend().get_texts()] == ["val/return: 4 (one value)"]
    assert success.lines[0].get_marker() == "o"
    low, high = ret.get_ylim()
    assert low < 0 < 4.0 < high and high - low > 4.0  # 0 and the value in view, not a 3.8-4.2 band
    assert success.get_ylim()[0] <= 0 and success.get_ylim()[1] >= 1  # a success rate keeps [0, 1]
    assert success.get_xlim()[0] <= 1 and success.get_xlim()[1] >= 4  # the run's iteration range


def test_key_figure_draws_four_panels_and_says_what_is_missing(make_run):
    from mirl.diagnostics.regimes import Criteria
    from mirl.report.plots_key import key_figure

    run = read_run(make_run(iterations=10))
    figure, _ = key_figure(run.metrics, "trajectory", Criteria())
    titles = [ax.get_title() for ax in figure.axes]
    last = run.metrics.get("diag/trajectory/est/retrieval_above_chance")
    assert titles == [
        "success rate",
        "MI vs entropy (trajectory scope, per token)",
        f"regime plane (trajectory scope)\nred ring: latest, iteration 10, retrieval above chance {last.last:+.3f}",
        "kept share of prompt groups (filter)",
    ]
    plane = figure.axes[2]
    # no legend box on the data cloud; the latest point is a hollow ring around the last point, not a marker of
    # its own that reads as one more data point
    assert plane.get_legend() is None
    (ring,) = [line for line in plane.lines if line.get_markerfacecolor() == "none"]
    assert ring.get_marker() == "o" and list(ring.get_xydata()[0]) == list(plane.collections[0].get_offsets()[-1])
    assert _line_labels(figure.axes[1]) == ["I(X;Z) MI-Est", "H(Z|X)"]
    bare = read_run(make_run("bare", iterations=3, omit=("diag", "filter", "val")))
    figure, _ = key_figure(bare.metrics, None, Criteria())
    assert [t.get_text() for t in figure.axes[1].texts] == ["no MI diagnostics logged"]
    assert [t.get_text() for t in figure.axes[3].texts] == ["no filter/kept_ratio logged"]
    assert key_figure(Metrics(), None, Criteria()) == (None, ["no metrics to plot"])


def test_the_mi_curve_carries_its_null_band_in_the_detail_and_key_figures():
    from mirl.diagnostics.regimes import Criteria
    from mirl.report.plots_key import key_figure

    est = "diag/trajectory/est"
    rows = [
        {"iteration": it, f"{est}/mi_estimate": mi, f"{est}/conditional_entropy": 1.0, f"{est}/retrieval_acc": 0.5}
        | {f"{est}/mi_contrast_ci_low": mi - 0.3, f"{est}/mi_contrast_ci_high": mi + 0.1}
        for it, mi in ((1, 1.0), (5, 0.4))
    ]
    metrics = build_metrics(rows)
    # interval of raw - null mean = [raw - q97.5, raw - q2.5], so the null's range is [raw - ci_high, raw - ci_low]
    iterations, low, high = plots.null_band(metrics, "trajectory", "est", "mi_estimate")
    assert iterations.tolist() == [1, 5]
    assert low.tolist() == pytest.approx([-0.1, -0.1]) and high.tolist() == pytest.approx([0.3, 0.3])
    older = build_metrics([{k.replace("mi_contrast", "mi_estimate"): v for k, v in row.items()} for row in rows])
    assert plots.null_band(older, "trajectory", "est", "mi_estimate")[1].tolist() == pytest.approx([-0.1, -0.1])
    assert plots.null_band(build_metrics([rows[0] | {f"{est}/mi_contrast_ci_low": None}]), "x", "est", "mi") is None
    detail, _ = plots.diagnostics_figure(metrics)
    assert any(c.get_label() == "trajectory null 95 %" for c in detail.axes[0].collections)
    key, _ = key_figure(metrics, "trajectory", Criteria())
    assert any(c.get_label() == "trajectory null 95 %" for c in key.axes[1].collections)


def test_mismatch_figure_draws_the_differences_on_a_log_axis_and_the_tails_beside(make_run):
    run = read_run(make_run(iterations=6))
    figure, notes = plots_mismatch.mismatch_figure(run.metrics)
    diffs, tails = figure.axes[:2]
    assert _line_labels(diffs) == ["mean |d|", "max |d|"] and diffs.get_yscale() == "log"
    assert _line_labels(tails) == [
        "KL(sampler || trainer) per sequence",
        "tokens with ratio outside [0.5, 2]",
        "tokens the correction's cap changed",
    ]
    assert notes == []
