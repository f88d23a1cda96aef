"""Config loading: defaults, YAML, overrides, loud errors, the resolved copy in the run directory."""

import glob

import pytest

from mirl.config import Config, ConfigError, load_config, save_resolved


def test_defaults_are_the_reference_values():
    config = load_config()
    assert isinstance(config, Config)
    assert (config.rollout.prompts_per_iteration, config.rollout.group_size) == (8, 16)
    assert config.algorithm.actor_lr == 1e-6 and config.algorithm.mini_batch_size == 32
    assert config.filter.strategy == "top_p" and config.filter.value == 0.9
    assert config.validation.temperature == 0.5 and config.diagnostics.every == 5


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("rollout: {group_size: 4}\nenvs: [{name: sokoban}]\n")
    config = load_config(path, ["rollout.group_size=8", "filter.mode=softmax"])
    assert config.rollout.group_size == 8  # the override wins over the file
    assert config.filter.mode == "softmax"
    assert [entry.name for entry in config.envs] == ["sokoban"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rollout.grup_size=3", "unknown config key 'rollout.grup_size'.*did you mean 'rollout.group_size'"),
        ("seed=3", "did you mean 'trainer.seed'"),
        ("rollout.group_size=abc", "'rollout.group_size' got 'abc'.*of type int"),
        ("filter.strategy=topp", "filter.strategy must be one of.*got 'topp'.*did you mean 'top_p'"),
        ("rollout.group_size", "is not key=value"),
    ],
)
def test_errors_name_the_key_the_value_and_the_fix(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_group_advantages_need_two_samples():
    with pytest.raises(ConfigError, match="rollout.group_size must be >= 2 for group advantages, got 1"):
        load_config(None, ["algorithm.preset=grpo", "rollout.group_size=1"])


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_save_resolved_round_trips(tmp_path):
    config = load_config(None, ["rollout.group_size=4", "trainer.seed=7"])
    path = save_resolved(config, tmp_path / "run")
    assert load_config(path) == config
    assert not list((tmp_path / "run").glob("*.tmp"))


# configs/verl/ holds veRL configs (veRL's format plus a mirl block), checked in tests/integrations/verl/test_launch.py
MIRL_CONFIGS = sorted(p for p in glob.glob("configs/**/*.yaml", recursive=True) if not p.startswith("configs/verl/"))


@pytest.mark.parametrize("path", MIRL_CONFIGS)
def test_every_shipped_config_loads(path):
    load_config(path)
