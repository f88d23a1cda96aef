"""`mirl train`, `mirl train --resume` and `mirl eval` through the real command line entry point."""

import json

import pytest

from mirl.cli import main


@pytest.fixture
def model_dir(tmp_path, formatted_policy):
    path = tmp_path / "model"
    formatted_policy.save(path)
    return path


def _args(model_dir, out, *extra):
    return [
        f"model.name={model_dir}",
        "envs=[{name: pick_word}]",
        "rollout.prompts_per_iteration=2",
        "rollout.group_size=4",
        "rollout.max_turns=1",
        "rollout.max_new_tokens=12",
        "diagnostics.num_pairs=6",
        "validation.every=-1",
        "logging.progress=false",
        f"trainer.output_dir={out}",
        "trainer.name=cli",
        *extra,
    ]


def test_train_resume_eval_report(tmp_path, model_dir, pick_env, capsys):
    out = tmp_path / "runs"
    assert main(["train", *_args(model_dir, out, "trainer.iterations=1")]) == 0
    printed = capsys.readouterr().out
    run = out / "cli"
    assert f"run directory: {run}" in printed and "report:" in printed
    assert (run / "report.html").is_file()

    assert main(["train", "--resume", str(run), "trainer.iterations=2", "--no-report"]) == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]

    result = tmp_path / "eval.json"
    assert main(["eval", str(run), "validation.num_instances=2", "--out", str(result)]) == 0
    metrics = json.loads(result.read_text())
    assert 0.0 <= metrics["val/success"] <= 1.0 and "val/pass@1/pick_word" in metrics


def test_config_errors_reach_the_user(tmp_path, model_dir, pick_env):
    with pytest.raises(ValueError, match="did you mean 'rollout.group_size'"):
        main(["train", *_args(model_dir, tmp_path, "rollout.grup_size=3")])


def test_help_config_lists_documented_keys(capsys):
    from mirl.cli.config_help import config_help

    rows = {key: (default, doc) for key, default, doc in config_help()}
    assert rows["rollout.group_size"] == ("16", "K: rollouts per prompt group; all K share the instance seed")
    assert rows["trainer.early_stop.max_empty_steps"][0] == "5"
    assert all(doc for _, doc in rows.values())  # every key is documented
    assert main(["train", "--help-config"]) == 0
    assert "group_size" in capsys.readouterr().out
