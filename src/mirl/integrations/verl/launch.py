"""Compose and check a ``configs/verl`` setting with veRL's own config machinery, without a GPU.

:func:`compose` does what ``python -m verl.trainer.main_ppo --config-path=DIR --config-name=NAME KEY=VALUE ...``
does before training: Hydra composes veRL's ``ppo_trainer`` with the setting (its ``hydra.searchpath`` names
``pkg://verl.trainer.config``) and the overrides. :func:`check` then runs veRL's ``validate_config`` (batch sizes,
micro-batches, GPU counts as numbers), resolves the config, reads the ``mirl`` block with the native checks
(:func:`~mirl.integrations.verl.settings.read_settings`), checks that the sampler's ``sampler_kwargs`` hold the same
filter as the driver (``mirl.filter`` with ``algorithm.reward_variance_filtering``), reads the model's
``config.json`` where the model path is a local directory, and confirms that the plugin's names are registered.
``mirl verl-config FILE`` prints the resolved result (the dry run) and :func:`notes`: a model path that is a hub id
(not checked offline) and, for several nodes, data paths relative to the launch directory (Ray may start veRL's
TaskRunner on another node).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mirl.config import ConfigError

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # organisation/name
MAX_MODEL_CONFIG_BYTES = 1 << 20

INSTALL_HINT = 'veRL is not installed; pip install "mirl[verl]" (veRL 0.9.1) or run `bash scripts/test-verl.sh --build`'


def _require_verl():
    try:
        import verl  # noqa: F401  (importing it loads mirl's plugin through the verl.plugins entry point)
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None


def compose(path: str | Path, overrides: list[str] | None = None) -> DictConfig:
    """The composed (unresolved) veRL config of a setting file plus ``key=value`` overrides."""
    _require_verl()
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    file = Path(path).resolve()
    if not file.is_file() or file.suffix != ".yaml":
        raise ConfigError(f"{path} is not a YAML file; pass a setting such as configs/verl/sokoban-grpo-topp09.yaml")
    try:
        with initialize_config_dir(config_dir=str(file.parent), version_base=None):
            return hydra_compose(config_name=file.stem, overrides=list(overrides or []))
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(f"{path}: {_one_line(err)}") from None


def _one_line(error: BaseException) -> str:
    """An exception's message on one line (Hydra's and veRL's span several)."""
    return " ".join(str(error).split())


def check(config: DictConfig) -> DictConfig:
    """veRL's ``validate_config`` and mirl's checks on a composed config; returns it resolved."""
    _require_verl()
    from hydra.errors import InstantiationException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from mirl.integrations.verl.plugin import NAMES, SAMPLER
    from mirl.integrations.verl.settings import filter_settings, read_settings

    OmegaConf.resolve(config)
    try:
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    except (AssertionError, ValueError, InstantiationException) as err:
        raise ConfigError(
            f"veRL's validate_config: {_one_line(err)}; the model path must be a local directory or a hub id in "
            "the cache (override actor_rollout_ref.model.path=DIR)"
        ) from None
    settings = read_settings(config, require_filter=True)
    _check_sampler_filter(settings, filter_settings(config.trainer.v1.sampler.sampler_kwargs))
    _model_notes(config)
    expected = {
        "actor_rollout_ref.rollout.agent.default_agent_loop": NAMES["agent_loop"],
        "trainer.v1.trainer_mode": NAMES["trainer"],
        "trainer.v1.sampler.custom_sampler.path": SAMPLER["path"],
        "trainer.v1.sampler.custom_sampler.name": SAMPLER["name"],
    }
    for key, value in expected.items():
        if OmegaConf.select(config, key) != value:
            raise ConfigError(f"{key} must be {value!r} for mirl inside veRL, got {OmegaConf.select(config, key)!r}")
    _check_registered()
    if settings.filter.strategy != "none" and config.algorithm.get("filter_groups", {}).get("enable", False):
        raise ConfigError("algorithm.filter_groups.enable and mirl.filter both select groups; keep one of them")
    return config


