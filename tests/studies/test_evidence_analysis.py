"""The evidence study's analysis on constructed data with known answers: an exact zero MI, a known monotone
fraction, a known slope, exact intervals, and each experiment's verdict rules."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "studies" / "evidence" / "analysis.py"
_SPEC = importlib.util.spec_from_file_location("evidence_analysis", _PATH)
ev = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ev)


def test_slope_spearman_and_exact_intervals():
    assert ev.slope([1, 2, 3, 4], [0.5, 0.3, 0.1, -0.1]) == pytest.approx(-0.2, rel=1e-12)
    assert math.isnan(ev.slope([2, 2], [0.0, 1.0]))
    assert ev.spearman([1, 2, 3, 4], [10, 20, 20, 40]) == pytest.approx(0.9486832980505138, rel=1e-12)
    # Clopper-Pearson, checked against the closed forms of its edge cases: 0 of n -> [0, 1 - (a/2)^(1/n)]
    low, high = ev.clopper_pearson(0, 24)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 24), rel=1e-9)
    low, high = ev.clopper_pearson(24, 24)
    assert high == 1.0 and low == pytest.approx(0.025 ** (1 / 24), rel=1e-9)
    low, high = ev.clopper_pearson(3, 24)  # the tails at the ends equal 2.5 % each
    assert sum(math.comb(24, k) * low**k * (1 - low) ** (24 - k) for k in range(3, 25)) == pytest.approx(0.025)
    assert sum(math.comb(24, k) * high**k * (1 - high) ** (24 - k) for k in range(0, 4)) == pytest.approx(0.025)


def _pool(rng, prompts=40, donors=40, signal=3.0):
    """Scores where a grounded reasoning fits its own prompt by `signal` nats per token and a donor fits none."""
    scores = rng.normal(-2.0, 0.3, size=(prompts + donors, prompts))
    scores[np.arange(prompts), np.arange(prompts)] += signal
    kind = np.array(["grounded"] * prompts + ["donor"] * donors)
    prompt = np.concatenate([np.arange(prompts), -np.ones(donors, dtype=np.int64)])
    own = np.concatenate([scores[np.arange(prompts), np.arange(prompts)]])[:donors]  # same entropy as grounded
    return ev.Pool(scores, kind, prompt, own)


def test_a_pure_template_mixture_has_exactly_zero_information_and_a_full_one_is_found():
    rng = np.random.default_rng(0)
    pool = _pool(rng)
    # fraction 0: every row a donor attributed to a prompt: its true column carries no information
    scores, true_col = ev.draw_mixture(pool, 8, 0.0, rng)
    assert scores.shape == (8, 8) and scores.max() < 0  # no row holds a grounded (+3 nats) own-prompt score
    cells = ev.e1_cells([pool], draws=40, seed=1, columns=(8, 16), fractions=(0.0, 0.5, 1.0))
    zero, full = cells[(16, 0.0)], cells[(16, 1.0)]
    assert abs(np.mean(zero["mi"])) < 2 * np.std(zero["mi"], ddof=1) / math.sqrt(40 / 16)  # corrected: ~0
    assert np.mean(zero["mi_raw"]) < 0  # the raw estimate is biased low
    assert np.mean(full["retrieval"]) == pytest.approx(15 / 16, abs=1e-12)  # every row finds its prompt
    means = [np.mean(cells[(16, f)]["mi"]) for f in (0.0, 0.5, 1.0)]
    assert means[0] < means[1] < means[2]  # a known monotone fraction


def test_the_e1_verdict_holds_on_a_grounded_pool_and_fails_on_a_pool_without_signal():
    rng = np.random.default_rng(2)
    grounded = [_pool(rng, signal=3.0)]
    cells = ev.e1_cells(grounded, draws=30, seed=3, columns=(4, 16), fractions=(0.0, 0.25, 0.5, 0.75, 1.0))
    verdict = ev.e1_verdict(cells, ev.generator_entropy_gap(grounded), batches_per_draw=40 / 16)
    assert verdict["holds"], verdict["checks"]
    assert verdict["smallest_n"]["retrieval"] == 4
    blind = [_pool(rng, signal=0.0)]
    cells = ev.e1_cells(blind, draws=30, seed=4, columns=(4, 16), fractions=(0.0, 0.25, 0.5, 0.75, 1.0))
    verdict = ev.e1_verdict(cells, ev.generator_entropy_gap(blind), batches_per_draw=40 / 16)
    assert not verdict["holds"] and verdict["smallest_n"] == {"retrieval": None, "mi": None}


def test_scorer_free_measures():
    obs = "Numbers: [3, 17, 5]\nTarget: 15"
    assert ev.names_numbers("17 - 5 is 12, plus 3 is 15", obs)
    assert not ev.names_numbers("I need to add 175 and 3", obs)  # 175 is not 17 or 5
    same = "let me think about the numbers step by step"
    assert ev.cross_input_overlap([same, same, same], [0, 1, 1]) == 1.0  # a template across prompts
    assert ev.cross_input_overlap(["a b c d e", "f g h i j"], [0, 1]) == 0.0
    assert math.isnan(ev.cross_input_overlap([same, same], [0, 0]))  # no pair from different prompts


def _arm(slope_value, entropy=(0.5, 0.6), fmt=(0.9, 0.9), start=0.4):
    its = [1, 2, 3, 4, 5, 6]
    return {
        "iterations": its,
        "retrieval": [start + slope_value * (i - 1) for i in its],
        "entropy": [entropy[0], *[entropy[0]] * 4, entropy[1]],
        "format": [fmt[0], *[fmt[0]] * 4, fmt[1]],
    }


def test_the_e2_verdict_separates_template_collapse_from_degeneration_and_from_noise():
    floor = {1: {"retrieval": [0.40, 0.41, 0.39, 0.40, 0.41, 0.39]}, 2: {"retrieval": [0.4] * 5 + [0.42]}}
    a = {s: _arm(0.0) for s in (1, 2, 3)}
    b = {s: _arm(-0.05) for s in (1, 2, 3)}  # a known slope of -0.05 per iteration, a drop of 0.25
    verdict = ev.e2_verdict(a, b, floor)
    assert verdict["holds"] and not verdict["degeneration"]
    assert verdict["per_seed"][1]["b_slope"] == pytest.approx(-0.05, rel=1e-9)
    degenerate = {s: _arm(-0.05, fmt=(0.9, 0.5)) for s in (1, 2, 3)}
    verdict = ev.e2_verdict(a, degenerate, floor)
    assert not verdict["holds"] and verdict["degeneration"]
    flat = {s: _arm(-0.001) for s in (1, 2, 3)}  # falls, but by less than twice the frozen policy's noise
    assert not ev.e2_verdict(a, flat, floor)["checks"]["B: drop > 2 x the frozen policy's per-iteration SD"]
    assert ev.e2_gate(0.25, 3) and not ev.e2_gate(0.1, 5) and not ev.e2_gate(0.3, 2)


def test_the_e3_verdicts():
    spreads = [0.0, 0.0, 0.1, 0.2, 0.3, 0.4]
    dr = [{"spread": s, "task": 2 * s, "entropy": 0.006} for s in spreads]
    grpo = [{"spread": s, "task": 0.0 if s == 0 else 1.0 + s, "entropy": 0.007} for s in spreads]
    assert ev.e3a_verdict({"dr_grpo": dr, "grpo": grpo})["holds"]
    steep = [{**b, "task": 0.0 if b["spread"] == 0 else 10 * b["spread"]} for b in grpo]  # max/min 4 > 2
    assert not ev.e3a_verdict({"dr_grpo": dr, "grpo": steep})["holds"]
    assert ev.e3b_verdict({1: 0.3, 2: 0.2, 3: 0.4}, {1: 0.1, 2: 0.1, 3: 0.1})["outcome"] == "holds"
    assert ev.e3b_verdict({1: 0.3, 2: 0.0, 3: 0.1}, {1: 0.1, 2: 0.1, 3: 0.1})["outcome"] == "inconclusive"
    assert ev.e3b_verdict({1: 0.1, 2: 0.0, 3: 0.1}, {1: 0.1, 2: 0.1, 3: 0.1})["outcome"] == "fails"


def _run(root, name, lines):
    import json

    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("{}\n")
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"iteration": i + 1, **m}) + "\n" for i, m in enumerate(lines))
    )


def test_the_readers_turn_run_directories_into_verdicts(tmp_path):
    def lines(slope_value, lr_zero=False, val=None):
        out = []
        for i in range(6):
            line = {
                "diag/first_turn/est/retrieval_above_chance": 0.4 + (0 if lr_zero else slope_value * i),
                "diag/first_turn/est/conditional_entropy": 0.5 + 0.01 * i,
                "rollout/invalid_frac": 0.1,
                "filter/groups_mixed": 4.0,
            }
            out.append(line)
        if val is not None:
            out[-1]["val/return"] = val
        return out

    e2, floor, e3b, e3a = (tmp_path / n for n in ("e2", "floor", "e3b", "e3a"))
    for seed in (1, 2, 3):
        _run(e2, f"A_s{seed}", lines(0.0, val=0.1))
        _run(e2, f"B_s{seed}", lines(-0.05))
        _run(e3b, f"filter_s{seed}", lines(0.0, val=0.1 + 0.05 * seed))
    for seed in (1, 2):
        _run(
            floor,
            f"C_s{seed}",
            [
                {**line, "diag/first_turn/est/retrieval_above_chance": 0.4 + 0.01 * (i % 2)}
                for i, line in enumerate(lines(0.0, lr_zero=True))
            ],
        )
    result = ev._e2(e2, floor)
    assert result["gate"] is True and result["verdict"]["holds"]
    buckets = [
        {
            "grad/b0/spread_mean": 0.0,
            "grad/b0/task/norm": 0.0,
            "grad/b0/entropy/norm": 0.006,
            "grad/b1/spread_mean": 0.2,
            "grad/b1/task/norm": 1.0,
            "grad/b1/entropy/norm": 0.007,
            "grad/b2/spread_mean": 0.4,
            "grad/b2/task/norm": 1.2,
            "grad/b2/entropy/norm": 0.006,
        }
    ]
    _run(e3a, "preset-grpo_s1", buckets)
    dr = [{**buckets[0], "grad/b1/task/norm": 0.4, "grad/b2/task/norm": 0.9}]
    _run(e3a, "preset-dr_grpo_s1", dr)
    result = ev._e3(e3a, e2, e3b)
    assert result["e3a"][1]["holds"], result["e3a"]
    assert result["e3b"]["outcome"] == "holds" and result["e3b"]["differences"][3] == pytest.approx(0.15)


def test_the_e1_sampling_script_writes_a_pool_the_analysis_reads(tmp_path):
    from mirl.policy.tiny import tiny_policy

    spec = importlib.util.spec_from_file_location("e1_swap", _PATH.parent / "e1_swap.py")
    e1 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e1)
    model = tmp_path / "tiny"
    tiny_policy().save(model)
    argv = ["--task", "countdown", "--gen-seed", "1", "--out", str(tmp_path / "e1"), "--model", str(model)]
    assert e1.main([*argv, "--prompts", "5"]) == 0
    pool = ev.load_pool(tmp_path / "e1" / "countdown_g1")
    grounded = int((pool.kind == "grounded").sum())
    assert pool.scores.shape == (len(pool.kind), 5) and pool.donor_own.shape == ((pool.kind == "donor").sum(),)
    assert np.all(np.isfinite(pool.scores)) and np.all(pool.scores < 0)
    assert sorted(pool.prompt[pool.kind == "grounded"].tolist()) == sorted(set(pool.prompt[pool.kind == "grounded"]))
    assert grounded >= 4 and (pool.kind == "donor").sum() >= 4  # the open span gives the tiny model's replies a Z
    scores, true_col = ev.draw_mixture(pool, 4, 0.5, np.random.default_rng(0))
    assert scores.shape == (4, 4) and true_col.tolist() == [0, 1, 2, 3]
    assert e1.main([*argv, "--prompts", "5"]) == 0  # a finished pool is skipped
