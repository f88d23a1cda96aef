"""The mechanism study's analysis (studies/mechanism/analyze.py) on constructed run folders with known answers: the
per-question accuracy, the manipulation check, a paired criterion's interval by hand, the alarm rule and the
leads, incomplete run sets labelled so, and every table printed from the folders."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

_PATH = Path(__file__).resolve().parents[2] / "studies" / "mechanism" / "analyze.py"
_SPEC = importlib.util.spec_from_file_location("mechanism_analyze", _PATH)
mech = importlib.util.module_from_spec(_SPEC)
sys.modules["mechanism_analyze"] = mech
_SPEC.loader.exec_module(mech)

ITERATIONS = 100


def line(*, zero=0, template=0.1, retrieval=0.8, accuracy=0.9, bonus_frac=0.0, bonus=0.0, noise=0.0):
    return {
        "rollout/return_mean": 2 * accuracy + bonus * bonus_frac * 2,
        "rollout/turns_mean": 2.0,
        "rollout/wording_bonus_frac": bonus_frac,
        "rollout/action_invalid_frac": 0.0,
        "rollout/success": accuracy**2,
        "filter/groups_zero_spread": zero,
        "filter/kept_ratio": 1 - zero / 8,
        "filter/spread_mean_before": 0.5,
        "reasoning/template_frac": template,
        "diag/trajectory/est/retrieval_acc": retrieval + noise,
        "diag/trajectory/est/mi_estimate": 2.0 + noise,
        "diag/trajectory/est/mi_contrast": 1.5 + noise,
        "diag/trajectory/est/conditional_entropy": 0.5 + noise,
        "diag/trajectory/est/reasoning_entropy": 2.5 + noise,
    }


def write(root: Path, name: str, lines: list[dict], *, bonus: float = 0.0, status: str = "finished") -> None:
    folder = root / name
    folder.mkdir(parents=True)
    config = {"rollout": {"wording_bonus": bonus, "format_penalty": -0.1, "prompts_per_iteration": 8},
              "envs": [{"name": "keysum", "options": {"hard_share": 0.1, "easy_letters": 1}}]}  # fmt: skip
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / "summary.json").write_text(json.dumps({"status": status}))


def flat(**kwargs) -> list[dict]:
    return [line(**kwargs) for _ in range(ITERATIONS)]


def test_accuracy_removes_the_bonus_and_the_penalties():
    # return 1.5 over 2 turns: bonus 0.2 on half the turns (0.2 earned), one invalid turn in four (-0.05 paid)
    record = line(accuracy=0.0) | {"rollout/return_mean": 1.5, "rollout/wording_bonus_frac": 0.5}
    record["rollout/action_invalid_frac"] = 0.25
    assert mech.accuracy(record, 0.2, -0.1, 2) == pytest.approx((1.5 - 0.2 + 0.05) / 2, abs=1e-12)


def test_manipulation_check_passes_fails_and_waits_for_every_seed(tmp_path):
    for seed in mech.SEEDS:
        write(tmp_path, f"b-low_s{seed}", flat(zero=6))  # share 0.75
        write(tmp_path, f"b-high_s{seed}", flat(zero=2))  # share 0.25
    result = mech.manipulation(mech.load(tmp_path))
    assert result["b-low"] == pytest.approx(0.75) and result["b-high"] == pytest.approx(0.25)
    assert result["verdict"] == "passes"
    close = tmp_path / "close"
    for seed in mech.SEEDS:
        write(close, f"b-low_s{seed}", flat(zero=6))
        write(close, f"b-high_s{seed}", flat(zero=4))  # 0.75 - 0.5 = 0.25 < 0.3
    assert mech.manipulation(mech.load(close))["verdict"] == "fails: the manipulation failed"
    partial = tmp_path / "partial"
    write(partial, "b-low_s1", flat(zero=6))
    write(partial, "b-high_s1", flat(zero=0))
    write(partial, "b-high_s2", flat(zero=0), status="running")  # not finished: not loaded
    result = mech.manipulation(mech.load(partial))
    assert result["verdict"] == "incomplete" and result["b-high_seeds"] == 1


def test_a_criterion_interval_by_hand_and_incomplete_below_six_seeds(tmp_path):
    drops = [0.10, 0.20, 0.15, 0.25, 0.05, 0.15]  # F-low's late template share below B-low's, per seed
    for seed, drop in zip(mech.SEEDS, drops, strict=True):
        write(tmp_path, f"b-low_s{seed}", flat(template=0.4))
        write(tmp_path, f"f-low_s{seed}", flat(template=0.4 - drop))
    result = mech.criterion(mech.load(tmp_path), "f-low", "b-low", "template", -1)
    mean = -0.15
    sd = math.sqrt(sum((d - 0.15) ** 2 for d in drops) / 5)  # 0.070711
    half = 2.5706 * sd / math.sqrt(6)
    assert result["interval"] == pytest.approx((mean, mean - half, mean + half), abs=1e-9)
    assert result["verdict"] == "holds"
    assert mech.criterion(mech.load(tmp_path), "b-low", "f-low", "template", -1)["verdict"] == "fails"
    (tmp_path / "f-low_s6" / "summary.json").write_text(json.dumps({"status": "running"}))
    assert mech.criterion(mech.load(tmp_path), "f-low", "b-low", "template", -1)["verdict"] == "incomplete (5 seeds)"


def test_the_alarm_rule_on_a_step_and_on_noise():
    assert mech.alarm([1.0] * 30 + [0.0] * 10, -1, 0.1) == 32  # 2 of 5 at 0: mean 0.6, 0.4 below the best
    assert mech.alarm([1.0] * 40, -1, 0.1) is None
    assert mech.alarm([0.0] * 30 + [1.0] * 10, +1, 0.1) == 32  # a rise alarms for a signal that warns upward
    rng = np.random.default_rng(0)
    rate = sum(mech.alarm(list(rng.normal(0, 1, 100)), -1, 1.0) is not None for _ in range(400)) / 400
    assert rate < 0.06  # registered: about 0.02 per run


def collapsing(onset_signal: int, onset_accuracy: int) -> list[dict]:
    """Retrieval steps down at ``onset_signal``, accuracy at ``onset_accuracy`` (1-based); the rest flat."""
    out = []
    for i in range(1, ITERATIONS + 1):
        record = line(retrieval=0.8 if i < onset_signal else 0.3, accuracy=0.9 if i < onset_accuracy else 0.5)
        record["diag/trajectory/alarm"] = float(i >= onset_signal + 2)  # mirl's alarm, 2 iterations after the step
        out.append(record)
    return out


def test_leads_false_alarms_and_verdicts_on_constructed_collapses(tmp_path):
    rng = np.random.default_rng(1)
    for seed in (1, 2, 3):  # Floor: noise on every signal and on accuracy
        lines = [line(noise=float(rng.normal(0, 0.02)), accuracy=0.9 + float(rng.normal(0, 0.02))) for _ in range(50)]
        write(tmp_path, f"floor_s{seed}", lines)
    for seed, (signal, accuracy) in zip((1, 2, 3, 4), ((30, 40), (35, 40), (20, 50), (40, 45)), strict=True):
        write(tmp_path, f"p-graded_s{seed}", collapsing(signal, accuracy))
    write(tmp_path, "b-low_s1", flat())  # steady: no false alarm
    result = mech.early_warning(mech.load(tmp_path))
    assert result["falling_runs"] == [f"p-graded_s{s}" for s in (1, 2, 3, 4)]
    retrieval = result["table"]["retrieval"]
    # each step is far beyond 6 SE, so each alarm comes a fixed number of iterations after its step, the same for
    # retrieval and accuracy: the leads are the step differences 10, 5, 30, 5
    assert retrieval["lead"][0] == pytest.approx(12.5) and retrieval["warned_first"] == 4
    assert retrieval["false_alarms"] == (0, 1) and retrieval["floor_false_alarms"][1] == 3
    entropy = result["table"]["entropy"]  # never alarms: counted at the end + 1
    assert entropy["warned_first"] == 0 and entropy["lead"][0] < 0
    assert result["verdicts"]["W1"] == "holds" and result["verdicts"]["W2"] == "holds"
    mirl_alarm = result["table"]["mirl alarm (not registered)"]  # described beside the registered signals
    assert mirl_alarm["warned_first"] == 4 and mirl_alarm["false_alarms"] == (0, 1)


def test_every_table_prints_from_the_folders(tmp_path):
    for seed in (1, 2):
        write(tmp_path, f"b-low_s{seed}", flat(zero=6, template=0.3))
        write(tmp_path, f"f-low_s{seed}", flat(zero=6, template=0.1 + 0.01 * seed))
    (tmp_path / "gates").mkdir()
    (tmp_path / "gates" / "swap.json").write_text(json.dumps({"easy_template": 0.95, "verdict": "passes"}))
    assert mech.main(["--results", str(tmp_path)]) == 0
    text = (tmp_path / "results.md").read_text()
    assert "swap: **passes**" in text and "pilot: **not run**" in text
    assert "| A filter keeps templates away | -0.185 [" in text and "incomplete (2 seeds)" in text
    assert "Manipulation check" in text and "no Floor runs" in text
    assert json.loads((tmp_path / "results.json").read_text())["inventory"]["f-low"] == [1, 2]
    assert "| b-low | 2 | 0.750 | 0.300 |" in text  # per-arm means: 6 of 8 groups without spread, template 0.3


def test_the_grpo_set_and_the_gate_runs_are_described_but_not_judged(tmp_path):
    for seed in (1, 2, 3):
        write(tmp_path, f"floor_s{seed}", flat(template=0.3))
    write(tmp_path, "b-low-grpo_s1", flat(template=0.5))
    write(tmp_path, "pilot_s0", flat(template=0.5))
    result = mech.analyse(mech.load(tmp_path), tmp_path)
    assert list(result["arms"]) == ["floor", "b-low-grpo", "pilot"]  # registered arms, the GRPO set, gate runs
    assert result["arms"]["b-low-grpo"]["late_template"] == pytest.approx(0.5)
    table = result["early_warning"]["table"]["template"]
    assert table["false_alarms"] == (0, 0) and table["floor_false_alarms"] == (0, 3)  # only Floor runs counted


def _runner(monkeypatch, results: Path):
    spec = importlib.util.spec_from_file_location("mechanism_run", _PATH.parent / "run.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    monkeypatch.setattr(runner, "RESULTS", results)
    return runner


def test_the_pilot_gate_needs_a_five_iteration_mean_of_templates_at_0_3(monkeypatch, tmp_path):
    runner = _runner(monkeypatch, tmp_path)
    write(tmp_path, "warmup_s0", flat(template=0.02))
    # one iteration at 0.9 is not a drift: its 5-iteration mean is 0.02 * 4 / 5 + 0.18 = 0.196
    write(tmp_path, "pilot_s0", [line(template=0.9 if i == 20 else 0.02) for i in range(50)])
    gate = runner.pilot_gate()
    assert gate["verdict"] == "fails" and gate["highest_5_iteration_mean"] == pytest.approx(0.196)
    assert gate["warmup_final_template"] == 0.02
    drift = tmp_path / "drift"
    write(drift, "warmup_s0", flat(template=0.02))
    write(drift, "pilot_s0", [line(template=0.01 * i) for i in range(60)])  # reaches 0.3 at iteration 31..35
    monkeypatch.setattr(runner, "RESULTS", drift)
    gate = runner.pilot_gate()
    assert gate["verdict"] == "passes" and gate["highest_5_iteration_mean"] == pytest.approx(0.47)  # 45..49


def test_the_pilot_gate_needs_a_drift_not_a_share_that_starts_high(monkeypatch, tmp_path):
    # second amendment: >= 0.3 is not enough when the pilot starts there; it must rise 0.15 above its first 5 its
    runner = _runner(monkeypatch, tmp_path)
    write(tmp_path, "warmup_s0", flat(template=0.4))
    write(tmp_path, "pilot_s0", [line(template=0.4 + 0.002 * i) for i in range(50)])  # 0.404 -> 0.494: +0.09
    gate = runner.pilot_gate()
    assert gate["verdict"] == "fails" and gate["first_5_iteration_mean"] == pytest.approx(0.404)
    rising = tmp_path / "rising"
    write(rising, "warmup_s0", flat(template=0.4))
    write(rising, "pilot_s0", [line(template=0.4 + 0.004 * i) for i in range(50)])  # 0.408 -> 0.588: +0.18
    monkeypatch.setattr(runner, "RESULTS", rising)
    assert runner.pilot_gate()["verdict"] == "passes"


def test_s_low_scales_b_lows_regularisers_by_f_lows_kept_share(monkeypatch, tmp_path):
    runner = _runner(monkeypatch, tmp_path)
    write(tmp_path, "f-low_s3", [line(zero=z) for z in (2, 4, 6, 4)])  # kept 0.75, 0.5, 0.25, 0.5: mean 0.5
    assert runner.s_low_overrides(3) == ["algorithm.entropy_coef=0.0005", "algorithm.kl_coef=0.075"]


def test_detection_pairs_the_template_share_with_mirls_alarm(tmp_path):
    rising = [line(template=0.0 if i < 30 else 0.8) | {"diag/trajectory/alarm": float(i >= 35)} for i in range(100)]
    write(tmp_path, "b-low_s1", rising)  # trailing mean >= 0.5 from iteration 34 (4 of 5 at 0.8); alarm from 36
    write(tmp_path, "b-high_s1", flat(template=0.0))
    write(tmp_path, "b-low-grpo_s1", rising)  # not a registered run
    result = mech.detection(mech.load(tmp_path))
    assert result["rows"] == [{"run": "b-low_s1", "template": 34, "alarm": 36}]
    assert result["quiet_runs"] == 1 and result["alarm_minus_template"] == [2]


def test_a_ramped_bonus_is_removed_at_the_value_in_force():
    record = line(accuracy=0.0) | {"rollout/return_mean": 1.0, "rollout/wording_bonus_frac": 0.5}
    record["rollout/wording_bonus"] = 0.6  # iteration 30 of a ramp to 2.0 over 100
    assert mech.accuracy(record, 2.0, -0.1, 2) == pytest.approx((1.0 - 0.6) / 2, abs=1e-12)


def test_part_two_counts_the_ramped_control_and_judges_the_warning_with_it(tmp_path):
    rng = np.random.default_rng(2)
    for seed in (1, 2, 3):
        lines = [line(noise=float(rng.normal(0, 0.02)), accuracy=0.9 + float(rng.normal(0, 0.02))) for _ in range(50)]
        write(tmp_path, f"floor_s{seed}", lines)
        # half hard instances: noisier accuracy (Part 2 judges B-high, P-graded and P-ramp against it)
        lines = [line(noise=float(rng.normal(0, 0.02)), accuracy=0.9 + float(rng.normal(0, 0.05))) for _ in range(50)]
        write(tmp_path, f"floor-high_s{seed}", lines)
    # a B-high run whose accuracy dips by 0.1: beyond the low-mix Floor's noise, within the high-mix Floor's
    write(tmp_path, "b-high_s1", [line(accuracy=0.9 if i % 20 < 15 else 0.8) for i in range(100)])
    for seed in mech.SEEDS:  # 5 of 6 P-ramp runs fall; retrieval steps down 10 iterations before accuracy
        write(tmp_path, f"p-ramp_s{seed}", collapsing(40, 50) if seed < 6 else flat())
    runs = mech.load(tmp_path)
    control = mech.positive_control(runs)
    assert control == {"seeds": [1, 2, 3, 4, 5, 6], "fell": [1, 2, 3, 4, 5], "verdict": "counts"}
    part1, part2 = mech.early_warning(runs), mech.early_warning(runs, arms=mech.PART2_ARMS, matched=True)
    assert part1["falling_runs"] == ["b-high_s1"]  # Part 1 judges it against the Floor of B-low's batches
    assert len(part2["falling_runs"]) == 5 and "b-high_s1" not in part2["falling_runs"]
    assert part2["table"]["retrieval"]["floor_false_alarms"] == (0, 6)  # both Floors count as Floor runs
    # the step is 10 iterations ahead; accuracy's noisier Floor-high takes it a second iteration to alarm
    assert part2["table"]["retrieval"]["lead"][0] == pytest.approx(11) and part2["verdicts"]["W1"] == "holds"
    text = mech.report(mech.analyse(runs, tmp_path))
    assert "P-ramp positive control: **counts**" in text and "## Early warning, Part 2" in text


def test_a_finished_run_is_kept_with_its_log_and_a_failed_one_raises(monkeypatch, tmp_path):
    lab = _runner(monkeypatch, tmp_path).lab  # both studies' runners share these helpers (studies/lab/run.py)
    run_dir, target, log = tmp_path / "run", tmp_path / "kept", tmp_path / "run.log"
    run_dir.mkdir()
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "model.safetensors"):
        (run_dir / name).write_text(name)
    lab.run_and_keep([sys.executable, "-c", "print('trained')"], run_dir, log, target)
    assert sorted(p.name for p in target.iterdir()) == ["config.yaml", "metrics.jsonl", "summary.json", "train.log"]
    assert (target / "train.log").read_text() == "trained\n" and not lab.has_checkpoint(run_dir)
    with pytest.raises(RuntimeError, match=f"run exited 3; see {log}"):
        lab.run_and_keep([sys.executable, "-c", "raise SystemExit(3)"], run_dir, log, target)