def _check_registered() -> None:
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    from mirl.integrations.verl.plugin import NAMES

    if NAMES["agent_loop"] not in _agent_loop_registry or NAMES["trainer"] not in TRAINER_REGISTRY:
        raise ConfigError(
            "mirl's veRL plugin is not registered; reinstall mirl (pip install -e .) so the verl.plugins entry point "
            "exists, and leave VERL_USE_EXTERNAL_PLUGINS unset or naming mirl"
        )


def _check_sampler_filter(settings, sampler) -> None:
    """The sampler gets only ``sampler_kwargs``: its filter must be the driver's (``mirl.filter`` merged with
    ``algorithm.reward_variance_filtering``), and the same stop rule."""
    sampler_config, max_empty_steps = sampler
    if sampler_config.filter != settings.filter or max_empty_steps != settings.max_empty_steps:
        raise ConfigError(
            f"trainer.v1.sampler.sampler_kwargs (filter {asdict(sampler_config.filter)}, max_empty_steps "
            f"{max_empty_steps}) differs from mirl.filter and algorithm.reward_variance_filtering "
            f"{asdict(settings.filter)} / mirl.max_empty_steps {settings.max_empty_steps}, and the sampler uses "
            "sampler_kwargs; set sampler_kwargs to {filter: ${mirl.filter}, reward_variance_filtering: "
            "${algorithm.reward_variance_filtering}, max_empty_steps: ${mirl.max_empty_steps}} as "
            "configs/verl/_base.yaml does"
        )


def _model_config(key: str, path: str) -> None:
    file = Path(path).expanduser() / "config.json"
    if not file.is_file():
        raise ConfigError(f"{key}={path} has no config.json; point it at a model directory (config.json, tokenizer)")
    if file.stat().st_size > MAX_MODEL_CONFIG_BYTES:
        raise ConfigError(f"{key}={path}: config.json is over {MAX_MODEL_CONFIG_BYTES} bytes; not a model config")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"{key}={path}: config.json does not read as JSON ({_one_line(err)})") from None
    if not isinstance(data, dict) or not ("model_type" in data or "architectures" in data):
        raise ConfigError(f"{key}={path}: config.json has no model_type; not a transformers model directory")


def _model_notes(config: DictConfig) -> list[str]:
    """Check each local model directory's ``config.json``; a note for each hub id (not checked offline)."""
    from verl.trainer.ppo.utils import need_critic

    keys = ["actor_rollout_ref.model.path"] + (["critic.model.path"] if need_critic(config) else [])
    out = []
    for key in keys:
        path = str(OmegaConf.select(config, key))
        if Path(path).expanduser().exists():
            _model_config(key, path)
        elif not path.startswith((".", "/", "~")) and HUB_ID.fullmatch(path):
            out.append(
                f"{key}={path} is not a local directory: a hub id, not checked offline (veRL downloads it "
                "or reads the cache when it starts)"
            )
        else:
            raise ConfigError(
                f"{key}={path} does not exist; point it at a local model directory (config.json, "
                "tokenizer) or a hub id such as Qwen/Qwen2.5-3B-Instruct"
            )
    return out


def _data_notes(config: DictConfig) -> list[str]:
    if int(config.trainer.nnodes) <= 1:
        return []
    out = []
    for key in ("data.train_files", "data.val_files"):
        value = OmegaConf.select(config, key)
        files = [value] if isinstance(value, str) else list(value or [])
        relative = [f for f in files if "://" not in str(f) and not Path(str(f)).expanduser().is_absolute()]
        if relative:
            out.append(
                f"{key}={relative} is relative to the launch directory; with trainer.nnodes="
                f"{config.trainer.nnodes} Ray may start veRL's TaskRunner on another node, where it does not "
                "resolve: pass an absolute path on a filesystem every node mounts"
            )
    return out


def notes(config: DictConfig) -> list[str]:
    """What :func:`check` could not confirm on this machine: hub-id model paths and, for several nodes, relative
    data paths. ``config`` is a config :func:`check` passed."""
    return _model_notes(config) + _data_notes(config)
