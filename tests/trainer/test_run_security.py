"""A run directory may come from someone else: its checkpoints never run code, links planted at output paths
are never written through, and its YAML cannot exhaust memory. Everything goes through the real CLI."""

import json
import tracemalloc

import pytest
import torch

from mirl.cli import main
from mirl.config import ConfigError, to_yaml
from mirl.config_files import load_config
from mirl.safeio import RunDirError
from mirl.trainer.rundir import OUTPUT_DIRS, OUTPUTS


class Payload:
    """Unpickling this object calls ``open(marker, "w")``: the file appears if the checkpoint's code runs."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def run_args(cli_args):
    """The shared CLI run, named ``run``, without TensorBoard, every rollout saved (more outputs to plant at)."""
    extra = ("logging.tensorboard=false", "logging.save_rollouts=all")
    return lambda model_dir, out, *more: cli_args(model_dir, out, "run", *extra, *more)


def _one_line_error(capsys, command):
    err = capsys.readouterr().err  # may also hold the model loader's progress bar
    ours = [line for line in err.splitlines() if line.startswith("mirl ")]
    assert len(ours) == 1 and ours[0].startswith(f"mirl {command}: ") and "Traceback" not in err, err
    return ours[0]


def test_a_pickled_checkpoint_payload_is_refused_and_never_runs(tmp_path, model_dir, pick_env, capsys, run_args):
    """Defect: state.pt was loaded with weights_only=False, so eval and resume ran the file's code."""
    run = tmp_path / "run"
    config = load_config(None, run_args(model_dir, tmp_path))
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(config))
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 1}) + "\n")
    marker = tmp_path / "code-ran"
    state = run / "checkpoints" / "iteration_000001" / "state.pt"
    state.parent.mkdir(parents=True)
    torch.save({"iteration": 1, "policy": Payload(marker)}, state)

    assert main(["eval", str(run), "validation.num_instances=1"]) == 2
    assert "refusing to load" in _one_line_error(capsys, "eval") and not marker.exists()
    assert main(["train", "--resume", str(run), "--no-report"]) == 2
    assert "pickled Python object" in _one_line_error(capsys, "train") and not marker.exists()


@pytest.mark.parametrize("name", OUTPUTS + OUTPUT_DIRS)
def test_train_refuses_a_link_at_an_output_path(tmp_path, model_dir, pick_env, capsys, name, run_args):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    (run / name).symlink_to(victim / "precious" if "." in name else victim)
    assert main(["train", "--defaults", *run_args(model_dir, tmp_path, "trainer.iterations=1")]) == 2
    assert "symbolic link" in _one_line_error(capsys, "train")
    assert [p.name for p in victim.iterdir()] == ["precious"] and (victim / "precious").read_text() == "keep me"


def _plant(path, victim):
    """Replace the file at ``path`` by a link to a fresh victim file; returns the victim."""
    victim.write_text("keep me")
    path.unlink(missing_ok=True)
    path.symlink_to(victim)
    return victim


PNG_NAMES = ("training", "diagnostics", "regime", "filter", "reward_matrix", "gradients", "reasoning")


