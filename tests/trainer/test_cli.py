"""`mirl train`, `mirl train --resume` and `mirl eval` through the real command line entry point."""

import json
import shutil

import pytest

from mirl.cli import main


@pytest.fixture
def train_args(cli_args):
    return lambda model_dir, out, *extra: ["--defaults", *cli_args(model_dir, out, "cli", *extra)]


def test_train_resume_eval_report(tmp_path, model_dir, pick_env, capsys, train_args):
    out = tmp_path / "runs"
    assert main(["train", *train_args(model_dir, out, "trainer.iterations=1")]) == 0
    printed = capsys.readouterr().out
    run = out / "cli"
    assert f"run directory: {run}" in printed and "report:" in printed
    assert (run / "report.html").is_file()
    last = printed.strip().splitlines()[-1]  # the run's health in one line, last (mirl.report.verdict)
    assert last.startswith("summary: ") and "| iterations 1 of 1 |" in last and "| success " in last

    assert main(["train", "--resume", str(run), "trainer.iterations=2", "--no-report"]) == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]

    result = tmp_path / "eval.json"
    assert main(["eval", str(run), "validation.num_instances=2", "--out", str(result)]) == 0
    assert "validating 2 episodes (group size 1, at most 1 turn each)" in capsys.readouterr().err  # said up front
    metrics = json.loads(result.read_text())
    assert 0.0 <= metrics["val/success"] <= 1.0 and "val/pass@1/pick_word" in metrics


def test_a_run_that_never_updated_says_why_and_exits_1_under_strict(tmp_path, model_dir, pick_env, capsys, train_args):
    """One-token replies never parse, so every group's rewards are equal, the filter keeps none and no update
    happens: the run is written as usual and the command ends with one line saying why, a warning (exit 0), or an
    error with status 1 under ``--strict``."""
    out = tmp_path / "runs"
    extra = ("trainer.iterations=1", "rollout.max_new_tokens=1", "diagnostics.enabled=false", "--no-report")
    why = "no update happened in 1 iteration: every group's samples all failed (reward spread 0)"
    assert main(["train", *train_args(model_dir, out, *extra)]) == 0
    captured = capsys.readouterr()
    assert f"run directory: {out / 'cli'}" in captured.out
    assert captured.err.strip().splitlines()[-1].startswith(f"mirl train: warning: {why}")
    assert main(["train", "--strict", *train_args(model_dir, out, "trainer.name=strict", *extra)]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"mirl train: {why}")


def test_resume_without_a_checkpoint_refuses_and_restart_starts_over(tmp_path, model_dir, pick_env, capsys, train_args):
    """A run killed before its first checkpoint: ``--resume`` says so (exit 2) and leaves the run as it is;
    ``--resume --restart`` runs it again from iteration 1."""
    out = tmp_path / "runs"
    assert main(["train", *train_args(model_dir, out, "trainer.iterations=1", "--no-report")]) == 0
    run = out / "cli"
    shutil.rmtree(run / "checkpoints")  # as if killed while writing its first checkpoint
    before = (run / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--no-report"]) == 2
    assert "has no checkpoint to resume from (1 iterations logged" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_text() == before
    assert main(["train", "--resume", str(run), "--restart", "--no-report"]) == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1]


