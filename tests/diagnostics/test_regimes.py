"""Regime calls on constructed evidence: per diagnosed iteration (columns, reasoning, temperature) and per run."""

import dataclasses
import doctest
import math
import subprocess
import sys

import pytest

from mirl.diagnostics import regimes
from mirl.diagnostics.regimes import LABELS, READINGS, Criteria, Evidence, call_iteration, call_run, is_copy

LOG16 = math.log(16)  # the bound of MI-Est at N = 16, quoted in the reason


def test_doctests():
    assert doctest.testmod(regimes).failed == 0


def test_the_pure_module_imports_math_only():
    code = (
        "import sys, mirl.diagnostics.regimes\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('mirl.', 'transformers', 'omegaconf')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["mirl.diagnostics", "mirl.diagnostics.info", "mirl.diagnostics.regimes", "mirl.version"]


@pytest.mark.parametrize(
    ("entropy", "retrieval", "label"),
    [
        (1.2, 0.25, "diverse_grounded"),  # 1.2 >= 0.5, 0.25 >= 0.1
        (1.2, 0.05, "template_collapse"),
        (0.3, 0.25, "compressed_grounded"),
        (0.3, 0.05, "low_entropy_collapse"),
        (0.5, 0.1, "diverse_grounded"),  # at both thresholds: high
    ],
)
def test_quadrants_at_the_scoring_temperature(entropy, retrieval, label):
    call = call_iteration(Evidence(16, 16, 0, cond_entropy=entropy, retrieval=retrieval, mi=0.04))
    assert call.label == label
    assert "vs threshold 0.5" in call.reason and f"retrieval above chance {retrieval:.3g} vs 0.1" in call.reason
    assert f"MI-Est 0.04 nats/token of at most log 16 = {LOG16:.3g}" in call.reason


def test_the_mi_value_does_not_decide_the_call():
    # a grounded small model: tiny per-token MI but retrieval well above chance; a collapsed batch the other way
    assert call_iteration(Evidence(16, 16, 0, cond_entropy=1.0, retrieval=0.3, mi=0.03)).label == "diverse_grounded"
    assert call_iteration(Evidence(16, 16, 0, cond_entropy=1.0, retrieval=0.0, mi=0.9)).label == "template_collapse"
    assert call_iteration(
        Evidence(16, 16, 0, cond_entropy=1.0, retrieval=0.3, mi=0.03), Criteria(retrieval=0.4)
    ).label == ("template_collapse")


def test_cool_samples_cannot_be_called_low_entropy_but_can_be_called_high():
    # samples at T = 0.7 scored at T = 1: a low H(Z|X) may be the temperature's doing
    low = call_iteration(Evidence(16, 16, 0, cond_entropy=0.3, retrieval=0.05, sample_temperature=0.7))
    assert low.label == "undetermined" and "sampling at T = 0.7 alone lowers H(Z|X)" in low.reason
    high = call_iteration(Evidence(16, 16, 0, cond_entropy=0.9, retrieval=0.05, sample_temperature=0.7))
    assert high.label == "template_collapse"


def test_hot_samples_cannot_be_called_high_entropy_but_can_be_called_low():
    assert (
        call_iteration(Evidence(16, 16, 0, cond_entropy=0.9, retrieval=0.3, sample_temperature=1.3)).label
        == "undetermined"
    )
    low = call_iteration(Evidence(16, 16, 0, cond_entropy=0.3, retrieval=0.3, sample_temperature=1.3))
    assert low.label == "compressed_grounded"


def test_too_few_columns_is_undetermined_however_clear_the_numbers():
    three = call_iteration(Evidence(12, 3, 0, cond_entropy=0.1, retrieval=0.0))
    assert three.label == "undetermined" and "3 distinct prompt columns scored, need at least 4" in three.reason
    # 16 columns holding only 3 distinct prompts count as 3
    assert call_iteration(Evidence(16, 16, 0, cond_entropy=0.1, retrieval=0.0, prompts=3)).label == "undetermined"
    assert (
        call_iteration(Evidence(12, 3, 0, cond_entropy=0.1, retrieval=0.0), Criteria(min_columns=3)).label
        != "undetermined"
    )


def test_mostly_empty_or_copied_reasoning_is_no_reasoning():
    # 8 scored + 8 empty: 8/16 = 50 % unjudged -> no_reasoning (at the threshold)
    call = call_iteration(Evidence(8, 8, 8, cond_entropy=1.0, retrieval=0.0))
    assert call.label == "no_reasoning" and "8 empty and 0 copied from the format example, of 16 turns" in call.reason
    assert call_iteration(Evidence(10, 10, 0, copied=5, cond_entropy=1.0, retrieval=0.0)).label == "no_reasoning"
    # 4 of 10 unjudged: judged as usual
    assert call_iteration(Evidence(8, 8, 2, copied=2, cond_entropy=1.0, retrieval=0.0)).label == "template_collapse"
    assert call_iteration(Evidence(0, 0, 5)).label == "no_reasoning"  # every candidate empty
    assert call_iteration(Evidence(0, 0, 0)).label == "undetermined"  # nothing sampled at all


def test_run_level_needs_enough_determined_iterations():
    assert call_run([]).label == "undetermined"
    two = call_run(["low_entropy_collapse", "undetermined", "low_entropy_collapse"])
    assert two.label == "undetermined" and two.reason == "too few diagnosed iterations to call a regime (2, need 3)"
    three = call_run(["low_entropy_collapse", "undetermined", "low_entropy_collapse", "diverse_grounded"])
    assert three.label == "low_entropy_collapse" and three.reason == "2 of the last 3 determined diagnosed iterations"
    assert call_run(["template_collapse"], Criteria(min_iterations=1)).label == "template_collapse"


def test_run_level_uses_the_latest_labels_and_refuses_a_split():
    recovering = ["template_collapse"] * 4 + ["diverse_grounded"] * 3
    assert call_run(recovering).label == "diverse_grounded"
    split = call_run(["diverse_grounded", "template_collapse", "compressed_grounded"])
    assert split.label == "undetermined" and "disagree" in split.reason


def test_run_level_no_reasoning_when_most_iterations_had_none():
    assert call_run(["no_reasoning", "no_reasoning", "diverse_grounded"]).label == "no_reasoning"
    # half is not most: judged on the determined labels (only 2 here -> undetermined)
    assert call_run(["no_reasoning", "no_reasoning", "diverse_grounded", "diverse_grounded"]).label == "undetermined"


def test_every_label_has_a_reading():
    assert set(READINGS) == set(LABELS)


def test_copies_of_the_example():
    example = "I read the state and pick the move that helps."
    assert is_copy("I read the state and pick the move that helps.", example)
    assert is_copy("I read the state and pick the move that helps. Down.", example)  # 1 word around it
    assert not is_copy("I read the state and pick the move that helps. The hole is left, the goal is down.", example)
    assert not is_copy("", example) and not is_copy("anything", "")


def test_malformed_replies_read_degenerate_never_template_collapse():
    # high H(Z|X) and no retrieval would read template collapse; 60 % malformed replies make it degeneration
    evidence = Evidence(32, 32, 0, cond_entropy=3.0, retrieval=0.0, invalid=0.6)
    assert call_iteration(evidence).label == "degenerate"
    assert call_iteration(dataclasses.replace(evidence, invalid=0.1)).label == "template_collapse"
    assert call_run(["template_collapse", "template_collapse", "degenerate", "degenerate"]).label == "degenerate"


def test_a_majority_of_agnostic_rows_reads_low_dependence_beside_retrieval():
    evidence = Evidence(32, 32, 0, cond_entropy=3.0, retrieval=0.2, agnostic=0.4)
    assert call_iteration(evidence).label == "diverse_grounded"
    low = call_iteration(dataclasses.replace(evidence, agnostic=0.5))
    assert low.label == "template_collapse" and "agnostic share 0.50 vs 0.5" in low.reason
