"""Config loading: defaults, YAML, overrides, loud errors, the resolved copy in the run directory."""

import glob

import pytest

from mirl.config import Config, ConfigError, save_resolved
from mirl.config_files import load_config


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


# configs/verl/ holds veRL configs (veRL's format plus a mirl block), checked in tests/integrations/verl/test_launch.py;
# configs/sweeps/ holds sweep specs, checked in tests/experiments/test_spec_stats.py
OTHER_FORMATS = ("configs/verl/", "configs/sweeps/")
MIRL_CONFIGS = sorted(p for p in glob.glob("configs/**/*.yaml", recursive=True) if not p.startswith(OTHER_FORMATS))


@pytest.mark.parametrize("path", MIRL_CONFIGS)
def test_every_shipped_config_loads(path):
    load_config(path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.actor_lr=nan", r"algorithm.actor_lr must be a finite number >= 0, got nan"),
        ("algorithm.actor_lr=inf", r"algorithm.actor_lr must be a finite number >= 0, got inf"),
        ("algorithm.critic_lr=-1e-5", r"algorithm.critic_lr must be a finite number >= 0"),
        ("trainer.checkpoint_every=-5", r"trainer.checkpoint_every must be a finite number >= 0, got -5"),
        ("validation.num_instances=0", r"validation.num_instances must be a finite number >= 1, got 0"),
        ("rollout.generation_batch_size=0", r"rollout.generation_batch_size must be .* >= 1"),
        ("rollout.max_context_tokens=0", r"rollout.max_context_tokens must be .* >= 1"),
        ("algorithm.grad_clip=-1", r"algorithm.grad_clip must be a finite number > 0, got -1"),
        ("algorithm.gamma=2", r"algorithm.gamma must be a finite number in \[0, 1\], got 2"),
        ("algorithm.eps_low=5", r"algorithm.eps_low must be a finite number in \[0, 1\), got 5"),
        ("algorithm.dual_clip=1", r"algorithm.dual_clip must be a finite number > 1"),
        ("model.lora_rank=-4", r"model.lora_rank must be a finite number >= 0, got -4"),
        ("envs=[{name: frozenlake, weight: nan}]", r"envs\[0\].weight must be a finite number > 0, got nan"),
        ("envs=[{name: frozenlak}]", r"envs\[0\] \('frozenlak'\): unknown environment 'frozenlak'.*'frozenlake'"),
        ("envs=[{name: frozenlake, options: {size: 100000}}]", r"option size of .*'frozenlake' must be at most 32"),
        ("envs=[{name: frozenlake, options: {sise: 5}}]", r"unknown option 'sise'"),
        ("envs=[{name: bandit, options: {high_reward: .inf}}]", r"option high_reward=inf .* must be finite"),
        ("envs=[]", r"envs must list at least one environment"),
        ("trainer.name=../../x", r"trainer.name must be one path component"),
        ("trainer.name=a/b", r"trainer.name must be one path component"),
        ("trainer.name=.hidden", r"trainer.name must be one path component"),
        ("filter.value=1.5", r"filter.value must be a finite number in \(0, 1\], got 1.5"),
        ("filter.strategy=top_k_abs", r"filter.value must be a finite number >= 1, got 0.9"),
        ("diagnostics.ks=[]", r"diagnostics.ks must list at least one"),
        ("diagnostics.ks=[0]", r"diagnostics.ks entries must be a finite number >= 1"),
        ("diagnostics.scopes=[everything]", r"diagnostics.scopes entries must be one of"),
        ("diagnostics.ema_decay=1", r"diagnostics.ema_decay must be a finite number in \[0, 1\)"),
        ("algorithm.agg=token_mean", r"algorithm.agg must be one of .*did you mean 'token-mean'"),
        ("model.device=gpu", r"model.device must be auto, cpu, mps, cuda, cuda:N"),
        ("model.name=' '", r"model.name must be a non-empty string"),
        ("trainer.early_stop.spread_fraction=2", r"trainer.early_stop.spread_fraction must be .* in \[0, 1\]"),
        ("rollout.top_p=0", r"rollout.top_p must be a finite number in \(0, 1\]"),
        ("validation.every=-2", r"validation.every must be a finite number >= -1"),
        ("trainer.seed=99999999999999999999", r"trainer.seed must be a finite number in \[0, 2147483647\]"),
        ("diagnostics.scopes=[]", r"diagnostics.scopes must list at least one of .* diagnostics.enabled=false"),
        ("diagnostics.scopes=[trajectory,trajectory]", r"diagnostics.scopes lists a scope twice"),
        ("model.critic_name=''", r"model.critic_name must be a non-empty string when set"),
        ("model.reference_name=' '", r"model.reference_name must be a non-empty string when set"),
        ("model.cache_dir=' '", r"model.cache_dir must be a non-empty string when set"),
    ],
)
def test_every_field_is_range_checked(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_range_messages_name_the_default():
    with pytest.raises(ConfigError, match=r"the default is algorithm.grad_clip=1.0"):
        load_config(None, ["algorithm.grad_clip=0"])


def test_every_numeric_field_has_a_check():
    from dataclasses import fields, is_dataclass

    from mirl.config_checks import CHOICES, OPTIONAL_CHOICES, RANGES

    def leaves(obj, prefix=""):
        for f in fields(obj):
            value = getattr(obj, f.name)
            if is_dataclass(value):
                yield from leaves(value, f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}", f.type

    checked = set(RANGES) | set(CHOICES) | set(OPTIONAL_CHOICES) | {"filter.value", "diagnostics.ks"}
    numeric = {key for key, kind in leaves(Config()) if "int" in str(kind) or "float" in str(kind)}
    assert numeric - checked == set()


def test_environment_interpolation_is_refused_everywhere(tmp_path, monkeypatch):
    monkeypatch.setenv("MIRL_TEST_SECRET", "hunter2")
    with pytest.raises(ConfigError, match=r"'trainer.name' in override .* resolvers such as"):
        load_config(None, ["trainer.name=${oc.env:MIRL_TEST_SECRET}"])
    path = tmp_path / "c.yaml"
    path.write_text("envs: [{name: frozenlake, options: {view: '${oc.env:MIRL_TEST_SECRET}'}}]\n")
    with pytest.raises(ConfigError, match=r"'envs\[0\].options.view' in .*c.yaml"):
        load_config(path)
    # a reference to another key is not an environment variable and stays allowed
    assert load_config(None, ["trainer.iterations=${rollout.group_size}"]).trainer.iterations == 16


def test_yaml_files_are_checked_before_parsing(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n")
    with pytest.raises(ConfigError, match="uses YAML aliases"):
        load_config(bomb)
    for text, message in (("", "is empty"), ("- 1\n", "must hold a mapping"), ("a: [1,\n", "is not valid YAML")):
        path = tmp_path / "c.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(path)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_an_override_may_address_a_list_item_by_index():
    """`envs.0.options.size=5` sets one option of the first env (it used to fail with OmegaConf's "Cannot merge
    incompatible container types"); the rest of that entry and later overrides are kept, references still resolve."""
    config = load_config(
        "configs/quickstart.yaml", ["envs.0.options.size=5", "envs.0.weight=2", "trainer.name=${model.name}-x"]
    )
    assert config.envs[0].name == "frozenlake" and config.envs[0].weight == 2.0
    assert dict(config.envs[0].options) == {"success_rate": 1.0, "size": 5}
    assert config.trainer.name == "smollm2-135m-instruct-x"


@pytest.mark.parametrize("override", ["envs.3.options.size=5", "envs.x.name=a"])
def test_a_list_index_that_names_no_item_is_one_line_with_the_form_that_works(override):
    with pytest.raises(ConfigError) as error:
        load_config("configs/quickstart.yaml", [override])
    message = str(error.value)
    assert "\n" not in message and "envs is a list of 1 item(s)" in message
    assert "envs.N.<key> with N from 0 to 0" in message and "envs=[...]" in message


def test_the_cli_takes_a_list_item_override_and_refuses_a_bad_index_in_one_line(capsys):
    from mirl.cli import main

    assert main(["train", "configs/quickstart.yaml", "envs.2.options.size=5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("mirl train:") and "envs.2 names none" in err
