"""Every sub-command answers a user error with one line ``mirl <cmd>: <message>`` on stderr and exit status 2.

The cases are the ones a new user hits: a bad key, a value out of range, a missing file, a directory instead of
a file, an empty file, malformed lines, an unknown environment and an unavailable device. Each runs through the
real argument parser (``mirl.cli.main``) and fails before any model is loaded, so the whole table takes seconds.
"""

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from mirl.cli import main
from mirl.config import ConfigError
from mirl.rollout import write_episodes

from ..diagnostics.helpers import grid_episodes

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")


@pytest.fixture
def files(tmp_path):
    """Bad inputs of every kind, by name."""
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    (tmp_path / "broken.yaml").write_text("rollout: {group_size: 4\n")
    (tmp_path / "broken.jsonl").write_text('{"schema": 1, "turns": []}\n{"schema": 1,\n')
    (tmp_path / "keys.jsonl").write_text('{"schema": 1, "turns": []}\n')
    (tmp_path / "group.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "x"}], "group": [1]}))
    (tmp_path / "reward.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "x"}], "reward": None}))
    (tmp_path / "adir").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("rollout: {group_size: 4}\n")
    (tmp_path / "a_file").write_text("not a run\n")
    (tmp_path / "emptyrun").mkdir()
    (tmp_path / "emptyrun" / "config.yaml").write_text("")
    (tmp_path / "sweep.yaml").write_text("name: s\ngrid:\n  rollout.grup_size: [2]\nseeds: [1]\n")
    grid = "  envs: [[{name: sokoban, options: {height: abc}}]]\n"
    (tmp_path / "envsweep.yaml").write_text(f"name: s\ngrid:\n{grid}seeds: [1]\n")
    write_episodes(tmp_path / "good.jsonl", grid_episodes(num_groups=2, samples=2, num_turns=1))
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "bomb.yaml").write_text(
        "name: bomb\noverrides:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"  {n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdef", "bcdefg", strict=True))
    )
    grid = "".join(f"  rollout.k{k}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n" for k in range(8))
    (tmp_path / "big.yaml").write_text(f"name: big\ngrid:\n{grid}seeds: [1]\n")
    return tmp_path


# (argv with {tmp} for the fixture directory, text the message must hold)
CASES = {
    "train bad key": (["train", "rollout.grup_size=4"], "did you mean 'rollout.group_size'"),
    "train wrong type": (["train", "rollout.group_size=four"], "'rollout.group_size' got 'four'"),
    "train out of range": (["train", "algorithm.actor_lr=nan"], "algorithm.actor_lr must be a finite number >= 0"),
    "train negative cadence": (["train", "trainer.checkpoint_every=-5"], "trainer.checkpoint_every must be"),
    "train missing file": (["train", "{tmp}/nope.yaml"], "does not exist"),
    "train directory": (["train", "{tmp}/adir"], "is a directory"),
    "train empty file": (["train", "{tmp}/empty.yaml"], "is empty"),
    "train malformed": (["train", "{tmp}/broken.yaml"], "is not valid YAML"),
    "train unknown env": (["train", "envs=[{name: frozenlak}]"], "unknown environment 'frozenlak'"),
    "train env option": (["train", "envs=[{name: frozenlake, options: {size: 100000}}]"], "at most 32"),
    "train run name": (["train", "trainer.name=../../x"], "trainer.name must be one path component"),
    "train resume missing": (["train", "--resume", "{tmp}/nope"], "does not exist"),
    "train env secret": (["train", "trainer.name=${oc.env:HOME}"], "resolvers such as"),
    "train not a mapping": (["train", "{tmp}/a_file"], "must hold a mapping of keys"),
    "train bad option": (["train", "--bogus"], "unrecognized arguments: --bogus"),
    "train resume file": (["train", "--resume", "{tmp}/a_file"], "is a file, not a run directory"),
    "train resume not a run": (["train", "--resume", "{tmp}/adir"], "is not a run directory"),
    "train resume empty config": (["train", "--resume", "{tmp}/emptyrun"], "is empty"),
    "train no config": (["train"], "no config given; start with `mirl train configs/quickstart.yaml`"),
    "train overrides without config": (["train", "trainer.iterations=2"], "or pass --defaults"),
    "train resume without checkpoint": (["train", "--resume", "{tmp}/run"], "has no checkpoint to resume from"),
    "train restart without resume": (["train", "--defaults", "--restart"], "--restart goes with --resume"),
    "train override not yaml": (["train", "envs=[{name:frozenlake,options:{size:4}}]"], "put a space after each colon"),
    "train env option type": (["train", "envs=[{name: frozenlake, options: {size: abc}}]"], "must be an int"),
    "train env option range": (["train", "envs=[{name: sokoban, options: {height: 1}}]"], "height, width >= 3"),
    "train missing model path": (["train", "--defaults", "model.name={tmp}/nope"], "model path '{tmp}/nope' does"),
    "eval bad key": (["eval", "some/model", "rollout.grup_size=4"], "unknown config key"),
    "eval out of range": (["eval", "some/model", "validation.num_instances=0"], "validation.num_instances must"),
    "eval missing model": (["eval", "{tmp}/nope"], "model path '{tmp}/nope' does not exist"),
    "eval missing nested path": (["eval", "{tmp}/adir/typo"], "model path '{tmp}/adir/typo' does not exist"),
    "eval env option type": (["eval", "{tmp}/adir", "envs=[{name: sokoban, options: {height: abc}}]"], "an int"),
    "eval config directory": (["eval", "some/model", "--config", "{tmp}/adir"], "is a directory"),
    "eval run without checkpoint": (["eval", "{tmp}/run"], "no complete checkpoint"),
    "eval missing config": (["eval", "some/model", "--config", "{tmp}/nope.yaml"], "does not exist"),
    "eval empty config": (["eval", "some/model", "--config", "{tmp}/empty.yaml"], "is empty"),
    "eval malformed config": (["eval", "some/model", "--config", "{tmp}/broken.yaml"], "is not valid YAML"),
    "eval empty run config": (["eval", "{tmp}/emptyrun"], "is empty"),
    "eval unknown env": (["eval", "some/model", "envs=[{name: frozenlak}]"], "unknown environment 'frozenlak'"),
    "eval empty model directory": (["eval", "{tmp}/adir"], "holds no model (no config.json)"),
    "eval out directory": (["eval", "some/model", "--out", "{tmp}/adir"], "--out '{tmp}/adir' is a directory"),
    "diagnose out of range": (["diagnose", "{tmp}/keys.jsonl", "--pairs", "0"], "--pairs must be >= 1"),
    "diagnose bad type": (["diagnose", "{tmp}/keys.jsonl", "--pairs", "x"], "invalid int value"),
    "diagnose bad option": (["diagnose", "{tmp}/keys.jsonl", "--scope", "all_of_them"], "invalid choice"),
    "diagnose missing file": (["diagnose", "{tmp}/nope.jsonl"], "no such file"),
    "diagnose directory": (["diagnose", "{tmp}/adir"], "is a directory"),
    "diagnose empty file": (["diagnose", "{tmp}/empty.jsonl"], "holds no JSON lines"),
    # read as a stream: the first problem in file order, line 1's missing field before line 2's torn JSON
    "diagnose malformed": (["diagnose", "{tmp}/broken.jsonl"], "broken.jsonl:1: field 'env' is missing"),
    "diagnose missing keys": (["diagnose", "{tmp}/keys.jsonl"], "keys.jsonl:1: field 'env' is missing"),
    "diagnose list group": (["diagnose", "{tmp}/group.jsonl"], "group.jsonl:1: field 'group' must be"),
    "diagnose null reward": (["diagnose", "{tmp}/reward.jsonl"], "reward.jsonl:1: field 'reward' must be a finite"),
    "diagnose missing model": (["diagnose", "{tmp}/good.jsonl", "--model", "{tmp}/nope"], "does not exist"),
    "diagnose empty model directory": (["diagnose", "{tmp}/good.jsonl", "--model", "{tmp}/adir"], "holds no model"),
    "diagnose model without checkpoint": (["diagnose", "{tmp}/good.jsonl", "--model", "{tmp}/run"], "no complete"),
    "diagnose out directory": (["diagnose", "{tmp}/good.jsonl", "--out", "{tmp}/adir"], "is a directory"),
    "diagnose out under a file": (["diagnose", "{tmp}/good.jsonl", "--out", "{tmp}/a_file/x.json"], "is a file"),
    "report missing run": (["report", "{tmp}/nope"], "does not exist"),
    "report bad option": (["report", "{tmp}/run", "--episodes", "-1"], "expected a whole number"),
    "report file": (["report", "{tmp}/a_file"], "is a file, not a run directory"),
    "report not a run": (["report", "{tmp}/adir"], "is not a run directory (it holds none of config.yaml"),
    "report out directory": (["report", "{tmp}/run", "--out", "{tmp}/adir"], "is a directory"),
    "report bad iterations": (["report", "{tmp}/run", "--iterations", "1,x"], "expected comma-separated"),
    "compare missing run": (["compare", "{tmp}/nope", "{tmp}/run"], "does not exist"),
    "compare file": (["compare", "{tmp}/run", "{tmp}/a_file"], "is a file, not a run directory"),
    "compare not a run": (["compare", "{tmp}/run", "{tmp}/adir"], "is not a run directory"),
    "compare out directory": (["compare", "{tmp}/run", "--out", "{tmp}/adir"], "is a directory"),
    "compare labels": (["compare", "{tmp}/run", "--labels", "a", "b"], "one label per run"),
    "envs bad option": (["envs", "--bogus"], "unrecognized arguments: --bogus"),
    "envs unknown env": (["envs", "frozenlak"], "unknown environment 'frozenlak'"),
    "play unknown env": (["play", "frozenlak"], "unknown environment 'frozenlak'"),
    "play out of range": (["play", "frozenlake", "size=100000"], "at most 32"),
    "play bad option": (["play", "frozenlake", "sise=5"], "unknown option 'sise'"),
    "play option type": (["play", "frozenlake", "size=abc"], "option size of environment 'frozenlake' must be an int"),
    "play sokoban option type": (["play", "sokoban", "height=abc"], "must be an int, got 'abc'; e.g. height=6"),
    "play option range": (["play", "frozenlake", "size=1"], "size must be >= 2"),
    "play list option type": (["play", "countdown", "num_numbers=3,x"], "or a comma-separated list of int values"),
    "play bad seed": (["play", "frozenlake", "--seed", "x"], "--seed expects an integer"),
    "play no env": (["play"], "the following arguments are required"),
    "sweep missing spec": (["sweep", "{tmp}/nope.yaml"], "is not a file"),
    "sweep directory": (["sweep", "{tmp}/adir"], "is not a file"),
    "sweep malformed": (["sweep", "{tmp}/broken.yaml"], "is not valid YAML"),
    "sweep not a spec": (["sweep", "{tmp}/run/config.yaml", "--dry-run"], "unknown field 'rollout'"),
    "sweep bad key": (["sweep", "{tmp}/sweep.yaml", "--dry-run"], "did you mean 'rollout.group_size'"),
    "sweep env option type": (["sweep", "{tmp}/envsweep.yaml", "--dry-run"], "must be an int, got 'abc'"),
    "sweep bad jobs": (["sweep", "{tmp}/sweep.yaml", "--jobs", "x"], "invalid int value"),
    "sweep no jobs": (["sweep", "{tmp}/sweep.yaml", "--jobs", "0", "--dry-run"], "--jobs must be >= 1"),
    "analyze not a sweep": (["analyze", "{tmp}/adir"], "has no sweep.json"),
    "analyze bad kind": (["analyze", "{tmp}/adir", "--kind", "bogus"], "invalid choice: 'bogus'"),
    "unknown command": (["trian"], "invalid choice: 'trian'"),
    # inputs that once ended in a traceback
    "train control character": (["train", "trainer.name=a\x01b"], "control characters are not allowed"),
    "train malformed envs": (["train", "envs=[{name: "], "'envs=[{name: ' has a value that is not valid YAML"),
    "train malformed mapping": (["train", "envs={a"], "has a value that is not valid YAML"),
    "train sokoban option type": (["train", "envs=[{name: sokoban, options: {height: abc}}]"], "must be an int"),
    "train fifo config": (["train", "{tmp}/fifo"], "is not a regular file (a pipe, socket or device)"),
    "train device config": (["train", "/dev/zero"], "is not a regular file (a pipe, socket or device)"),
    "eval fifo config": (["eval", "some/model", "--config", "{tmp}/fifo"], "is not a regular file"),
    "play env option type": (["play", "sokoban", "height=abc"], "height of environment 'sokoban' must be an int"),
    "play negative seed": (["play", "sokoban", "--seed", "-1"], "--seed must be an integer in [0, 2**63), got -1"),
    "diagnose huge pairs": (["diagnose", "{tmp}/good.jsonl", "--pairs", "1000000000000"], "--pairs must be at most"),
    "sweep alias bomb": (["sweep", "{tmp}/bomb.yaml", "--dry-run"], "YAML nodes once aliases are expanded"),
    "sweep too many runs": (["sweep", "{tmp}/big.yaml", "--dry-run"], "expands to 100,000,000 runs"),
    "verl-data too many rows": (
        ["verl-data", "sokoban", "{tmp}/vd", "--train", "1000000000", "--val", "1"],
        "--train must be at most 1,000,000 instances",
    ),
}
DEVICE_CASES = {
    "train device": (["train", "--defaults", "model.device=cuda"], "has no CUDA GPU"),
    "eval device": (["eval", "some/model", "model.device=cuda"], "has no CUDA GPU"),
    "diagnose device": (["diagnose", "{tmp}/good.jsonl", "--device", "cuda", "--model", "x/y"], "has no CUDA GPU"),
}


def run_cli(argv, tmp, capsys):
    argv = [arg.replace("{tmp}", str(tmp)) for arg in argv]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_user_error(code, out, err, command, text):
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"mirl {command}: " if command else "mirl: "), err
    assert text in lines[0], err
    assert "Traceback" not in out + err


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_errors_are_one_line_and_exit_2(case, files, capsys):
    argv, text = CASES[case]
    text = text.replace("{tmp}", str(files))
    code, out, err = run_cli(argv, files, capsys)
    command = argv[0] if argv[0] != "trian" else ""
    assert_one_line_user_error(code, out, err, command, text)


@NO_CUDA
@pytest.mark.parametrize("case", sorted(DEVICE_CASES))
def test_an_unavailable_device_is_a_user_error(case, files, capsys):
    argv, text = DEVICE_CASES[case]
    code, out, err = run_cli(argv, files, capsys)
    assert_one_line_user_error(code, out, err, argv[0], text)


def test_nothing_is_written_for_a_config_error(tmp_path, capsys):
    argv = ["train", f"trainer.output_dir={tmp_path}/runs", "trainer.checkpoint_every=-5"]
    code, _, _ = run_cli(argv, tmp_path, capsys)
    assert code == 2 and not (tmp_path / "runs").exists()


def test_a_real_process_prints_one_line_and_debug_raises(tmp_path):
    command = [sys.executable, "-m", "mirl.cli", "train", "rollout.grup_size=4"]
    plain = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.strip().splitlines() == [
        "mirl train: unknown config key 'rollout.grup_size' in override 'rollout.grup_size=4'; "
        "did you mean 'rollout.group_size'?"
    ]
    for argv in (["--debug", "train", "rollout.grup_size=4"], ["train", "rollout.grup_size=4", "--debug"]):
        with pytest.raises(ConfigError, match="unknown config key"):  # the traceback is Python's own
            main(argv)


def test_report_and_compare_list_malformed_lines_and_go_on(files, capsys):
    """A run being written has a torn last line: ``report`` and ``compare`` skip malformed lines (exit 0) and name
    each one with its line number, rather than refusing the whole run."""
    run = files / "torn"
    run.mkdir()
    (run / "config.yaml").write_text("rollout: {group_size: 4\n")
    (run / "metrics.jsonl").write_text('{"iteration": 1, "rollout/success": 0.5}\n[1]\n{"iteration": 2, "rol')
    for argv in (["report", str(run)], ["compare", str(run), "--out", str(files / "c.html")]):
        code, out, err = run_cli(argv, files, capsys)
        assert code == 0 and "Traceback" not in out + err
        assert "metrics.jsonl line 2: not a JSON object, skipped" in out
        assert "config.yaml is not valid YAML" in out


DEBUG_CASES = (
    "train bad key",
    "eval missing config",
    "diagnose missing keys",
    "report not a run",
    "compare file",
    "compare labels",
    "envs unknown env",
    "play out of range",
)


@pytest.mark.parametrize("case", DEBUG_CASES)
def test_debug_shows_the_traceback_for_every_command(case, files):
    """``--debug`` (before or after the command) lets the exception through, so Python prints its traceback."""
    argv = [arg.replace("{tmp}", str(files)) for arg in CASES[case][0]]
    for debug_argv in (["--debug", *argv], [*argv, "--debug"]):
        with pytest.raises(Exception, match=re.escape(CASES[case][1])) as raised:
            main(debug_argv)
        assert not isinstance(raised.value, SystemExit)


@pytest.mark.parametrize("argv", [["train", "rollout.grup_size=4"], ["eval", "some/model", "rollout.grup_size=4"]])
def test_a_config_error_fails_before_torch_is_imported(argv, tmp_path):
    """``mirl train`` and ``mirl eval`` check the config with light imports only, so a typo costs about a second,
    not a torch import."""
    code = f"import sys; from mirl.cli import main; code = main({argv!r}); print(code, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout.split() == ["2", "False"], done.stderr


def _no_network(monkeypatch):
    """Make every TCP connection fail, and record the attempts."""
    import socket

    attempts = []

    def refuse(address, *args, **kwargs):
        attempts.append(address)
        raise OSError("network is off in this test")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return attempts


def test_a_missing_relative_model_path_is_not_a_hub_id(files, monkeypatch, capsys):
    """``mirl eval runs/typo`` where ``runs/`` exists: the path does not exist, said at once, with no network."""
    attempts = _no_network(monkeypatch)
    monkeypatch.chdir(files)
    (files / "runs").mkdir()
    code, out, err = run_cli(["eval", "runs/typo"], files, capsys)
    assert_one_line_user_error(code, out, err, "eval", "model path 'runs/typo' does not exist")
    assert attempts == []


def test_an_uncached_hub_id_with_the_hub_unreachable_is_one_line(files, monkeypatch, capsys):
    """An id that is not in the cache, while the hub cannot be reached: one line, one connection attempt, no retries."""
    from mirl.errors import UserError
    from mirl.run_dirs import check_model_name

    attempts = _no_network(monkeypatch)
    monkeypatch.setenv("HF_HOME", str(files / "hf"))  # an empty cache
    monkeypatch.chdir(files)
    with pytest.raises(UserError, match="not in the local Hugging Face cache and the Hugging Face hub cannot be"):
        check_model_name("nobody-org/no-such-model")
    assert len(attempts) == 1
    code, out, err = run_cli(["diagnose", "{tmp}/good.jsonl", "--model", "nobody-org/no-such-model"], files, capsys)
    assert_one_line_user_error(code, out, err, "diagnose", "the Hugging Face hub cannot be reached")


def test_compare_writes_into_the_current_folder_and_says_where(files, monkeypatch, capsys):
    """Not beside the first run: a results folder under version control is no place for a page nobody asked for
    there; the printed path is absolute, so where it went is never a guess."""
    here = files / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    (files / "other").mkdir()
    (files / "other" / "config.yaml").write_text("rollout: {group_size: 4}\n")
    code, out, _ = run_cli(["compare", "{tmp}/run", "{tmp}/other"], files, capsys)
    assert code == 0 and f"comparison: {here.resolve() / 'compare.html'} (" in out
    assert (here / "compare.html").is_file() and not (files / "compare.html").exists()


def test_a_start_that_fails_to_load_its_model_leaves_no_run_directory(files, monkeypatch, capsys):
    """An uncached hub id fails when the model loads, after the run directory was made: it used to stay behind with
    a config and an empty rollouts/ (a report of it was empty and exited 0); now nothing of the run remains."""
    _no_network(monkeypatch)
    monkeypatch.setenv("HF_HOME", str(files / "hf"))  # an empty cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out_dir = files / "runs"
    argv = ["train", "configs/quickstart.yaml", "model.name=nobody-org/no-such-model", f"trainer.output_dir={out_dir}",
            "trainer.name=half"]  # fmt: skip
    code, out, err = run_cli(argv, files, capsys)
    assert_one_line_user_error(code, out, err, "train", "not in the local Hugging Face cache")
    assert not (out_dir / "half").exists()


@pytest.mark.parametrize("where", ["/proc/nope", "{tmp}/a_file"])
def test_an_output_dir_that_cannot_hold_runs_is_one_line_naming_the_key(where, files, capsys):
    code, out, err = run_cli(["train", "configs/quickstart.yaml", f"trainer.output_dir={where}"], files, capsys)
    assert_one_line_user_error(code, out, err, "train", "trainer.output_dir")
    assert "set trainer.output_dir to a folder you can write" in err
