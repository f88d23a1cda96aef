"""Each analysis on a synthetic sweep directory whose numbers are known, and the files it writes."""

import csv
import json
import math

import pytest
import yaml

from mirl.experiments import KINDS, AnalysisError, SweepDirError, read_sweep, write_analysis


def make_sweep(root, runs):
    """runs: (name, cell, seed, config, metric lines) -> a sweep directory like `mirl sweep` writes."""
    manifest = {
        "name": root.name,
        "runs": [{"name": n, "cell": c, "seed": s, "overrides": []} for n, c, s, _, _ in runs],
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweep.json").write_text(json.dumps(manifest))
    for name, _, _, config, lines in runs:
        run = root / "runs" / name
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        (run / "metrics.jsonl").write_text(
            "".join(json.dumps({"iteration": i + 1, **m}) + "\n" for i, m in enumerate(lines))
        )
        (run / "summary.json").write_text(json.dumps({"status": "finished"}))
    return root


def diag(mi, h):
    return {"diag/trajectory/est/mi_estimate": mi, "diag/trajectory/est/conditional_entropy": h}


def test_table_is_mean_and_standard_error_over_seeds(tmp_path):
    runs = []
    for strategy, finals in (("none", [0.2, 0.4, 0.9]), ("top_p", [0.5, 0.5, 0.5])):
        for seed, final in enumerate(finals, start=1):
            lines = [
                {"rollout/success": 0.0, "val/success": 1.0},
                {"rollout/success": 0.7, "val/success": final, **diag(0.1 * seed, 2.0)},
            ]
            runs.append((f"{strategy}_s{seed}", {"filter.strategy": strategy}, seed, {}, lines))
    table = KINDS["table"](read_sweep(make_sweep(tmp_path / "sw", runs)))
    none, top_p = table.rows
    assert none["cell"] == "strategy=none" and none["runs"] == 3
    # final success = last val/success: 0.2, 0.4, 0.9 -> mean 0.5, sem sqrt(0.13 / 3) (see test_spec_stats)
    assert none["success"].mean == pytest.approx(0.5, rel=1e-12)
    assert none["success"].sem == pytest.approx(math.sqrt(0.13 / 3), rel=1e-12)
    assert none["success_peak"].mean == pytest.approx(1.0, rel=1e-12)  # max of val/success = the first 1.0
    assert none["mi"].mean == pytest.approx(0.2, rel=1e-12)  # 0.1, 0.2, 0.3
    assert top_p["success"].sem == 0.0


def test_quartile_means_are_recovered_in_band_order(tmp_path):
    runs = []
    for q, (lo, hi, success) in enumerate([(0.5, 0.75, 0.3), (0.0, 0.25, 0.8), (0.75, 1.0, 0.1), (0.25, 0.5, 0.6)]):
        for seed in (1, 2):
            config = {"filter": {"strategy": "band", "band_lo": lo, "band_hi": hi}}
            lines = [{"rollout/success": success + (0.1 if seed == 2 else -0.1), **diag(success, 1.0)}]
            runs.append((f"q{q}_s{seed}", {"case": f"Q{int(lo * 4) + 1}"}, seed, config, lines))
    table = KINDS["quartiles"](read_sweep(make_sweep(tmp_path / "sw", runs)))
    assert [r["cell"] for r in table.rows] == ["Q1 [0, 0.25)", "Q2 [0.25, 0.5)", "Q3 [0.5, 0.75)", "Q4 [0.75, 1)"]
    assert [round(r["success"].mean, 12) for r in table.rows] == [0.8, 0.6, 0.3, 0.1]  # +-0.1 around each
    assert [round(r["mi"].mean, 12) for r in table.rows] == [0.8, 0.6, 0.3, 0.1]


def test_correlation_of_a_monotone_relation_is_one(tmp_path):
    runs = []
    for i, success in enumerate([0.1, 0.3, 0.35, 0.6, 0.9]):
        lines = [{"rollout/success": success, **diag(math.log1p(success), 3.0 - success), "train/entropy": 1.0}]
        runs.append((f"r{i}", {"filter.value": str(i)}, 1, {}, lines))
    table = KINDS["correlation"](read_sweep(make_sweep(tmp_path / "sw", runs)), resamples=100)
    rows = {r["metric"]: r for r in table.rows}
    assert rows["diag/trajectory/est/mi_estimate"]["rho"] == pytest.approx(1.0, rel=1e-12)
    assert rows["diag/trajectory/est/conditional_entropy"]["rho"] == pytest.approx(-1.0, rel=1e-12)
    assert rows["diag/trajectory/est/mi_estimate"]["ci_low"] == pytest.approx(1.0, rel=1e-12)
    assert math.isnan(rows["train/entropy"]["rho"])  # constant across runs: rho undefined, reported as such
    assert rows["diag/trajectory/est/mi_estimate"]["family"] == "mi"


def test_intervention_and_noise_lines(tmp_path):
    runs = []
    for strategy in ("none", "top_p"):
        for rate in (1.0, 0.8, 0.5):
            envs = f"[{{name: frozenlake, options: {{success_rate: {rate}}}}}]"
            lines = [
                {
                    "rollout/success": rate,
                    "rollout/return_mean": rate - (0.1 if strategy == "none" else 0),
                    **diag(rate, 1 - rate),
                }
            ]
            runs.append((f"{strategy}_{rate}", {"filter.strategy": strategy, "envs": envs}, 1, {}, lines))
    records = read_sweep(make_sweep(tmp_path / "sw", runs))
    noise = KINDS["noise"](records)
    none_rows = [r for r in noise.rows if r["line"] == "strategy=none"]
    assert [r["slip"] for r in none_rows] == [0.0, 0.2, 0.5]
    assert [round(r["return"].mean, 12) for r in none_rows] == [0.9, 0.7, 0.4]
    with pytest.raises(AnalysisError, match="name the intervention key with --key"):
        KINDS["intervention"](records)
    with pytest.raises(AnalysisError, match="is not a number"):
        KINDS["intervention"](records, key="filter.strategy")


def test_layout_and_regimes_and_the_written_files(tmp_path):
    runs = []
    for p, k in ((8, 16), (32, 4), (128, 1)):
        config = {"rollout": {"prompts_per_iteration": p, "group_size": k}}
        lines = [
            {"rollout/success": 0.1, "time/iteration": 10.0, **diag(0.5, 2.0)},
            {
                "rollout/success": k / 16,
                "time/iteration": 30.0,
                **diag(0.4, 1.5),
                "diag/trajectory/regime": "template collapse",
            },
        ]
        runs.append((f"{p}x{k}", {"case": f"{p}x{k}"}, 1, config, lines))
    sweep = make_sweep(tmp_path / "sw", runs)
    records = read_sweep(sweep)
    layout = KINDS["layout"](records)
    assert [r["cell"] for r in layout.rows] == ["128x1", "32x4", "8x16"]
    assert layout.rows[2]["success"].mean == 1.0 and layout.rows[0]["iteration_time"].mean == 20.0
    regimes = KINDS["regimes"](records)
    assert regimes.rows[0] | {} == {
        "run": "8x16",
        "first_entropy": 2.0,
        "first_mi": 0.5,
        "last_entropy": 1.5,
        "last_mi": 0.4,
        "last_regime": "template collapse",
    }
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (sweep / "analysis").mkdir()
    (sweep / "analysis" / "layout.csv").symlink_to(victim)  # a planted link is replaced, never followed
    paths = write_analysis(sweep, layout)
    assert victim.read_text() == "keep" and not paths["csv"].is_symlink()
    header = next(csv.reader(paths["csv"].open()))
    assert header[:5] == ["cell", "runs", "success_mean", "success_sem", "success_n"]
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    write_analysis(sweep, regimes)
    index = (sweep / "analysis" / "index.html").read_text()
    assert "layout.png" in index and "regimes.png" in index


def test_a_directory_that_is_not_a_sweep_is_refused(tmp_path):
    with pytest.raises(SweepDirError, match="no sweep.json"):
        read_sweep(tmp_path)
    (tmp_path / "sweep.json").write_text("[1]")
    with pytest.raises(SweepDirError, match="malformed"):
        read_sweep(tmp_path)


def test_gradients_average_each_bucket_over_runs_and_iterations(tmp_path):
    def grads(task_scale, kl):
        # bucket b with spread 0.1 * (b + 1): task norm = task_scale * spread, entropy 0.5, kl as given
        out = {}
        for b in range(3):
            spread = 0.1 * (b + 1)
            out |= {f"grad/b{b}/spread_mean": spread, f"grad/b{b}/task/norm": task_scale * spread}
            out |= {f"grad/b{b}/entropy/norm": 0.5, f"grad/b{b}/kl/norm": kl}
        return out

    runs = [
        ("a", {"seed": "1"}, 1, {}, [grads(10.0, 0.0), grads(20.0, 0.2)]),
        ("b", {"seed": "2"}, 2, {}, [{"rollout/success": 0.0}, grads(30.0, 0.4)]),
    ]
    table = KINDS["gradients"](read_sweep(make_sweep(tmp_path / "sw", runs)))
    assert [r["bucket"] for r in table.rows] == ["b0", "b1", "b2"]
    assert [round(r["spread"], 12) for r in table.rows] == [0.1, 0.2, 0.3]
    assert [r["observations"] for r in table.rows] == [3.0, 3.0, 3.0]  # two iterations of a, one of b
    # task norms of b2: 10, 20, 30 x 0.3 -> mean 6.0; sem = std([3, 6, 9], ddof=1) / sqrt(3) = sqrt(3)
    assert table.rows[2]["task_norm"].mean == pytest.approx(6.0, rel=1e-12)
    assert table.rows[2]["task_norm"].sem == pytest.approx(math.sqrt(3.0), rel=1e-12)
    assert [r["entropy_norm"].mean for r in table.rows] == [0.5, 0.5, 0.5]
    assert table.rows[0]["kl_norm"].mean == pytest.approx(0.2, rel=1e-12)
    paths = write_analysis(tmp_path / "sw", table)
    assert paths["png"].read_bytes().startswith(b"\x89PNG")


def test_gradients_without_a_decomposition_say_how_to_get_one(tmp_path):
    runs = [("a", {"seed": "1"}, 1, {}, [{"rollout/success": 0.0}])]
    with pytest.raises(AnalysisError, match="gradient_every"):
        KINDS["gradients"](read_sweep(make_sweep(tmp_path / "sw", runs)))


def test_the_command_line_offers_every_analysis_kind():
    import argparse

    from mirl.cli import sweep as command

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers(dest="command"))
    action = next(a for a in parser._subparsers._group_actions[0].choices["analyze"]._actions if a.dest == "kind")
    assert tuple(action.choices) == tuple(KINDS)


def test_mirl_analyze_writes_each_kind_where_asked_and_never_through_a_link(tmp_path, capsys):
    from mirl.cli import main

    runs = [
        (f"r{i}", {"filter.value": str(v)}, 1, {}, [{"rollout/success": v, **diag(v, 1.0)}])
        for i, v in enumerate([0.1, 0.5, 0.9])
    ]
    sweep = make_sweep(tmp_path / "sw", runs)
    out = tmp_path / "results"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / "table.md").symlink_to(victim)
    assert main(["analyze", str(sweep), "--kind", "table", "--kind", "intervention", "--output", str(out)]) == 0
    assert victim.read_text() == "keep" and not (out / "table.md").is_symlink()
    assert "| strategy" not in (out / "table.md").read_text() and "value=0.5" in (out / "table.md").read_text()
    assert {p.name for p in out.iterdir()} >= {"table.md", "table.csv", "table.png", "intervention.png", "index.html"}
    assert str(out / "index.html") in capsys.readouterr().out


def test_mirl_analyze_on_a_directory_that_is_no_sweep_is_one_line_and_exit_2(tmp_path, capsys):
    from mirl.cli import main

    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mirl analyze: ") and "\n" not in err and "sweep.json" in err
