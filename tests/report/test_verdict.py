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
    regime = result.fact("regime")
    assert regime.value == "undetermined (trajectory)" and regime.tone == "plain"
    assert "latest H(Z|X) 1.2 nats/token (T = 1 on T = 0.7 samples) vs 0.5" in regime.detail
    assert "retrieval above chance +0.438 vs 0.1" in regime.detail  # 0.5 - 0.0625, no null logged
    assert result.fact("success").value == "0.06 -> 0.25 (up)"


def test_sampling_cooler_than_the_scoring_temperature_is_evidence_not_a_warning(tmp_path):
    """The quickstart samples at T = 0.7 and scores at T = 1 (docs/metrics.md, "Temperatures"): the regime's evidence
    names both temperatures and the regime call accounts for them, so no warning fires on the shipped settings."""
    lines = [UPDATED | diag(regime="diverse_grounded", temperature=0.7)] * 3
    result = verdict(write(tmp_path, lines, config={"rollout": {"temperature": 0.7}}))
    assert result.warnings == () and result.health == "healthy"
    assert "(T = 1 on T = 0.7 samples)" in result.fact("regime").detail


def test_a_called_collapse_is_unhealthy_and_a_grounded_run_with_dependence_is_healthy(tmp_path):
    collapsed = verdict(write(tmp_path, [UPDATED | diag(regime="template_collapse")] * 3, name="a"))
    assert collapsed.health == "unhealthy" and collapsed.regime == "template_collapse"
    assert collapsed.fact("regime").tone == "bad"
    grounded = verdict(write(tmp_path, [UPDATED | diag(regime="diverse_grounded")] * 3, name="b"))
    assert grounded.health == "healthy" and grounded.warnings == ()
    assert grounded.line().startswith("summary: healthy | status finished | iterations 3 of ")


def test_input_dependence_is_judged_on_its_interval(tmp_path):
    # 8 of 16 retrieved: interval 0.28-0.72 lies above chance 1/16 -> above chance
    # the value judged leads: 0.5 - 0.0625 = +0.4375, interval [0.279992, 0.720008] - 0.0625 = [0.2175, 0.6575]
    above = verdict(write(tmp_path, [UPDATED | diag(acc=0.5)], name="a")).fact("input dependence")
    assert above.value == "retrieval above chance +0.438 (95% +0.217 to +0.658): above chance" and above.tone == "ok"
    assert above.detail == (
        "top-1 retrieval 0.5 minus chance 0.0625; Wilson interval of the retrieval; 16 pairs, trajectory scope, "
        "iteration 1"
    )
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
    # one number, the one judged, leads with its interval; the nominal chance 0.0625 is not in the card: the
    # shuffled attributions' mean accuracy, 0.375 - 0.3 = 0.075, is this batch's chance
    assert above.value == "retrieval above chance +0.300 (null-corrected; 95% +0.100 to +0.500): above chance"
    assert above.detail == (
        "top-1 retrieval 0.375 minus 0.075, its mean when the reasonings are attributed to shuffled prompts (the "
        "chance of this batch); interval from the shuffles; 16 pairs, trajectory scope, iteration 1"
    )
    assert "0.0625" not in above.value + above.detail
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


def test_the_same_retrieval_above_chance_in_the_card_the_regime_and_the_line(tmp_path):
    null = {
        "diag/trajectory/est/retrieval_above_chance_corrected": 0.0553125,
        "diag/trajectory/est/retrieval_above_chance_ci_low": 0.0,
        "diag/trajectory/est/retrieval_above_chance_ci_high": 0.125,
    }
    result = verdict(write(tmp_path, [UPDATED | diag(acc=0.125, chance=0.140625, **null)] * 3))
    card, regime = result.fact("input dependence"), result.fact("regime")
    assert card.value == "retrieval above chance +0.055 (null-corrected; 95% +0.000 to +0.125): at chance"
    assert "retrieval above chance +0.055 (null-corrected) vs 0.1" in regime.detail
    assert f"input dependence {card.value} |" in result.line()
    assert "0.141" not in card.value and "0.0553" not in regime.detail  # no nominal chance, one format


