"""The pre-registered credit study's analysis (studies/credit/analyze.py) on constructed sweeps with known verdicts."""

import doctest
import importlib.util
import json
import math
from pathlib import Path

import pytest
import yaml

from mirl.config_files import load_config
from mirl.experiments.spec import load_spec

from .test_analyses import make_sweep

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("credit_analyze", ROOT / "studies" / "credit" / "analyze.py")
analyze = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(analyze)
DEPTH_SPEC = importlib.util.spec_from_file_location("credit_depth", ROOT / "studies" / "credit" / "depth.py")
depth = importlib.util.module_from_spec(DEPTH_SPEC)
DEPTH_SPEC.loader.exec_module(depth)

CONFIG = {"validation": {"num_instances": 16, "group_size": 1}}


def lines(nonzero, tied, signal, update, val):
    """Four iterations; the last validates with ``val`` successes of 16."""
    out = []
    for i in range(4):
        line = {
            "train/turns_nonzero_advantage_frac": nonzero,
            "filter/groups_zero_spread": tied,
            "filter/groups_zero_spread_turn_signal": signal,
            "time/update": update,
        }
        if i == 3:
            line["val/success"] = val / 16
        out.append(line)
    return out


def sweep(tmp_path, arms):
    """arms: name -> per-seed (nonzero, tied, signal, update, val successes)."""
    runs = [
        (f"{arm}_s{seed}", {"case": arm}, seed, CONFIG, lines(*numbers))
        for arm, per_seed in arms.items()
        for seed, numbers in enumerate(per_seed, start=1)
    ]
    return [analyze.run_row(run) for run in analyze.read_sweep(make_sweep(tmp_path / "credit", runs))]


EPISODE = [(0.40, 3, 1, 10.0, 2), (0.50, 2, 0, 12.0, 1), (0.45, 3, 1, 11.0, 2)]
BILEVEL = [(0.99, 3, 1, 20.0, 2), (0.98, 2, 0, 22.0, 1), (0.99, 3, 1, 21.0, 2)]


def test_run_rows_pool_iterations_as_documented(tmp_path):
    rows = sweep(tmp_path, {"episode_grpo": EPISODE[:1]})
    # 4 iterations of 3 tied groups, 1 of them with signal; validation 2 of 16
    assert rows == [
        {
            "arm": "episode_grpo",
            "seed": 1,
            "nonzero_turns": 0.40,
            "tied_groups": 12.0,
            "tied_with_signal": 4.0,
            "update_s": 10.0,
            "val_successes": 2,
            "val_n": 16,
        }
    ]


def test_step_groups_pass_when_both_signal_criteria_hold(tmp_path):
    step = [(0.70, 3, 2, 10.5, 2), (0.80, 2, 1, 12.5, 1), (0.60, 3, 2, 11.0, 3)]
    rows = sweep(tmp_path, {"episode_grpo": EPISODE, "step_groups": step, "bilevel_ppo": BILEVEL})
    verdict, reasons = analyze.step_group_verdict(rows)
    assert verdict == "pass", reasons
    # Z = (8 + 4 + 8) / (12 + 8 + 12) = 0.625
    assert analyze.arm_summary(rows, "step_groups")["share"] == pytest.approx(20 / 32)
    assert analyze.bilevel_verdict(rows)[0] == "no evidence against"  # cost ratios 2.0, 1.83, 1.91
    text = analyze.write(rows, tmp_path / "out")
    assert "**step groups: pass**" in text and (tmp_path / "out" / "results.csv").is_file()


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        ([(0.70, 3, 2, 10.5, 2), (0.40, 2, 1, 12.5, 1), (0.40, 3, 2, 11.0, 2)], "X1"),  # not higher in 2 seeds
        ([(0.70, 3, 0, 10.5, 2), (0.80, 2, 0, 12.5, 1), (0.60, 3, 0, 11.0, 2)], "X2"),  # no tied group has signal
        ([(0.70, 3, 2, 30.0, 2), (0.80, 2, 1, 30.0, 1), (0.60, 3, 2, 30.0, 2)], "X4"),  # cost ratio ~2.7
    ],
)
def test_step_groups_fail_on_each_counter_criterion(tmp_path, step, reason):
    rows = sweep(tmp_path, {"episode_grpo": EPISODE, "step_groups": step})
    verdict, reasons = analyze.step_group_verdict(rows)
    assert verdict == "fail"
    assert any(line.startswith(reason) and line.endswith("yes") for line in reasons)


