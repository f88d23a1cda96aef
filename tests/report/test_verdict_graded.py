"""The verdict's graded facts on constructed runs: degeneration, wrong-but-grounded, the alarm line."""

import doctest

from tests.report.test_verdict import UPDATED, diag, write

from mirl.report import graded
from mirl.report.verdict import verdict

SUCCESS = [0.22, 0.2, 0.24, 0.21, 0.22, 0.18, 0.12, 0.08, 0.05, 0.03, 0.04, 0.02, 0.03, 0.03, 0.02, 0.03]


def test_doctests():
    assert doctest.testmod(graded).failed == 0


def test_falling_success_with_high_retrieval_reads_wrong_but_grounded(tmp_path):
    lines = [
        UPDATED
        | {"rollout/success": s}
        | diag(regime="diverse_grounded", acc=0.8, **{"diag/trajectory/grounded_share": g})
        for s, g in zip(SUCCESS, [0.3] * 8 + [0.05] * 8, strict=True)
    ]
    result = verdict(write(tmp_path, lines))
    fact = result.fact("reasoning")
    assert fact.value.startswith("wrong but grounded: it still depends on the input but no longer leads to success")
    assert "success 0.22 -> 0.03" in fact.detail and "0.30 -> 0.05 of the scored reasonings grounded" in fact.detail
    assert result.health == "check" and result.regime == "diverse_grounded"


def test_rising_success_or_a_collapsed_regime_is_not_wrong_but_grounded(tmp_path):
    rising = [UPDATED | {"rollout/success": s} | diag(regime="diverse_grounded") for s in reversed(SUCCESS)]
    assert verdict(write(tmp_path, rising, name="up")).fact("reasoning") is None
    collapsed = [UPDATED | {"rollout/success": s} | diag(regime="template_collapse") for s in SUCCESS]
    assert verdict(write(tmp_path, collapsed, name="tc")).fact("reasoning") is None


def test_mostly_malformed_replies_read_degenerate_with_the_validity_numbers(tmp_path):
    invalid = [0.07, 0.2, 0.4, 0.6, 0.8, 0.9]
    lines = [
        UPDATED
        | {"rollout/success": 0.1, "rollout/invalid_frac": v}
        | diag(regime="degenerate" if v >= 0.5 else "template_collapse")
        for v in invalid
    ]
    result = verdict(write(tmp_path, lines))
    assert result.regime == "degenerate" and result.health == "unhealthy"
    assert result.fact("regime").value == "degenerate (trajectory)"
    assert "malformed replies 0.07 -> 0.9 of turns" in result.fact("regime").detail
    assert "template collapse" not in result.fact("regime").value


def test_alarm_line_says_where_it_fired_or_the_latest_share(tmp_path):
    shares = [0.3, 0.35, 0.6, 0.8, 0.9]
    alarms = [0, 0, 0, 1, 1]
    lines = [
        UPDATED | diag(**{"diag/trajectory/est/agnostic_share": s, "diag/trajectory/alarm": float(a)})
        for s, a in zip(shares, alarms, strict=True)
    ]
    fired = verdict(write(tmp_path, lines, name="fired")).fact("alarm")
    assert fired.value == "fired at iteration 4: agnostic share 0.30 -> 0.80" and fired.tone == "bad"
    quiet = [UPDATED | diag(**{"diag/trajectory/est/agnostic_share": 0.2, "diag/trajectory/alarm": 0.0})] * 3
    assert (
        verdict(write(tmp_path, quiet, name="quiet")).fact("alarm").value == "off (agnostic share 0.20 at iteration 3)"
    )


def test_compare_rows_show_degeneration_and_the_graded_share(tmp_path):
    from mirl.report.compare import verdict_table

    broken = [UPDATED | {"rollout/invalid_frac": 0.8} | diag(regime="degenerate")] * 3
    graded_run = [UPDATED | diag(**{"diag/trajectory/est/agnostic_share": 0.25, "diag/trajectory/alarm": 0.0})] * 3
    html = verdict_table([write(tmp_path, broken, name="a"), write(tmp_path, graded_run, name="b")], ["a", "b"])
    assert "<th>alarm</th>" in html and "<th>reasoning</th>" in html
    assert "degenerate (trajectory)" in html and "off (agnostic share 0.25 at iteration 3)" in html


def test_the_committed_regulariser_only_run_reads_degenerate_never_template_collapse():
    """The organism trained on its regularisers alone (studies/lab/run.py --arms reg-only --seeds 97: the task term
    off, 40 iterations): its replies break down, and the verdict names that degeneration, not template collapse."""
    from pathlib import Path

    from mirl.report import read_run

    run = Path(__file__).resolve().parents[2] / "studies" / "results" / "lab" / "reg-only_s97"
    result = verdict(read_run(run))
    assert result.regime == "degenerate" and result.health == "unhealthy"
    assert result.fact("regime").value == "degenerate (trajectory)"
    onset = result.fact("collapse onset")
    assert onset is None or "degeneration" in onset.value
    assert all("template collapse" not in fact.value for fact in result.facts)
