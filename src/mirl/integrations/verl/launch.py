"""Compose and check a ``configs/verl`` setting with veRL's own config machinery, without a GPU.

:func:`compose` does what ``python -m verl.trainer.main_ppo --config-path=DIR --config-name=NAME KEY=VALUE ...``
does before training: Hydra composes veRL's ``ppo_trainer`` with the setting (its ``hydra.searchpath`` names
``pkg://verl.trainer.config``) and the overrides. :func:`check` then runs veRL's ``validate_config`` (batch
sizes, micro-batches, GPU counts as numbers), resolves the config, reads the ``mirl`` block with the native
checks (:func:`~mirl.integrations.verl.settings.read_settings`) and the sampler's view of it, and confirms that
the plugin's names are registered. ``mirl verl-config FILE`` prints the resolved result (the dry run).

veRL's check reads the model's ``config.json`` (``HFModelConfig``), so the model path must be a local directory
or a hub id that is cached or downloadable; offline, override ``actor_rollout_ref.model.path=DIR``.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mirl.config import ConfigError

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
    settings = read_settings(config)
    filter_settings(config.trainer.v1.sampler.sampler_kwargs)
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
