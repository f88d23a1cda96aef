"""mirl's settings inside a veRL config: the ``mirl:`` block, read into mirl's own typed config and checked.

A veRL config for mirl (``configs/verl/*.yaml``) carries one extra top-level block::

    mirl:
      rollout: {max_turns: 5, max_actions_per_turn: 2, format_penalty: -0.1, max_new_tokens: 400}
      filter: {strategy: top_p, value: 0.9, mode: linear, include_zero: false}
      diagnostics: {enabled: true, every: 5, num_pairs: 64}
      run_dir: null          # metrics.jsonl goes here; null = <trainer.default_local_dir>/mirl
      max_empty_steps: 5     # consecutive empty selections before training stops

``rollout``, ``filter`` and ``diagnostics`` are exactly the native trainer's blocks (``mirl.config``: same keys,
defaults, types and invariants, checked by ``mirl.config_checks.validate``). Four rollout values belong to veRL
and are copied from it, never set here: ``group_size`` = ``actor_rollout_ref.rollout.n``,
``prompts_per_iteration`` = ``data.train_batch_size``, ``temperature`` and ``top_p`` =
``actor_rollout_ref.rollout.{temperature,top_p}`` (veRL's actor tempers every training log-prob with that
temperature, so the sampler and the update agree). Setting one of them in the block is an error that names the
veRL key to set instead.

The filter can also be set with the keys of the upstream proposal (veRL PR #7894), as a run that used that PR
writes them::

    algorithm:
      reward_variance_filtering: {enable: true, strategy: top_p, top_p: 0.9, top_k: 1, include_zero: false,
                                  variance_ddof: 1, selection_eps: 0.01}

(``enabled`` is SkyRL's spelling of ``enable``). ``configs/verl/_base.yaml`` declares every key as null (= not
given), so they are overridden without Hydra's ``+``. :func:`filter_block` maps them onto ``mirl.filter``
(:mod:`mirl.filtering.upstream`); a key given both ways with different values is an error naming both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mirl.config import Config, ConfigError, DiagnosticsConfig, FilterConfig, RolloutConfig

SECTIONS = ("rollout", "filter", "diagnostics")
UPSTREAM = "algorithm.reward_variance_filtering"
SAMPLER_KWARGS = (
    "{filter: ${mirl.filter}, reward_variance_filtering: ${algorithm.reward_variance_filtering}, "
    "max_empty_steps: ${mirl.max_empty_steps}} (configs/verl/_base.yaml)"
)
UPSTREAM_KEYS = ("enable", "enabled", "strategy", "top_p", "top_k", "include_zero", "variance_ddof", "selection_eps")
OWN_KEYS = ("run_dir", "max_empty_steps")
FROM_VERL = {
    "group_size": "actor_rollout_ref.rollout.n",
    "prompts_per_iteration": "data.train_batch_size",
    "temperature": "actor_rollout_ref.rollout.temperature",
    "top_p": "actor_rollout_ref.rollout.top_p",
}


@dataclass(frozen=True)
class MirlSettings:
    """What the agent loop, the sampler and the trainer hooks read from a veRL config."""

    config: Config  # a full mirl config: the veRL-owned rollout values filled in, the other blocks as given
    run_dir: str  # where metrics.jsonl is written
    max_empty_steps: int  # consecutive empty selections before the sampler stops training

    @property
    def rollout(self) -> RolloutConfig:
        return self.config.rollout

    @property
    def filter(self) -> FilterConfig:
        return self.config.filter

    @property
    def diagnostics(self) -> DiagnosticsConfig:
        return self.config.diagnostics


def _select(config, key: str) -> Any:
    value = OmegaConf.select(config, key, default=None)
    if value is None:
        raise ConfigError(f"the veRL config has no {key!r}; compose it from veRL's ppo_trainer config")
    return value


def _block(config: DictConfig) -> dict:
    raw = config.get("mirl")
    block = OmegaConf.to_container(raw, resolve=True) if raw is not None else {}
    if not isinstance(block, dict):
        raise ConfigError(f"the veRL config's mirl entry must be a mapping, got {block!r}")
    unknown = sorted(set(block) - set(SECTIONS) - set(OWN_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {unknown} in the veRL config's mirl block; expected {', '.join(SECTIONS + OWN_KEYS)}"
        )
    for key in FROM_VERL:
        if key in (block.get("rollout") or {}):
            raise ConfigError(
                f"mirl.rollout.{key} is taken from veRL inside veRL; remove it and set {FROM_VERL[key]} instead"
            )
    return block


def filter_block(mirl_filter: object, upstream: object, where: str, unnamed: str | None = None) -> dict:
    """The ``filter`` block to use: ``mirl_filter`` (the mirl way) merged with the upstream ``upstream`` block.

    ``where`` names the upstream block in messages (``algorithm.reward_variance_filtering``). A ``ConfigError`` (one
    line, naming the keys) for an unknown or bad upstream key, for ``enable`` and ``enabled`` that disagree, for a
    filter key given both ways with different values, or, with ``unnamed`` (the message), when neither way names
    the strategy.
    """
    from mirl.filtering.upstream import KeyConflict, read_upstream

    mirl_given = dict(mirl_filter or {})  # type: ignore[call-overload]
    block = dict(upstream or {})  # type: ignore[call-overload]
    unknown = sorted(set(block) - set(UPSTREAM_KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in {where}; expected {', '.join(UPSTREAM_KEYS)}")
    enable, enabled = block.pop("enable", None), block.pop("enabled", None)
    if enable is not None and enabled is not None and enable != enabled:
        raise ConfigError(
            f"{where}.enable={_lower(enable)} and {where}.enabled={_lower(enabled)} disagree; set one of them"
        )
    names = {key: f"{where}.{key}" for key in UPSTREAM_KEYS}
    names["enable"] = names["enabled" if enable is None and enabled is not None else "enable"]
    upstream_values = block | {"enable": enable if enable is not None else enabled}
    try:
        merged = read_upstream(upstream_values, mirl_given, names=names, mirl_prefix="mirl.filter.")
    except KeyConflict as err:  # Hydra deletes a key of a setting file with ~KEY
        raise ConfigError(f"{err} (on the command line: ~mirl.filter.{err.key})") from None
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if "strategy" not in merged and unnamed:  # a filter nobody chose would change the training signal silently
        raise ConfigError(unnamed)
    return merged


def _lower(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _container(config, key: str) -> object:
    value = OmegaConf.select(config, key, default=None)
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value


def read_settings(config, require_filter: bool = False) -> MirlSettings:
    """The checked :class:`MirlSettings` of a composed veRL config (a ``DictConfig`` or a plain dict).

    ``require_filter``: a config that names no filter strategy (neither ``mirl.filter.strategy`` nor
    ``algorithm.reward_variance_filtering.enable``) is an error; without it (the agent loop and the trainer hook,
    which do not filter) the filter block takes mirl's defaults.
    """
    if not isinstance(config, DictConfig):
        config = OmegaConf.create(config)
    block = _block(config)
    rollout = dict(block.get("rollout") or {})
    rollout |= {key: _select(config, verl_key) for key, verl_key in FROM_VERL.items()}
    merged = OmegaConf.structured(Config)
    try:
        overrides = {"rollout": rollout} | {name: block[name] for name in ("diagnostics",) if name in block}
        unnamed = (
            f"the veRL config names no filter; set mirl.filter.strategy (none: no filter) or {UPSTREAM}.enable=true"
        )
        overrides["filter"] = filter_block(
            block.get("filter"), _container(config, UPSTREAM), UPSTREAM, unnamed if require_filter else None
        )
        merged = OmegaConf.merge(merged, overrides)
    except OmegaConfBaseException as err:
        raise ConfigError(f"mirl block of the veRL config: {err.msg if hasattr(err, 'msg') else err}") from None
    mirl_config: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    from mirl.config_checks import validate

    validate(mirl_config)
    if mirl_config.rollout.context_mode != "full":
        raise ConfigError(
            f"mirl.rollout.context_mode must be 'full' inside veRL (one sequence per episode), got "
            f"{mirl_config.rollout.context_mode!r}; set mirl.rollout.context_mode=full"
        )
    max_empty = block.get("max_empty_steps", 5)
    if isinstance(max_empty, bool) or not isinstance(max_empty, int) or max_empty < 1:
        raise ConfigError(f"mirl.max_empty_steps must be an int >= 1, got {max_empty!r}; e.g. 5")
    run_dir = block.get("run_dir") or f"{OmegaConf.select(config, 'trainer.default_local_dir', default='.')}/mirl"
    return MirlSettings(mirl_config, str(run_dir), max_empty)


def filter_settings(sampler_kwargs) -> tuple[Config, int]:
    """The sampler's view: a mirl config holding the ``filter`` block, and ``max_empty_steps``.

    veRL hands a custom sampler only ``trainer.v1.sampler.sampler_kwargs``; the shipped configs set it to
    ``{filter: ${mirl.filter}, reward_variance_filtering: ${algorithm.reward_variance_filtering},
    max_empty_steps: ${mirl.max_empty_steps}}`` so the sampler reads the same blocks and merges them as
    :func:`read_settings` does. A missing ``filter`` is an error (never a silent default); ``mirl verl-config``
    checks that the result equals the driver's filter.
    """
    kwargs = OmegaConf.to_container(sampler_kwargs, resolve=True) if isinstance(sampler_kwargs, DictConfig) else {}
    if not isinstance(sampler_kwargs, DictConfig):
        kwargs = dict(sampler_kwargs or {})
    unknown = sorted(set(kwargs) - {"filter", "reward_variance_filtering", "max_empty_steps"})
    if unknown:
        raise ConfigError(
            f"unknown key(s) {unknown} in trainer.v1.sampler.sampler_kwargs; expected filter, "
            "reward_variance_filtering, max_empty_steps"
        )
    if "filter" not in kwargs:
        raise ConfigError(
            f"trainer.v1.sampler.sampler_kwargs has no filter, and the sampler would filter with the default; set "
            f"sampler_kwargs: {SAMPLER_KWARGS}"
        )
    unnamed = (
        "trainer.v1.sampler.sampler_kwargs names no filter strategy, so the sampler differs from mirl.filter and "
        f"{UPSTREAM}; set sampler_kwargs: {SAMPLER_KWARGS}"
    )
    block = filter_block(kwargs.get("filter"), kwargs.get("reward_variance_filtering"), UPSTREAM, unnamed)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), {"filter": block})
    except OmegaConfBaseException as err:
        message = err.msg if hasattr(err, "msg") else err
        raise ConfigError(f"trainer.v1.sampler.sampler_kwargs.filter: {message}") from None
    config: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    from mirl.config_checks import validate

    validate(config)
    max_empty = kwargs.get("max_empty_steps", 5)
    if isinstance(max_empty, bool) or not isinstance(max_empty, int) or max_empty < 1:
        raise ConfigError(f"sampler_kwargs.max_empty_steps must be an int >= 1, got {max_empty!r}; e.g. 5")
    return config, max_empty