def test_config_errors_reach_the_user(tmp_path, model_dir, pick_env, capsys, train_args):
    assert main(["train", *train_args(model_dir, tmp_path, "rollout.grup_size=3")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl train: unknown config key") and "did you mean 'rollout.group_size'" in err


def test_run_and_checkpoint_directories_are_scorers(tmp_path, model_dir, pick_env, capsys, train_args):
    """``--model RUN`` and ``--model RUN/checkpoints/iteration_N``: the run's base model with the trained weights."""
    import torch

    from mirl.cli.models import load_named_policy
    from mirl.trainer.checkpoint import load_checkpoint

    out = tmp_path / "runs"
    extra = ("trainer.iterations=2", "trainer.checkpoint_every=1", "algorithm.actor_lr=1e-2", "--no-report")
    assert main(["train", *train_args(model_dir, out, *extra)]) == 0
    run = out / "cli"
    base = load_named_policy(str(model_dir)).model.state_dict()
    for source, iteration in ((run, 2), (run / "checkpoints" / "iteration_000001", 1)):
        loaded = load_named_policy(str(source)).model.state_dict()
        saved = load_checkpoint(run / "checkpoints" / f"iteration_{iteration:06d}")["policy"]
        assert all(torch.equal(loaded[key], saved[key]) for key in saved)
        assert not all(torch.equal(loaded[key], base[key]) for key in base)  # trained weights, not the base
    rollouts = run / "rollouts" / "iteration_000001.jsonl"
    result = tmp_path / "diag.json"
    argv = ["diagnose", str(rollouts), "--model", str(run / "checkpoints" / "iteration_000001"), "--pairs", "4"]
    assert main([*argv, "--out", str(result)]) == 0
    assert json.loads(result.read_text())["episodes"] == 8


def test_no_environment_variable_reaches_a_run_file(tmp_path, model_dir, pick_env, monkeypatch, train_args):
    """A secret in the environment appears in no file of a trained, reported run (and cannot be interpolated)."""
    secret = "s3cr3t-9f8e7d6c5b4a"
    monkeypatch.setenv("MIRL_TEST_SECRET", secret)
    out = tmp_path / "runs"
    leak = "trainer.name=${oc.env:MIRL_TEST_SECRET}"
    assert main(["train", *train_args(model_dir, out, "trainer.iterations=1", leak)]) == 2
    assert main(["train", *train_args(model_dir, out, "trainer.iterations=1", "logging.tensorboard=true")]) == 0
    written = [path for path in (out / "cli").rglob("*") if path.is_file()]
    assert len(written) >= 5  # config, metrics, groups, summary, rollouts, checkpoint, report, ...
    assert [path for path in written if secret.encode() in path.read_bytes()] == []


def test_help_config_lists_documented_keys(capsys):
    from mirl.cli.config_help import config_help

    rows = {key: (default, doc) for key, default, doc in config_help()}
    assert rows["rollout.group_size"] == ("16", "K: rollouts per prompt group; all K share the instance seed")
    assert rows["trainer.early_stop.max_empty_steps"][0] == "5"
    assert all(doc for _, doc in rows.values())  # every key is documented
    assert main(["train", "--help-config"]) == 0
    assert "group_size" in capsys.readouterr().out


def test_help_config_piped_is_one_unwrapped_row_per_key_with_its_range():
    """Piped (``mirl train --help-config | grep lr``), every key is one tab-separated line: key, default, the
    values it accepts, meaning; never wrapped at 80 columns."""
    import subprocess
    import sys

    from mirl.cli.config_help import config_help

    done = subprocess.run(
        [sys.executable, "-m", "mirl.cli", "train", "--help-config"], capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "key\tdefault\trange\tmeaning" and len(lines) == 1 + len(config_help())
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in lines[1:]}
    assert all(len(row) == 3 and row[1] for row in rows.values())
    assert rows["rollout.group_size"] == ["16", ">= 1", "K: rollouts per prompt group; all K share the instance seed"]
    assert rows["filter.mode"][1] == "one of linear, softmax" and rows["rollout.top_p"][1] == "in (0, 1]"
    assert rows["algorithm.dual_clip"][1] == "> 1 (or none)"


def test_resume_refuses_an_override_that_changes_what_the_run_trains(tmp_path, model_dir, pick_env, capsys, train_args):
    """`--resume RUN rollout.group_size=8` used to rewrite config.yaml silently, so the rest of the run trained with
    another group size; now it is one line and the run's config is untouched. Safe keys still go through."""
    out = tmp_path / "runs"
    assert main(["train", *train_args(model_dir, out, "trainer.iterations=1", "trainer.checkpoint_every=1")]) == 0
    run = next(out.iterdir())
    before = (run / "config.yaml").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "rollout.group_size=8", "--no-report"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot change rollout.group_size" in err and "trainer.iterations" in err
    assert (run / "config.yaml").read_text() == before
    assert main(["train", "--resume", str(run), "trainer.iterations=2", "logging.progress=false", "--no-report"]) == 0


def test_ctrl_c_says_how_to_resume(tmp_path, model_dir, pick_env, capsys, train_args, monkeypatch):
    """Ctrl-C in the second iteration (after the first one's checkpoint): exit 130 and one line with the command that
    continues the run (it used to say only "interrupted")."""
    from mirl.trainer import loop

    real, calls = loop.run_iteration, []

    def interrupted_second_time(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "run_iteration", interrupted_second_time)
    out = tmp_path / "runs"
    args = train_args(model_dir, out, "trainer.iterations=3", "trainer.checkpoint_every=1", "trainer.name=cut")
    assert main(["train", *args]) == 130
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1] == f"mirl train: interrupted; continue it with: mirl train --resume {out / 'cut'}"


def test_a_run_saved_before_a_key_was_replaced_still_resumes(tmp_path, model_dir, pick_env, capsys, train_args):
    """A run's config.yaml written before diagnostics.regime_mi_fraction was replaced: resume and eval drop the old
    key (its successor takes its default); the same key in a config the user writes is still refused, naming the
    successor."""
    out = tmp_path / "runs"
    assert main(["train", *train_args(model_dir, out, "trainer.iterations=1"), "--no-report"]) == 0
    run = out / "cli"
    saved = run / "config.yaml"
    saved.write_text(saved.read_text().replace("diagnostics:\n", "diagnostics:\n  regime_mi_fraction: 0.1\n", 1))
    assert "regime_mi_fraction" in saved.read_text()
    assert main(["train", "--resume", str(run), "trainer.iterations=2", "--no-report"]) == 0
    assert "regime_mi_fraction" not in saved.read_text()  # rewritten by the resume, with the successor
    assert main(["eval", str(run), "validation.num_instances=2"]) == 0
    written = tmp_path / "mine.yaml"
    written.write_text("diagnostics:\n  regime_mi_fraction: 0.1\n")
    capsys.readouterr()
    assert main(["train", str(written)]) == 2
    assert "it was replaced by diagnostics.regime_retrieval_threshold" in capsys.readouterr().err
