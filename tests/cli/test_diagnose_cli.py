"""`mirl diagnose` end to end through the real argument parser, with the tiny model as the scorer."""

import doctest
import json
import re

import pytest

from mirl.catalogue import unknown_keys
from mirl.cli import diagnose as diagnose_cli
from mirl.cli import main
from mirl.policy.tiny import tiny_policy
from mirl.rollout import write_episodes

from ..diagnostics.helpers import grid_episodes


@pytest.fixture
def rollouts(tmp_path):
    return write_episodes(tmp_path / "rollouts.jsonl", grid_episodes(num_groups=3, samples=2, num_turns=2))


@pytest.fixture
def tiny_scorer(monkeypatch):
    """``--model`` resolves to the tiny test model; the requested name and options are recorded."""
    calls = []

    def load(model, **options):
        calls.append((model, options))
        return tiny_policy(seed=5)

    monkeypatch.setattr(diagnose_cli, "load_policy", load)
    return calls


def test_doctests():
    assert doctest.testmod(diagnose_cli).failed == 0


def test_diagnose_prints_a_table_and_writes_json(rollouts, tmp_path, tiny_scorer, capsys):
    out_file = tmp_path / "out" / "diag.json"
    argv = [
        "diagnose",
        str(rollouts),
        "--model",
        "tiny-test",
        "--scope",
        "all",
        "--pairs",
        "8",
        "--seed",
        "1",
        "--out",
        str(out_file),
    ]
    assert main(argv) == 0
    assert tiny_scorer == [("tiny-test", {"device": "auto", "dtype": "auto", "max_batch_tokens": 8192})]
    captured = capsys.readouterr()
    printed = captured.out
    # said up front on stderr, before the bar: the tokens to score, the mode, episodes and pairs
    assert re.search(r"scoring [\d,]+ tokens \(shared mode; 6 episodes, up to 8 pairs per scope\)", captured.err)
    for text in ("first_turn", "trajectory", "turn1", "turn2", "MI-Est", "retrieval@1", "H(Z|X)", "regime"):
        assert text in printed
    report = json.loads(out_file.read_text())
    assert report["model"] == "tiny-test" and report["episodes"] == 6 and report["mode"] == "shared"
    assert [row["scope"] for row in report["summary"]] == ["first_turn", "trajectory", "turn1", "turn2"]
    assert unknown_keys(report["metrics"]) == []
    assert report["metrics"]["diag/trajectory/pairs"] == 8.0
    # one batch, no trend: the graded share with its interval and the replies' validity (mirl's own rollouts)
    for text in ("agnostic share", "malformed replies", "one batch: no trend, no alarm"):
        assert text in " ".join(printed.split())  # the console wraps the note
    trajectory = report["summary"][1]
    est = report["metrics"]
    assert trajectory["agnostic_share"] == est["diag/trajectory/est/agnostic_share"]
    assert trajectory["agnostic_share_interval"] == [
        est["diag/trajectory/est/agnostic_share_ci_low"],
        est["diag/trajectory/est/agnostic_share_ci_high"],
    ]
    assert trajectory["invalid_frac"] == est["diag/invalid_frac"] == 0.0  # grid_episodes' replies all parse


def test_naive_mode_gives_the_same_numbers(rollouts, tmp_path, tiny_scorer):
    results = {}
    for mode in ("shared", "naive"):
        out_file = tmp_path / f"{mode}.json"
        assert main(["diagnose", str(rollouts), "--pairs", "6", "--mode", mode, "--out", str(out_file)]) == 0
        results[mode] = json.loads(out_file.read_text())["metrics"]
    for key, value in results["shared"].items():
        if key.endswith("/mi_estimate") or key.endswith("/conditional_entropy"):
            assert results["naive"][key] == pytest.approx(value, rel=1e-5, abs=1e-6)


