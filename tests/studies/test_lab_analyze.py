"""The organism study's analysis (studies/lab/analyze.py) on constructed runs with known answers: a collapsing
B-low, a flat one, a filter that helps and one that does nothing, a positive control whose retrieval leads success,
and the false-positive rate of the seed rule under its null."""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

_DIR = Path(__file__).resolve().parents[2] / "studies" / "lab"
sys.path.insert(0, str(_DIR))  # the study's scripts import each other by name, as when run as scripts
import analyze as lab  # noqa: E402  (after the path insert)
import null_power  # noqa: E402

FLOOR = lab.Floor(
    mean={m: 0.5 for m in lab.MEASURES} | {"invalid": 0.0},
    sd={m: 0.01 for m in lab.MEASURES},
)


def run(**series):
    """A run of 15 windows: every measure flat at the floor mean unless given."""
    base = {m: [FLOOR.mean[m]] * 15 for m in lab.MEASURES}
    return base | {k: list(v) for k, v in series.items()}


def test_collapse_check_passes_a_collapse_and_not_degeneration_or_learning():
    rise_fall = [0.5 + 0.02 * w for w in range(8)] + [0.64 - 0.02 * w for w in range(1, 8)]  # best window 7
    template = [0.3] * 8 + [0.3 + 0.03 * w for w in range(1, 8)]
    collapse = run(retrieval=rise_fall, template=template, cond_entropy=[1.0] * 15, invalid=[0.02] * 15)
    result = lab.collapse_check(collapse, FLOOR)
    # R(b) = 0.64, late R = mean(0.54, 0.52, 0.50) = 0.52: a fall of 12 floor SDs; late template = mean(0.45,
    # 0.48, 0.51) = 0.48, +0.18 = 18 SDs; entropy unchanged
    assert result["best_window"] == 7 and result["retrieval_fall"] == pytest.approx(12.0)
    assert result["template_rise"] == pytest.approx(18.0) and result["pass"]
    # the same fall with validity gone (degeneration) does not pass
    assert not lab.collapse_check(run(**(collapse | {"invalid": [0.02] * 8 + [0.3] * 7})), FLOOR)["pass"]
    # nor when H(Z|X) falls with it (low-entropy collapse, not template collapse): -0.05 nats = -5 SDs
    assert not lab.collapse_check(run(**(collapse | {"cond_entropy": [1.0] * 12 + [0.95] * 3})), FLOOR)["pass"]
    # a run that only learns (retrieval rises to the end) does not pass
    assert not lab.collapse_check(run(retrieval=[0.5 + 0.02 * w for w in range(15)]), FLOOR)["pass"]


def test_lead_check_counts_windows_between_the_two_crossings():
    retrieval = [0.5, 0.6, 0.6, 0.55, 0.5, 0.4, 0.4, 0.4]  # best at 1; below 0.6 - 0.03 first at window 3
    success = [0.5, 0.5, 0.5, 0.5, 0.45, 0.4, 0.4, 0.4]  # S(b) = 0.5; below 0.47 first at window 4
    template = [0.3] * 3 + [0.5] * 5  # the template share rises: (a) passes too
    result = lab.lead_check(run(retrieval=retrieval, success=success, template=template), FLOOR)
    assert (result["t_retrieval"], result["t_success"], result["pass"]) == (3, 4, True)
    same_time = run(retrieval=retrieval, success=[0.5, 0.5, 0.5] + [0.4] * 5, template=template)
    assert lab.lead_check(same_time, FLOOR)["t_success"] == 3 and not lab.lead_check(same_time, FLOOR)["pass"]
    # the same lead in a run where (a) does not pass (no template rise) does not count
    assert not lab.lead_check(run(retrieval=retrieval, success=success), FLOOR)["pass"]


def test_control_check_needs_retrieval_first_and_entropy_in_band():
    retrieval = [0.5, 0.5, 0.4, 0.3, 0.2]  # leaves the band (below 0.48) at window 2
    success = [0.5, 0.5, 0.5, 0.4, 0.3]  # at window 3
    good = lab.control_check(run(retrieval=retrieval, success=success, cond_entropy=[0.5, 0.5, 0.6, 0.7, 0.8]), FLOOR)
    assert (good["t_retrieval"], good["t_success"], good["pass"]) == (2, 3, True)
    low_entropy = run(retrieval=retrieval, success=success, cond_entropy=[0.5, 0.5, 0.4, 0.4, 0.4])
    assert not lab.control_check(low_entropy, FLOOR)["pass"]