def test_single_values_of_a_finished_run_are_not_a_trend_to_come(tmp_path):
    lines = [UPDATED | {"rollout/success": 0.1}, UPDATED | {"val/success": 0.25}]
    done = verdict(write(tmp_path, lines, config={"validation": {"every": 0}}, name="a"))
    assert done.fact("validation").detail == "validation ran once, after the last iteration (validation.every=0)"
    running = verdict(write(tmp_path, lines, summary={"status": "running"}, name="b"))
    assert running.fact("validation").detail == "one logged value: no trend yet"
    assert "no trend" not in verdict(write(tmp_path, lines, name="c")).fact("validation").detail


def test_kept_share_says_which_iterations_kept_no_group(tmp_path):
    kept = verdict(write(tmp_path, [UPDATED] * 4, name="a")).fact("kept share")
    assert kept.detail == "mean over 4 iterations; every iteration kept at least one group"
    lines = [UPDATED, UPDATED | {"filter/kept_ratio": 0.0, "filter/empty": 1.0, "train/optimizer_steps": 0.0}]
    assert verdict(write(tmp_path, lines, name="b")).fact("kept share").detail.endswith("; 1 of 2 kept no group")


def test_a_busy_machine_is_a_note_that_never_sets_the_health_word(tmp_path):
    """PaceWatch's own two messages (mirl.trainer.pace) become notes, in summaries with or without warned_by;
    another watch's warning still counts."""
    from mirl.trainer.pace import PaceWatch

    busy = PaceWatch(load=lambda: 5.7, cores=2).check(1, {"perf/rollout_tokens_per_s": 15.0})
    slower = PaceWatch(load=lambda: 2.3, cores=2)
    slower.check(12, {"perf/rollout_tokens_per_s": 7632.0})
    busier = slower.check(35, {"perf/rollout_tokens_per_s": 2278.0})
    grounded = [UPDATED | diag(regime="compressed_grounded")] * 3
    for index, said in enumerate(([busy], [busier], [busy, busier])):
        summary = {"status": "finished", "warnings": said} | ({"warned_by": ["PaceWatch"]} if index else {})
        result = verdict(write(tmp_path, grounded, summary=summary, name=f"run{index}"))
        assert result.health == "healthy" and result.warnings == () and result.notes == tuple(said)
        assert result.line().endswith(" | note: " + "; ".join(said))
    other = {"status": "finished", "warnings": ["the softmax-mode filter kept more than 90% of the groups"]}
    result = verdict(write(tmp_path, grounded, summary=other, name="other"))
    assert result.health == "check" and result.warnings == tuple(other["warnings"]) and result.notes == ()


def test_summary_warnings_and_no_data(tmp_path):
    slow = {"status": "finished", "warnings": ["the filter kept more than 90% of the groups for 5 iterations"]}
    assert slow["warnings"][0] in verdict(write(tmp_path, [UPDATED], summary=slow, name="a")).warnings
    empty = verdict(read_run(tmp_path))
    assert empty.health == "no data" and empty.line().startswith("summary: no data | status unknown")


def test_an_unusable_config_value_falls_back_to_the_default(tmp_path):
    config = {"diagnostics": {"regime_min_iterations": "three", "regime_entropy_threshold": None}}
    run = write(tmp_path, [UPDATED | diag(regime="template_collapse")] * 3, config=config)
    assert verdict_module.criteria(run) == verdict_module.Criteria()
    assert verdict(run).regime == "template_collapse"


def test_the_readme_quotes_the_committed_quickstart_run_as_its_verdict_reads():
    """README's paragraph on benchmarks/data/quickstart_run/: its time, load and summary line are the run's own."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = " ".join((root / "README.md").read_text().split())
    run = read_run(root / "benchmarks" / "data" / "quickstart_run")
    result = verdict(run)
    assert run.summary["wall_time_s"] == 2053.0 and "2,053 s on 2 cores at load average 5.7" in readme
    assert result.notes and "(load average 5.7 on 2 cores)" in result.notes[0]
    for name in ("success", "validation", "input dependence", "regime"):
        assert f"| {name} {result.fact(name).value}" in readme, name
    assert readme.count("summary: unhealthy | ... |") == 1 and result.health == "unhealthy"
