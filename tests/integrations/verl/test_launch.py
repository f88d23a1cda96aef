"""The shipped ``configs/verl`` settings against veRL's own config loader, the dry run, and the plugin's entry point.

Needs veRL (``bash scripts/test-verl.sh``); the install-hint test runs where veRL is absent. No GPU and no
download: veRL's check reads the model's ``config.json`` and tokenizer, so the model path is overridden with a
local directory holding a one-layer Qwen2 config and the tiny tokenizer.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mirl.cli import main

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = sorted(p for p in (ROOT / "configs" / "verl").glob("*.yaml") if not p.name.startswith("_"))
HAS_VERL = importlib.util.find_spec("verl") is not None
needs_verl = pytest.mark.skipif(not HAS_VERL, reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")


def test_every_paper_setting_is_shipped():
    names = {p.stem for p in SETTINGS}
    for env in ("sokoban", "frozenlake", "countdown", "metamathqa"):
        for algo in ("ppo", "grpo"):
            assert {f"{env}-{algo}-topp09", f"{env}-{algo}-nofilter"} <= names, (env, algo)
    assert "sokoban-grpo-topp09-0.5b-1gpu" in names
    for env in ("sokoban", "frozenlake"):  # Table 4's vision rows: Qwen2.5-VL-3B-Instruct, PPO
        assert {f"{env}-vl-ppo-topp09", f"{env}-vl-ppo-nofilter"} <= names, env
    for setting in (p for p in SETTINGS if "-vl-" in p.name):  # the model and the image-rendered data they name
        text = setting.read_text()
        assert "model: {path: Qwen/Qwen2.5-VL-3B-Instruct}" in text and '"render": "image", "cell_size": 28' in text
        assert "diagnostics: {enabled: false}" in text  # the veRL hook scores rows without their images


@needs_verl
@pytest.mark.parametrize("setting", SETTINGS, ids=[p.stem for p in SETTINGS])
def test_each_setting_passes_verls_validate_config(setting, model_dir):
    from mirl.integrations.verl.launch import check, compose
    from mirl.integrations.verl.settings import read_settings

    config = check(compose(setting, [f"actor_rollout_ref.model.path={model_dir}"]))
    settings = read_settings(config)
    assert settings.rollout.group_size == config.actor_rollout_ref.rollout.n == 16
    assert settings.rollout.prompts_per_iteration == config.data.train_batch_size == 8
    assert (config.algorithm.adv_estimator == "gae") == ("-ppo-" in setting.name)
    assert settings.filter.strategy == ("none" if "nofilter" in setting.name else "top_p")
    assert config.trainer.n_gpus_per_node == (1 if "1gpu" in setting.name else 8)


@needs_verl
def test_dry_run_prints_the_resolved_config(model_dir, capsys):
    setting = str(ROOT / "configs/verl/sokoban-grpo-topp09.yaml")
    assert main(["verl-config", setting, f"actor_rollout_ref.model.path={model_dir}", "trainer.nnodes=2"]) == 0
    out = capsys.readouterr().out
    assert "default_agent_loop: mirl" in out and "trainer_mode: mirl" in out and "nnodes: 2" in out
    assert "name: SNRFilterSampler" in out and "${" not in out  # resolved: the sampler got the filter block


@needs_verl
@pytest.mark.parametrize(
    "overrides, message",
    [
        (["mirl.filter.strategy=bogus"], "filter.strategy"),
        (["+mirl.rollout.group_size=4"], "actor_rollout_ref.rollout.n"),
        (["actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"], "must be 'mirl'"),
        (["algorithm.filter_groups.enable=true"], "keep one of them"),
        (["no_such_key=1"], "no_such_key"),
    ],
)
def test_bad_settings_are_one_line_user_errors(model_dir, capsys, overrides, message):
    setting = str(ROOT / "configs/verl/sokoban-grpo-topp09.yaml")
    assert main(["verl-config", setting, f"actor_rollout_ref.model.path={model_dir}", *overrides, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl verl-config: ") and message in err and err.count("\n") == 1, err


@needs_verl
def test_the_local_model_directory_is_read(model_dir, tmp_path, capsys):
    setting = str(ROOT / "configs/verl/sokoban-grpo-topp09.yaml")
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    for path, message in [
        (tmp_path / "missing", "does not exist"),
        (tmp_path / "empty", "has no config.json"),
        (tmp_path / "broken", "does not read as JSON"),
    ]:
        assert main(["verl-config", setting, f"actor_rollout_ref.model.path={path}", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("mirl verl-config: actor_rollout_ref.model.path=") and message in err, err
        assert err.count("\n") == 1
    assert main(["verl-config", setting, f"actor_rollout_ref.model.path={model_dir}", "--quiet"]) == 0
    assert capsys.readouterr().err == ""  # a local model, one node: nothing left unchecked


@needs_verl
def test_what_cannot_be_checked_here_is_a_note(capsys):
    setting = str(ROOT / "configs/verl/sokoban-grpo-topp09.yaml")  # Qwen/Qwen2.5-3B-Instruct, relative data paths
    assert main(["verl-config", setting, "trainer.nnodes=2", "--quiet"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mirl verl-config: note: ")]
    assert len(notes) == 3, notes
    assert "Qwen/Qwen2.5-3B-Instruct is not a local directory: a hub id, not checked offline" in notes[0]
    assert "data.train_files=['data/verl/sokoban/train.parquet'] is relative" in notes[1]
    assert "data.val_files" in notes[2] and "trainer.nnodes=2" in notes[2]


@needs_verl
@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.v1.sampler.sampler_kwargs.filter={strategy:top_p,value:0.5}", "differs from mirl.filter"),
        ("trainer.v1.sampler.sampler_kwargs.max_empty_steps=2", "differs from mirl.filter"),
        ("~trainer.v1.sampler.sampler_kwargs.filter", "sampler_kwargs has no filter"),
    ],
)
def test_the_sampler_must_filter_as_mirl_filter_says(model_dir, capsys, override, message):
    setting = str(ROOT / "configs/verl/sokoban-grpo-topp09.yaml")
    assert main(["verl-config", setting, f"actor_rollout_ref.model.path={model_dir}", override, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl verl-config: trainer.v1.sampler.sampler_kwargs") and message in err, err


def run_python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


@needs_verl
def test_import_verl_registers_mirl_when_verl_loads_its_registries():
    """Only ``import verl`` (the entry point): mirl's agent loop and trainer are imported when veRL's registries are."""
    code = (
        "import sys, verl\n"
        "print(sorted(m for m in sys.modules if m.startswith('mirl.integrations.verl.')))\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "print(_agent_loop_registry['mirl']['_target_'], get_trainer_cls('mirl').__name__)\n"
        "print(type(sys.modules['verl.trainer.ppo.v1'].__loader__).__name__)\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-2000:]
    lazy, registered, loader = done.stdout.strip().splitlines()[-3:]
    assert lazy == "['mirl.integrations.verl.plugin']"
    assert registered.split() == ["mirl.integrations.verl.agent_loop.MirlAgentLoop", "MirlTrainer"]
    assert loader == "SourceFileLoader"  # veRL's module keeps its own loader


@needs_verl
def test_a_plugin_that_cannot_import_is_a_visible_warning_naming_the_cause():
    code = (
        "import sys\n"
        "sys.modules['mirl.integrations.verl.episode'] = None  # as if a dependency of the agent loop were broken\n"
        "import verl\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "print('mirl' in _agent_loop_registry)\n"
    )
    done = run_python(code)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "False", done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if "mirl's veRL plugin" in line]
    assert "RuntimeWarning" in line and "could not import mirl.integrations.verl.agent_loop" in line
    assert "mirl.integrations.verl.episode" in line and 'pip install -e ".[verl]"' in line


@needs_verl
def test_the_sampler_names_load_through_verls_loader():
    from verl.utils.import_utils import load_extern_type

    from mirl.integrations.verl.plugin import SAMPLER
    from mirl.integrations.verl.sampler import SNRFilterSampler

    assert load_extern_type(SAMPLER["path"], SAMPLER["name"]) is SNRFilterSampler


@pytest.mark.skipif(HAS_VERL, reason="checks the install hint where veRL is absent")
def test_without_verl_the_dry_run_names_the_extra(capsys):
    assert main(["verl-config", str(SETTINGS[0]), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl verl-config: veRL is not installed") and "mirl[verl]" in err