def test_links_inside_output_folders_are_replaced_not_followed(tmp_path, model_dir, pick_env, capsys, run_args):
    """Train, report, compare and eval --out each write over planted links without touching their targets."""
    victims = tmp_path / "victims"
    victims.mkdir()
    run = tmp_path / "run"
    for folder in ("rollouts", "checkpoints", "report"):
        (run / folder).mkdir(parents=True)
    rollout = run / "rollouts" / "iteration_000001.jsonl"
    planted = [_plant(rollout, victims / "rollout")]
    (run / "checkpoints" / "iteration_000001").symlink_to(victims)
    pngs = [run / "report" / f"{name}.png" for name in PNG_NAMES]
    html = tmp_path / "cmp.html"
    (tmp_path / "cmp").mkdir()
    result = tmp_path / "eval.json"
    outputs = [run / "report.html", *pngs, html, tmp_path / "cmp" / "compare.png", result]
    planted += [_plant(path, victims / f"v{i}") for i, path in enumerate(outputs)]

    assert main(["train", "--defaults", *run_args(model_dir, tmp_path, "trainer.iterations=1")]) == 0
    assert main(["compare", str(run), "--out", str(html)]) == 0
    assert main(["eval", str(run), "validation.num_instances=1", "--out", str(result)]) == 0
    written = [p for p in [rollout, run / "checkpoints" / "iteration_000001" / "state.pt", *outputs] if p.exists()]
    assert all(v.read_text() == "keep me" for v in planted)
    assert all(p.is_file() and not p.is_symlink() for p in written if p not in pngs)
    assert any(not p.is_symlink() for p in pngs), "the report wrote no PNG"
    assert sorted(p.name for p in victims.iterdir()) == sorted(v.name for v in planted)  # nothing added


def test_a_linked_png_folder_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"iteration": i, "rollout/success": 0.5}) + "\n" for i in (1, 2))
    )
    victim = tmp_path / "victim"
    victim.mkdir()
    (run / "report").symlink_to(victim)
    assert main(["report", str(run)]) == 2
    assert "symbolic link" in _one_line_error(capsys, "report")
    assert list(victim.iterdir()) == [] and not (run / "report.html").exists()


def _alias_bomb(levels: int) -> str:
    """``levels`` lists of nine aliases to the previous list: 9**levels strings from about 400 bytes."""
    lines = ["l0: &l0 [" + ", ".join(["xxxxxxxx"] * 9) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join([*lines, "model: {name: tiny}", f"diagnostics: {{scopes: *l{levels}}}"]) + "\n"


def _peak_mb(fn):
    tracemalloc.start()
    try:
        result = fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return result, peak


def test_a_yaml_alias_bomb_is_refused_within_a_small_memory_budget(tmp_path, capsys):
    """Defect: a ~400-byte config.yaml made `mirl report` format millions of strings (hundreds of MB)."""
    run = tmp_path / "run"
    run.mkdir()
    bomb = _alias_bomb(6)  # 531441 strings once expanded; the unfixed report peaked near 45 MB and 7 s
    assert len(bomb) < 500
    (run / "config.yaml").write_text(bomb)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"iteration": i, "rollout/success": 0.5}) + "\n" for i in (1, 2))
    )

    plain = tmp_path / "plain"  # a first report of a plain run, so that the measurement holds no imports
    plain.mkdir()
    (plain / "config.yaml").write_text("rollout: {group_size: 4}\n")
    (plain / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text())
    assert main(["report", str(plain)]) == 0
    capsys.readouterr()

    code, peak = _peak_mb(lambda: main(["report", str(run)]))
    assert code == 0 and peak < 10, peak
    assert "config.yaml has more than 50000 YAML nodes" in capsys.readouterr().out
    assert (run / "report.html").stat().st_size < 2**20

    # a config given to train is refused before any expansion: aliases are not allowed there at all
    error, peak = _peak_mb(lambda: pytest.raises((ConfigError, RunDirError), load_config, run / "config.yaml"))
    assert "aliases" in str(error.value) and peak < 5, peak
    assert main(["train", "--resume", str(run)]) == 2
    assert "aliases" in _one_line_error(capsys, "train")


def test_a_pickled_object_in_model_weights_is_refused_and_never_runs(tmp_path, formatted_policy, capsys):
    """A model directory is read like a run directory: a .bin holding a pickled object is refused, not run."""
    model = tmp_path / "model"
    formatted_policy.save(model)
    (model / "model.safetensors").unlink()
    marker = tmp_path / "code-ran"
    torch.save({**formatted_policy.model.state_dict(), "extra": Payload(marker)}, model / "pytorch_model.bin")
    assert main(["eval", str(model), "envs=[{name: bandit}]", "validation.num_instances=1"]) == 2
    assert "refusing to load the weights" in _one_line_error(capsys, "eval") and not marker.exists()
