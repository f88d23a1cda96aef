"""Part 2 of the organism study (studies/lab/paper.py) on constructed runs whose answers are known: each criterion
holds on data built to satisfy it and does not on data built against it; every arm it reads is one run.py trains."""

import doctest
import json
import sys
from pathlib import Path

import numpy as np
import pytest

_DIR = Path(__file__).resolve().parents[2] / "studies" / "lab"
sys.path.insert(0, str(_DIR))  # the study's scripts import each other by name, as when run as scripts
import paper  # noqa: E402  (after the path insert)
import run  # noqa: E402

ITERATIONS = 30  # 3 windows of 10: the late block is the whole run


def write_run(root: Path, arm: str, seed: int, rng, predictor: float = 0.5, **levels) -> None:
    """A run whose measures sit at ``levels`` (default 0.5) with noise 0.005 per iteration."""
    directory = root / f"{arm}_s{seed}"
    directory.mkdir(parents=True)
    lines = []
    for i in range(ITERATIONS):
        line = {key: levels.get(name, 0.5) + rng.normal(0, 0.005) for name, key in paper.MEASURES.items()}
        lines.append(line | {"iteration": i + 1, paper.PREDICTOR: predictor})
    (directory / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_doctests():
    assert doctest.testmod(paper).failed == 0


def test_every_arm_the_analysis_reads_is_a_run_the_runner_trains():
    read = {*paper.QUARTILES, "prompt-k4", "traj-k4", *paper.CREDIT_ARMS, *paper.SWEEP_ARMS}
    read |= {arm for _, base, treated in paper.SETTINGS for arm in (base, treated)}
    assert read <= set(run.PAPER) | {"b-low", "f-low", "b-high"}
    planned = set(run.part_two())
    assert {(arm, s) for arm in paper.SWEEP_ARMS for s in paper.SWEEP_SEEDS} <= planned
    assert {(arm, s) for arm in paper.QUARTILES for s in paper.SEEDS} <= planned


def test_quartile_slopes(tmp_path):
    rng = np.random.default_rng(0)
    for seed in paper.SEEDS:
        for index, arm in enumerate(paper.QUARTILES):  # success 0.4, 0.3, 0.2, 0.1: slope -0.1 a quartile
            write_run(tmp_path, arm, seed, rng, success=0.4 - 0.1 * index, retrieval=0.9 - 0.05 * index)
    result = paper.quartiles(paper.load(tmp_path))
    assert result["verdict"] == "holds"
    assert result["slopes"]["success"][0] == pytest.approx(-0.1, abs=0.005)
    flipped = tmp_path / "flipped"
    for seed in paper.SEEDS:
        for index, arm in enumerate(paper.QUARTILES):  # success rises with the quartile index: fails
            write_run(flipped, arm, seed, rng, success=0.1 + 0.1 * index, retrieval=0.9 - 0.05 * index)
    assert paper.quartiles(paper.load(flipped))["verdict"] == "fails"
    assert paper.quartiles({})["verdict"] == "not testable"


def test_prompt_against_trajectory_and_credit(tmp_path):
    rng = np.random.default_rng(1)
    for seed in paper.SEEDS:
        write_run(tmp_path, "prompt-k4", seed, rng, success=0.4, retrieval=0.9, mi=2.0)
        write_run(tmp_path, "traj-k4", seed, rng, success=0.2, retrieval=0.7, mi=1.0)
        write_run(tmp_path, "b-low", seed, rng, success=0.2, zero_spread=4.0, turn_signal=1.0)
        write_run(tmp_path, "credit-turn", seed, rng, success=0.3, zero_spread=4.0, turn_signal=2.0)
        write_run(tmp_path, "credit-step", seed, rng, success=0.2 + 0.02 * (seed % 2 * 2 - 1))  # no effect
    runs = paper.load(tmp_path)
    table7 = paper.paired(runs, "prompt-k4", "traj-k4", ("success", "retrieval"))
    assert table7["verdict"] == "holds" and table7["intervals"]["success"][0] == pytest.approx(0.2, abs=0.005)
    credit = paper.credit(runs)
    assert credit["credit-turn"]["verdict"] == "holds"
    assert credit["credit-turn"]["turn_signal_share_late"] == pytest.approx(0.5, abs=0.01)  # 2 of 4 groups
    assert credit["credit-step"]["verdict"] == "inconclusive"


def test_noise_sweep_and_spread_predictor(tmp_path):
    rng = np.random.default_rng(2)
    for seed in paper.SEEDS:
        for noise in paper.NOISE:
            ratio = 1.3 - noise  # the predictor falls with noise, and so does the filter's gain
            levels = {"success": 0.3 - 0.2 * noise, "cond_entropy": 0.1 + 2 * noise, "mi": 2.0 - 1.5 * noise}
            write_run(tmp_path, paper.noise_arm("b", noise), seed, rng, predictor=ratio, **levels)
            gain = {"success": levels["success"] + 0.1 * (1 - noise)}
            write_run(tmp_path, paper.noise_arm("f", noise), seed, rng, predictor=ratio, **(levels | gain))
        write_run(tmp_path, "b-high", seed, rng, predictor=1.5, success=0.1)
        write_run(tmp_path, "f-high", seed, rng, predictor=1.5, success=0.25)
    runs = paper.load(tmp_path)
    sweep = paper.noise_sweep(runs)
    assert {sweep[m]["verdict"] for m in ("success", "cond_entropy", "mi")} == {"holds"}
    assert sweep["success"]["slope"][0] == pytest.approx(-0.2, abs=0.01)
    assert sweep["filter_gain"]["0"]["success"][0] == pytest.approx(0.1, abs=0.01)
    predictor = paper.spread_predictor(runs)
    # gains 0.1, 0.075, 0.05, 0.025, 0 and 0.15 against ratios 1.3 .. 0.3 and 1.5: ranks agree, rho = 1
    assert predictor["rho"] == pytest.approx(1.0) and predictor["p"] == pytest.approx(1 / 720)
    assert predictor["verdict"] == "holds"


def test_sweep_correlations(tmp_path, monkeypatch):
    monkeypatch.setattr(paper, "PERMUTATIONS", 300)
    rng = np.random.default_rng(3)
    for index, arm in enumerate(paper.SWEEP_ARMS):
        for seed in paper.SWEEP_SEEDS:
            mi = 1.0 + 0.2 * index + 0.05 * seed  # success follows MI; H(Z|X) falls as success rises
            write_run(tmp_path, arm, seed, rng, mi=mi, success=0.1 * mi, cond_entropy=2.0 - 0.5 * mi)
    result = paper.sweep(paper.load(tmp_path), np.random.default_rng(0))
    assert result["mi"]["verdict"] == "holds" and result["mi"]["p"] < 0.01
    assert result["cond_entropy"]["verdict"] == "holds"
    assert result["shifts"]["f-low"]["mi"][0] == pytest.approx(0.2, abs=0.01)
    unrelated = tmp_path / "unrelated"
    for arm in paper.SWEEP_ARMS:
        for seed in paper.SWEEP_SEEDS:
            write_run(unrelated, arm, seed, rng, mi=float(rng.normal()), success=0.5 - 0.1 * float(rng.normal()))
    assert paper.sweep(paper.load(unrelated), np.random.default_rng(0))["mi"]["verdict"] != "holds"


def test_every_arm_at_once_writes_the_results_page_and_figure(tmp_path, monkeypatch):
    monkeypatch.setattr(paper, "PERMUTATIONS", 100)
    rng = np.random.default_rng(4)
    for arm, seed in run.part_two() + [("b-low", s) for s in paper.SEEDS] + [("f-low", s) for s in paper.SEEDS]:
        if not (tmp_path / f"{arm}_s{seed}").exists():
            write_run(tmp_path, arm, seed, rng, success=float(rng.uniform(0.1, 0.4)))
    for seed in paper.SEEDS:
        write_run(tmp_path, "b-high", seed, rng)
    assert paper.main(["--results", str(tmp_path)]) == 0
    text = (tmp_path / "paper-results.md").read_text()
    assert "| T6 quartile slopes | **" in text
    assert "| T8 spread ratio predicts the filter's gain | **not testable" in text  # every predictor 0.5 here
    assert (tmp_path / "paper.png").stat().st_size > 20_000
    assert json.loads((tmp_path / "paper-results.json").read_text())["credit"]["credit-turn"]["verdict"]


def test_a_constant_side_is_not_testable_rather_than_significant():
    assert np.isnan(paper.spearman([1, 2, 3], [5, 5, 5])) and np.isnan(paper.exact_spearman_p([1, 2, 3], [5, 5, 5]))