def test_paired_interval_and_verdict_rules():
    mean, low, high = lab.paired_interval([0.1, 0.2, 0.3, 0.2, 0.2])
    # mean 0.2; sd = sqrt(0.02 / 4) = 0.0707; half = 2.7764 * 0.0707 / sqrt(5) = 0.0878
    assert mean == pytest.approx(0.2) and low == pytest.approx(0.2 - 0.08780, abs=1e-5) and high > mean
    assert lab.interval_verdict([(0.2, 0.1, 0.3), (0.1, 0.01, 0.2)]) == "holds"
    assert lab.interval_verdict([(0.2, 0.1, 0.3), (-0.1, -0.2, -0.01)]) == "fails"
    assert lab.interval_verdict([(0.2, 0.1, 0.3), (0.0, -0.1, 0.1)]) == "inconclusive"
    assert [lab.seed_verdict(k, 5) for k in (5, 4, 3, 2, 1, 0)] == ["holds"] * 2 + ["inconclusive"] * 2 + ["fails"] * 2
    assert lab.seed_verdict(5, 3) == "not testable"


def _write(directory: Path, lines: list[dict]) -> None:
    directory.mkdir(parents=True)
    (directory / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _lines(rng, iterations, retrieval, success, template, invalid=0.0, kept=1.0):
    out = []
    for i in range(iterations):
        out.append({
            "iteration": i + 1,
            lab.MEASURES["retrieval"]: retrieval(i) + rng.normal(0, 0.02),
            lab.MEASURES["cond_entropy"]: 1.0 + rng.normal(0, 0.02),
            lab.MEASURES["mi"]: 0.3 + rng.normal(0, 0.02),
            lab.MEASURES["success"]: success(i) + rng.normal(0, 0.02),
            lab.MEASURES["invalid"]: invalid,
            lab.MEASURES["template"]: template(i) + rng.normal(0, 0.02),
            lab.MEASURES["grounded"]: 1 - template(i),
            lab.MEASURES["overlap"]: 0.1,
            lab.MEASURES["kept"]: kept,
        })  # fmt: skip
    return out


def test_end_to_end_on_constructed_runs(tmp_path):
    """Five seeds where B-low collapses after iteration 70 and F-low does not: (a) and (c) hold; S-low equals
    B-low, so (d) is inconclusive; P's retrieval falls 20 iterations before its success, so (p) holds."""
    rng = np.random.default_rng(0)
    flat = lambda value: lambda i: value  # noqa: E731
    collapse = lambda i: 0.6 if i < 70 else 0.6 - 0.004 * (i - 70)  # noqa: E731  retrieval 0.6 -> 0.28
    late_fall = lambda i: 0.6 if i < 90 else 0.6 - 0.004 * (i - 90)  # noqa: E731  success falls 20 iterations later
    rising = lambda i: 0.2 if i < 70 else 0.2 + 0.005 * (i - 70)  # noqa: E731
    for seed in lab.SEEDS:
        _write(tmp_path / f"floor_s{seed}", _lines(rng, 50, flat(0.3), flat(0.3), flat(0.5)))
        _write(tmp_path / f"b-low_s{seed}", _lines(rng, 150, collapse, late_fall, rising))
        _write(tmp_path / f"f-low_s{seed}", _lines(rng, 150, flat(0.6), flat(0.6), flat(0.2), kept=0.5))
        _write(tmp_path / f"s-low_s{seed}", _lines(rng, 150, collapse, late_fall, rising))
        p_retrieval = lambda i: 0.3 if i < 40 else max(0.05, 0.3 - 0.01 * (i - 40))  # noqa: E731
        p_success = lambda i: 0.3 if i < 60 else max(0.05, 0.3 - 0.01 * (i - 60))  # noqa: E731
        _write(tmp_path / f"p_s{seed}", _lines(rng, 150, p_retrieval, p_success, rising))
    runs = lab.load(tmp_path)
    result = lab.analyse(runs)
    assert result["a"]["verdict"] == "holds" and result["a"]["passes"] == 5
    assert result["b"]["verdict"] == "holds"
    assert result["c"]["verdict"] == "holds"
    # late = iterations 120..149 (mean 134.5): B-low 0.6 - 0.004 * 64.5 = 0.342, F-low 0.6: +0.258
    assert result["c"]["intervals"]["retrieval"][0] == pytest.approx(0.004 * 64.5, abs=0.01)
    assert result["d"]["verdict"] == "inconclusive"  # no effect: the intervals straddle 0
    assert result["p"]["verdict"] == "holds"
    from report import write_report

    write_report(tmp_path, runs, result)
    text = (tmp_path / "results.md").read_text()
    assert "| (a) collapse in B-low | **holds** | 5 of 5 seeds pass |" in text
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_seed_rule_false_positive_rate_under_the_null_is_small():
    """Simulated runs with every window at the Floor mean plus Floor noise: (a) passes in under 1 % of seeds, so
    4 of 5 seeds pass with probability under 1e-6 (P(Bin(5, 0.01) >= 4) = 5 * 0.01**4 * 0.99 + 0.01**5)."""
    rng = np.random.default_rng(1)
    q = null_power.simulate(lab.collapse_check, null_power.flat(FLOOR, 15), FLOOR, rng)
    assert q < 0.01
    assert null_power.binomial_at_least(0.01) == pytest.approx(5 * 0.01**4 * 0.99 + 0.01**5)
    assert math.isclose(null_power.binomial_at_least(1.0), 1.0)
