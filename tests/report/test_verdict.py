"""The run verdict on constructed metric series: health, trends, input dependence, regime, warnings, the line."""

import doctest
import json

import pytest

from mirl.report import verdict as verdict_module
from mirl.report.rundir import read_run
from mirl.report.verdict import verdict, wilson


def write(tmp_path, lines, config=None, summary=None, name="run"):
    run = tmp_path / name
    run.mkdir()
    text = "".join(json.dumps({"iteration": i + 1, **line}) + "\n" for i, line in enumerate(lines))
    (run / "metrics.jsonl").write_text(text)
    if config is not None:
        (run / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    (run / "summary.json").write_text(json.dumps(summary or {"status": "finished", "iterations_done": len(lines)}))
    return read_run(run)


def diag(scope="trajectory", regime="template_collapse", acc=0.5, chance=0.0625, pairs=16, temperature=1.0, **more):
    base = f"diag/{scope}"
    return {
        f"{base}/regime": regime,
        f"{base}/est/retrieval_acc": acc,
        f"{base}/est/retrieval_chance": chance,
        f"{base}/est/retrieval_above_chance": acc - chance,
        f"{base}/pairs": pairs,
        f"{base}/columns": 16,
        f"{base}/est/conditional_entropy": 1.2,
        f"{base}/est/mi_estimate": 0.1,
        f"{base}/sample_temperature": temperature,
        **more,
    }


UPDATED = {"train/optimizer_steps": 1.0, "filter/kept_ratio": 0.5, "filter/empty": 0.0}


def test_doctests():
    assert doctest.testmod(verdict_module).failed == 0


def test_wilson_interval_by_hand():
    # 8 of 16: p = 0.5, z = 1.96: centre = (0.5 + 3.8416/32) / (1 + 3.8416/16) = 0.5; half = 1.96 sqrt(1/64 +
    # 3.8416/1024) / 1.2401 = 1.96 x 0.139200 / 1.2401 = 0.220008 -> [0.279992, 0.720008]
    low, high = wilson(8, 16)
    assert (low, high) == pytest.approx((0.279992, 0.720008), abs=1e-6)
    assert wilson(0, 0) == (0.0, 1.0)


def test_a_run_whose_filter_kept_nothing_never_updated(tmp_path):
    empty = {"rollout/success": 0.0, "filter/kept_ratio": 0.0, "filter/empty": 1.0}
    result = verdict(write(tmp_path, [empty] * 3))
    assert result.health == "unhealthy"
    assert result.warnings[0] == "no update happened in 3 iteration(s): the filter kept no group in any iteration"
    assert result.fact("kept share").value == "0 of groups" and "3 kept no group" in result.fact("kept share").detail


def test_some_iterations_without_an_update_is_a_warning(tmp_path):
    lines = [UPDATED, {"filter/kept_ratio": 0.0, "filter/empty": 1.0, "train/optimizer_steps": 0.0}, UPDATED]
    assert "1 of 3 iterations did no update (the filter kept nothing)" in verdict(write(tmp_path, lines)).warnings


def test_too_few_diagnosed_iterations_is_undetermined_not_a_red_collapse(tmp_path):
    # the quickstart's shape: 4 iterations, diagnosed at 1 and 2 and 4, each label a collapse at T = 0.7
    lines = [
        UPDATED | {"rollout/success": s} | (diag(regime="undetermined", temperature=0.7) if i in (0, 1, 3) else {})
        for i, s in enumerate([0.06, 0.1, 0.2, 0.25])
    ]
    lines[3] |= diag(regime="template_collapse", temperature=0.7)
    result = verdict(write(tmp_path, lines, config={"rollout": {"temperature": 0.7}}))
    assert result.regime == "undetermined" and result.health == "check"
    assert "too few diagnosed iterations to call a regime (1, need 3)" in result.warnings
    assert "entropy measured at T = 1 on T = 0.7 samples" in result.warnings
    regime = result.fact("regime")
    assert regime.value == "undetermined (trajectory)" and regime.tone == "plain"
    assert "latest H(Z|X) 1.2 nats/token (T = 1 on T = 0.7 samples) vs 0.5" in regime.detail
    assert "retrieval above chance 0.438 vs 0.1" in regime.detail
    assert result.fact("success").value == "0.06 -> 0.25 (up)"


def test_a_called_collapse_is_unhealthy_and_a_grounded_run_with_dependence_is_healthy(tmp_path):
    collapsed = verdict(write(tmp_path, [UPDATED | diag(regime="template_collapse")] * 3, name="a"))
    assert collapsed.health == "unhealthy" and collapsed.regime == "template_collapse"
    assert collapsed.fact("regime").tone == "bad"
    grounded = verdict(write(tmp_path, [UPDATED | diag(regime="diverse_grounded")] * 3, name="b"))
    assert grounded.health == "healthy" and grounded.warnings == ()
    assert grounded.line().startswith("summary: healthy | status finished | iterations 3 of ")


def test_input_dependence_is_judged_on_its_interval(tmp_path):
    # 8 of 16 retrieved: interval 0.28-0.72 lies above chance 1/16 -> above chance
    above = verdict(write(tmp_path, [UPDATED | diag(acc=0.5)], name="a")).fact("input dependence")
    assert above.value == "retrieval 0.5 vs chance 0.0625: above chance" and above.tone == "ok"
    assert above.detail == "retrieval 0.5 (95% interval 0.28-0.72 over 16 pairs); trajectory scope, iteration 1"
    # 2 of 16 (0.125): interval 0.035-0.36 contains chance 1/16 -> at chance
    at = verdict(write(tmp_path, [UPDATED | diag(acc=0.125)], name="b")).fact("input dependence")
    assert at.value.endswith("at chance") and at.tone == "warn"


def test_input_dependence_uses_the_permutation_null_interval_when_logged(tmp_path):
    null = {
        "diag/trajectory/est/retrieval_above_chance_corrected": 0.3,
        "diag/trajectory/est/retrieval_above_chance_ci_low": 0.1,
        "diag/trajectory/est/retrieval_above_chance_ci_high": 0.5,
    }
    above = verdict(write(tmp_path, [UPDATED | diag(acc=0.375, **null)], name="a")).fact("input dependence")
    # the interval [0.1, 0.5] lies above 0 and is printed beside the value it belongs to, +0.30 (a value outside
    # its own interval, as "retrieval 0.375 ... interval 0.16-0.56" of chance-shifted bounds read, cannot recur)
    assert above.value == "retrieval 0.375 vs chance 0.0625: above chance"
    assert above.detail == (
        "above chance, null-corrected: +0.30 (95% interval +0.10 to +0.50, from shuffled attributions, 16 pairs); "
        "trajectory scope, iteration 1"
    )
    straddle = {**null, "diag/trajectory/est/retrieval_above_chance_ci_low": -0.05}
    at = verdict(write(tmp_path, [UPDATED | diag(acc=0.375, **straddle)], name="b")).fact("input dependence")
    assert at.value.endswith("at chance")  # the Wilson interval alone would call 6 of 16 above chance


def test_a_scope_without_reasoning_to_judge_is_unhealthy(tmp_path):
    result = verdict(write(tmp_path, [UPDATED | diag(regime="no_reasoning")] * 2))
    assert result.regime == "no_reasoning" and result.health == "unhealthy"
    assert "no reasoning to judge" in result.fact("regime").detail


def test_single_validation_point_and_crash(tmp_path):
    lines = [UPDATED, UPDATED | {"val/success": 0.25}]
    result = verdict(write(tmp_path, lines, summary={"status": "crashed", "stop_reason": "out of memory"}))
    assert result.fact("validation").value == "0.25 at iteration 2"
    assert result.health == "unhealthy" and result.warnings[0] == "the run is crashed: out of memory"


def test_summary_warnings_and_no_data(tmp_path):
    slow = {"status": "finished", "warnings": ["iteration 2 sampled 12 tokens/s, 3.1x below iteration 1"]}
    assert slow["warnings"][0] in verdict(write(tmp_path, [UPDATED], summary=slow, name="a")).warnings
    empty = verdict(read_run(tmp_path))
    assert empty.health == "no data" and empty.line().startswith("summary: no data | status unknown")


def test_an_unusable_config_value_falls_back_to_the_default(tmp_path):
    config = {"diagnostics": {"regime_min_iterations": "three", "regime_entropy_threshold": None}}
    run = write(tmp_path, [UPDATED | diag(regime="template_collapse")] * 3, config=config)
    assert verdict_module.criteria(run) == verdict_module.Criteria()
    assert verdict(run).regime == "template_collapse"