def test_worse_validation_with_disjoint_exact_intervals_fails(tmp_path):
    good = [(0.40, 3, 1, 10.0, 15), (0.50, 2, 0, 12.0, 16), (0.45, 3, 1, 11.0, 15)]  # 46 of 48
    step = [(0.70, 3, 2, 10.5, 0), (0.80, 2, 1, 12.5, 0), (0.60, 3, 2, 11.0, 0)]  # 0 of 48
    rows = sweep(tmp_path, {"episode_grpo": good, "step_groups": step, "bilevel_ppo": step})
    assert analyze.step_group_verdict(rows)[0] == "fail"
    assert analyze.bilevel_verdict(rows)[0] == "against"


def test_inconclusive_and_not_testable(tmp_path):
    # M2 misses (Z = 8 / 32 = 0.25 is enough, so take 6 / 32) while no counter-criterion holds
    step = [(0.70, 3, 1, 10.5, 2), (0.80, 2, 0, 12.5, 1), (0.60, 3, 0.5, 11.0, 2)]
    rows = sweep(tmp_path / "a", {"episode_grpo": EPISODE, "step_groups": step})
    assert analyze.step_group_verdict(rows)[0] == "inconclusive"
    rows = sweep(tmp_path / "b", {"episode_grpo": EPISODE[:2], "step_groups": step[:2]})
    assert analyze.step_group_verdict(rows)[0] == "not testable"
    assert analyze.bilevel_verdict(rows)[0] == "not testable"


def test_clopper_pearson_exact_ends():
    assert doctest.testmod(analyze).failed == 0
    lo, hi = analyze.clopper_pearson(48, 48)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 48), abs=1e-9)
    lo, hi = analyze.clopper_pearson(5, 10)  # symmetric around 1/2
    assert lo == pytest.approx(1 - hi, abs=1e-9) and lo == pytest.approx(0.187086, abs=1e-5)
    assert not math.isnan(hi)


def test_the_spec_plans_three_paired_arms():
    spec = load_spec(ROOT / "studies" / "credit" / "spec.yaml")
    runs = spec.runs()
    assert [r.name for r in runs][:3] == ["episode_grpo_s1", "episode_grpo_s2", "episode_grpo_s3"]
    configs = {r.name: load_config(spec.base, list(r.overrides)) for r in runs}
    assert {(c.algorithm.preset, c.algorithm.credit) for c in configs.values()} == {
        ("grpo", "episode"),
        ("grpo", "step_groups"),
        ("ppo", "bilevel_gae"),
    }
    assert all(c.envs[0].name == "sokoban" and c.filter.strategy == "none" for c in configs.values())
    assert yaml.safe_load((ROOT / "studies" / "credit" / "spec.yaml").read_text())["seeds"] == [1, 2, 3]
    json.dumps([r.overrides for r in runs])  # plain strings


def episode(group, keys, rewards):
    turns = [{"state_key": k, "reward": r} for k, r in zip(keys, rewards, strict=True)]
    return {"group": group, "return": sum(rewards), "turns": turns}


def test_depth_split_tells_position_from_same_state_differences(tmp_path):
    stuck = ["P1,1"] * 3  # every action invalid: the start state at every depth
    # group 0: both samples stay put; returns-to-go differ only by depth
    # group 1: tied returns (-0.2); at depth 0 both samples are in the start state with different returns-to-go
    group_1 = [episode(1, ["P1,1", "P1,2", "P1,1"], [-0.1, 0.0, -0.1]), episode(1, stuck, [-0.1, -0.1, 0.0])]
    assert depth.group_signal([episode(0, stuck, [-0.1] * 3)] * 2) == (True, False)
    assert depth.group_signal(group_1) == (True, True)
    rollouts = tmp_path / "runs" / "a_s1" / "rollouts"
    rollouts.mkdir(parents=True)
    spread = [episode(2, stuck, [-0.1] * 3), episode(2, stuck, [1.0, -0.1, -0.1])]  # not tied: not counted
    lines = [json.dumps(e) for e in [episode(0, stuck, [-0.1] * 3)] * 2 + group_1 + spread]
    (rollouts / "iteration_000001.jsonl").write_text("\n".join(lines) + "\n")
    # unchanged: 2 in each of the 5 episodes that never move (group 0's two, group 1's second, group 2's two)
    assert depth.run_counts(tmp_path / "runs" / "a_s1") == {
        "tied": 2, "step": 2, "same_depth": 1, "turns": 18, "unchanged": 10
    }  # fmt: skip
    assert depth.returns_to_go([-0.1] * 4) == pytest.approx(
        [-0.1 * (1 + 0.95 + 0.95**2 + 0.95**3), -0.1 * (1 + 0.95 + 0.95**2), -0.1 * 1.95, -0.1]
    )
