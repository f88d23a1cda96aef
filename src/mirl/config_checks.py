"""Invariants of the config that types cannot express (``mirl.config.load_config`` calls :func:`validate`)."""

from __future__ import annotations

import difflib
from typing import Any

from mirl.config import Config, ConfigError

_CHOICES = {
    "algorithm.preset": ("ppo", "dapo", "grpo", "dr_grpo"),
    "algorithm.kl_kind": ("k1", "k2", "k3"),
    "algorithm.loss_scaling": ("none", "linear", "sqrt"),
    "filter.strategy": ("top_p", "top_k", "top_k_abs", "min_p", "band", "none"),
    "filter.mode": ("linear", "softmax"),
    "filter.statistic": ("std", "var", "mean", "sum"),
    "rollout.context_mode": ("full", "window"),
    "model.backend": ("hf", "vllm"),
    "model.dtype": ("auto", "float32", "bfloat16", "float16"),
    "diagnostics.gradient_buckets": ("quantile", "fixed"),
    "diagnostics.columns": ("sampled", "all"),
    "logging.save_rollouts": ("all", "sample", "none"),
}


def _get(config: Config, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def validate(config: Config) -> None:
    """Check the invariants that types cannot express; raise ConfigError saying value and fix."""
    for key, choices in _CHOICES.items():
        value = _get(config, key)
        if value not in choices:
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{key} must be one of {', '.join(choices)}, got {value!r}{hint}")
    for scope in config.diagnostics.scopes:
        if scope not in ("first_turn", "trajectory", "turn_position"):
            raise ConfigError(
                f"diagnostics.scopes entries must be first_turn, trajectory or turn_position, got {scope!r}"
            )
    positive = (
        "rollout.prompts_per_iteration",
        "rollout.group_size",
        "rollout.max_turns",
        "rollout.max_actions_per_turn",
        "rollout.max_new_tokens",
        "algorithm.ppo_epochs",
        "algorithm.mini_batch_size",
        "algorithm.micro_batch_size",
        "trainer.iterations",
        "diagnostics.num_pairs",
    )
    for key in positive:
        if _get(config, key) < 1:
            raise ConfigError(f"{key} must be >= 1, got {_get(config, key)}")
    if config.algorithm.preset in ("grpo", "dr_grpo") and config.rollout.group_size < 2:
        raise ConfigError(
            f"rollout.group_size must be >= 2 for group advantages, got {config.rollout.group_size}; "
            "set rollout.group_size=8 or algorithm.preset=ppo"
        )
    if not config.envs:
        raise ConfigError("envs must list at least one environment, e.g. envs=[{name: frozenlake}]")
    if any(entry.weight <= 0 for entry in config.envs):
        raise ConfigError("every envs[i].weight must be > 0")
    if not config.rollout.temperature > 0.0:
        raise ConfigError(f"rollout.temperature must be > 0, got {config.rollout.temperature}")
    if not 0.0 < config.model.vllm_gpu_memory_utilization <= 1.0:
        raise ConfigError(
            f"model.vllm_gpu_memory_utilization must be in (0, 1], got {config.model.vllm_gpu_memory_utilization}"
        )
    if config.model.vllm_cpu_kv_cache_gb < 1:
        raise ConfigError(f"model.vllm_cpu_kv_cache_gb must be >= 1, got {config.model.vllm_cpu_kv_cache_gb}")
    if config.model.backend == "vllm" and config.rollout.top_p < 1.0:
        raise ConfigError(
            f"model.backend=vllm needs rollout.top_p=1 (vLLM reports log-probs after top-p truncation), got "
            f"{config.rollout.top_p}; set rollout.top_p=1 or model.backend=hf"
        )
    if not 0.0 < config.rollout.top_p <= 1.0:
        raise ConfigError(f"rollout.top_p must be in (0, 1], got {config.rollout.top_p}")
    if not 0.0 <= config.filter.band_lo < config.filter.band_hi <= 1.0:
        raise ConfigError(
            f"filter.band_lo/band_hi must satisfy 0 <= lo < hi <= 1, got {config.filter.band_lo}, "
            f"{config.filter.band_hi}"
        )
    if config.filter.trajectories_per_group > config.rollout.group_size:
        raise ConfigError(
            f"filter.trajectories_per_group must be <= rollout.group_size ({config.rollout.group_size}), "
            f"got {config.filter.trajectories_per_group}"
        )
