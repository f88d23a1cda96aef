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
def test_import_verl_registers_mirl_in_a_fresh_process():
    """Only ``import verl``: the verl.plugins entry point must bring in the agent loop and the trainer."""
    code = (
        "import sys, verl\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY\n"
        "print(_agent_loop_registry['mirl']['_target_'], TRAINER_REGISTRY['mirl'].__name__,\n"
        "      'mirl.integrations.verl.sampler' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["mirl.integrations.verl.agent_loop.MirlAgentLoop", "MirlTrainer", "True"]


@pytest.mark.skipif(HAS_VERL, reason="checks the install hint where veRL is absent")
def test_without_verl_the_dry_run_names_the_extra(capsys):
    assert main(["verl-config", str(SETTINGS[0]), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl verl-config: veRL is not installed") and 'mirl[verl]' in err