def test_missing_file_and_bad_pairs_exit_with_2(tmp_path, tiny_scorer, capsys):
    assert main(["diagnose", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["diagnose", str(empty), "--pairs", "0"]) == 2
    assert main(["diagnose", str(empty)]) == 2
    assert "holds no JSON lines" in capsys.readouterr().err
    assert tiny_scorer == []  # the file is read before any model is loaded


def test_the_offline_default_scores_when_no_model_is_named(rollouts, tiny_scorer):
    assert main(["diagnose", str(rollouts), "--pairs", "4"]) == 0
    assert tiny_scorer[0][0] == "smollm2-135m-instruct"


def test_copied_format_examples_are_no_reasoning_here_as_in_training(tmp_path, tiny_scorer, capsys):
    """The rule training applies (a reasoning that copies mirl's format example is no reasoning of its own) is the
    rule `mirl diagnose` applies: rollouts whose every reasoning is the example read no_reasoning, not a quadrant."""
    from mirl.rollout.prompts import EXAMPLE_REASONING

    from ..diagnostics.helpers import make_episode, make_turn

    copied = [
        make_episode(
            g,
            k,
            [make_turn(f"<|im_start|>user\nState {g}<|im_end|>\n<|im_start|>assistant\n", EXAMPLE_REASONING, "Right")],
        )  # fmt: skip
        for g in range(4)
        for k in range(2)
    ]
    path = write_episodes(tmp_path / "copied.jsonl", copied)
    out_file = tmp_path / "diag.json"
    assert main(["diagnose", str(path), "--model", "tiny-test", "--pairs", "8", "--out", str(out_file)]) == 0
    metrics = json.loads(out_file.read_text())["metrics"]
    assert metrics["diag/first_turn/copied_reasoning"] == 8.0
    assert metrics["diag/first_turn/regime"] == "no_reasoning"


def test_a_run_directory_or_its_rollouts_folder_means_its_newest_file(tmp_path, tiny_scorer, capsys):
    rollouts = tmp_path / "run" / "rollouts"
    rollouts.mkdir(parents=True)
    for iteration in (2, 10):  # names sort by their zero-padded number: 10 is the newest
        write_episodes(rollouts / f"iteration_{iteration:06d}.jsonl", grid_episodes(num_groups=3, samples=2))
    (rollouts / "notes.txt").write_text("not a rollout file")
    for given in (tmp_path / "run", rollouts):
        out_file = tmp_path / "diag.json"
        assert main(["diagnose", str(given), "--model", "tiny-test", "--pairs", "4", "--out", str(out_file)]) == 0
        assert json.loads(out_file.read_text())["rollouts"] == str(rollouts / "iteration_000010.jsonl")
        assert "the newest of 2 rollout files" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["diagnose", str(empty), "--model", "tiny-test"]) == 2
    assert "is a directory without rollout files" in capsys.readouterr().err


def test_a_metrics_file_is_named_as_such_in_one_short_line(tmp_path, tiny_scorer, capsys):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"iteration": 1, **{f"diag/k{i}": 0.0 for i in range(180)}}) + "\n")
    assert main(["diagnose", str(metrics), "--model", "tiny-test"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a run's metrics file (one line per iteration), not rollouts" in err and len(err) < 300
    assert tiny_scorer == []  # refused before any model is loaded


def test_a_run_is_diagnosed_with_its_own_pairs_scopes_and_reasoning_rule(tmp_path, tiny_scorer, capsys):
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    write_episodes(run / "rollouts" / "iteration_000001.jsonl", grid_episodes(num_groups=3, samples=2, num_turns=2))
    lines = ["diagnostics:", "  num_pairs: 5", "  scopes: [trajectory]", "  reasoning: open"]
    (run / "config.yaml").write_text("\n".join(lines) + "\n")
    out_file = tmp_path / "diag.json"
    assert main(["diagnose", str(run), "--model", "tiny-test", "--out", str(out_file)]) == 0
    report = json.loads(out_file.read_text())
    assert report["pairs"] == 5 and report["scopes"] == ["trajectory"]
    assert "5 pairs, scopes trajectory, reasoning open from" in capsys.readouterr().err
    # what the user sets wins; a file outside a run takes the defaults
    assert main(["diagnose", str(run), "--model", "tiny-test", "--pairs", "3", "--out", str(out_file)]) == 0
    assert json.loads(out_file.read_text())["pairs"] == 3
    loose = write_episodes(tmp_path / "loose.jsonl", grid_episodes(num_groups=3, samples=2))
    assert main(["diagnose", str(loose), "--model", "tiny-test", "--out", str(out_file)]) == 0
    report = json.loads(out_file.read_text())
    assert report["pairs"] == 64 and report["scopes"] == ["first_turn", "trajectory"]
