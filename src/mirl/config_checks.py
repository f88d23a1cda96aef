"""Invariants of the config that types cannot express (``mirl.config_files.load_config`` calls :func:`validate`).

Every field has a check: a choice (:data:`CHOICES`), a numeric range (:data:`RANGES`, NaN and inf always
refused) or one of the structural checks below (environments and their options, run name, device, scopes).
A failure raises :class:`~mirl.config.ConfigError` naming the key, the allowed values, the value received and
the default to fall back on.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any

from mirl.config import Config, ConfigError

INF = math.inf

CHOICES: dict[str, tuple[str, ...]] = {
    "algorithm.preset": ("ppo", "dapo", "grpo", "dr_grpo"),
    "algorithm.kl_kind": ("k1", "k2", "k3"),
    "algorithm.loss_scaling": ("none", "linear", "sqrt"),
    "algorithm.credit": ("episode", "turn", "step_groups", "bilevel_gae"),
    "filter.signal": ("episode", "turn"),
    "filter.strategy": ("top_p", "top_k", "top_k_abs", "min_p", "band", "none"),
    "filter.mode": ("linear", "softmax"),
    "filter.statistic": ("std", "var", "mean", "sum"),
    "rollout.context_mode": ("full", "window", "memory"),
    "model.backend": ("hf", "vllm"),
    "model.modality": ("auto", "text", "vision"),
    "model.dtype": ("auto", "float32", "bfloat16", "float16"),
    "model.sampler_dtype": ("same", "float32", "bfloat16", "float16"),
    "algorithm.rollout_correction": ("auto", "none", "token_tis", "sequence_mask"),
    "diagnostics.gradient_buckets": ("quantile", "fixed"),
    "diagnostics.columns": ("sampled", "all"),
    "diagnostics.reasoning": ("closed", "open"),
    "logging.save_rollouts": ("all", "sample", "none"),
}
# None is also allowed for these (None = the preset's value)
OPTIONAL_CHOICES: dict[str, tuple[str, ...]] = {
    "algorithm.agg": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
}


@dataclass(frozen=True)
class Range:
    """Allowed interval of a numeric key: ``lo`` and ``hi`` inclusive unless ``lo_open`` / ``hi_open``."""

    lo: float
    hi: float = INF
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return math.isfinite(value) and above and below

    def __str__(self) -> str:
        """``>= 1``, ``> 0`` or ``in [0, 1)``; whole-number bounds are written out in full.

        >>> str(Range(1)), str(Range(0, lo_open=True)), str(Range(0, 1, hi_open=True)), str(Range(0, 2**31 - 1))
        ('>= 1', '> 0', 'in [0, 1)', 'in [0, 2147483647]')
        """
        lo, hi = _bound(self.lo), _bound(self.hi)
        if self.hi == INF:
            return f"{'>' if self.lo_open else '>='} {lo}"
        return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"


def _bound(value: float) -> str:
    """A bound as written in a message: ``2147483647`` rather than ``2.14748e+09``, ``0.5`` and ``-inf`` as is."""
    return str(int(value)) if math.isfinite(value) and float(value).is_integer() else f"{value:g}"


POSITIVE, NON_NEGATIVE, PROBABILITY = Range(0, lo_open=True), Range(0), Range(0, 1)
AT_LEAST_ONE = Range(1)

# Keys whose value None is allowed (None = "use the preset's / env's value") are checked only when set.
RANGES: dict[str, Range] = {
    "model.lora_rank": NON_NEGATIVE,
    "model.lora_alpha": POSITIVE,
    "model.vllm_gpu_memory_utilization": Range(0, 1, lo_open=True),
    "model.vllm_cpu_kv_cache_gb": AT_LEAST_ONE,
    "rollout.prompts_per_iteration": AT_LEAST_ONE,
    "rollout.group_size": AT_LEAST_ONE,
    "rollout.max_turns": AT_LEAST_ONE,
    "rollout.max_actions_per_turn": AT_LEAST_ONE,
    "rollout.action_budget": AT_LEAST_ONE,
    "rollout.format_penalty": Range(-INF),
    "rollout.max_new_tokens": AT_LEAST_ONE,
    "rollout.temperature": POSITIVE,
    "rollout.top_p": Range(0, 1, lo_open=True),
    "rollout.context_window": AT_LEAST_ONE,
    "rollout.max_context_tokens": AT_LEAST_ONE,
    "rollout.generation_batch_size": AT_LEAST_ONE,
    "rollout.wording_bonus": Range(-INF),
    "rollout.wording_bonus_ramp": Range(0),
    "algorithm.eps_low": Range(0, 1, hi_open=True),  # the ratio's lower clip 1 - eps_low must stay > 0
    "algorithm.eps_high": NON_NEGATIVE,
    "algorithm.dual_clip": Range(1, lo_open=True),
    "algorithm.entropy_coef": NON_NEGATIVE,
    "algorithm.task_coef": NON_NEGATIVE,
    "algorithm.kl_coef": NON_NEGATIVE,
    "algorithm.gamma": PROBABILITY,
    "algorithm.lam": PROBABILITY,
    "algorithm.credit_gamma": PROBABILITY,
    "algorithm.credit_lam": PROBABILITY,
    "algorithm.step_weight": NON_NEGATIVE,
    "algorithm.actor_lr": NON_NEGATIVE,
    "algorithm.critic_lr": NON_NEGATIVE,
    "algorithm.weight_decay": NON_NEGATIVE,
    "algorithm.grad_clip": POSITIVE,
    "algorithm.ppo_epochs": AT_LEAST_ONE,
    "algorithm.mini_batch_size": AT_LEAST_ONE,
    "algorithm.updates_per_iteration": AT_LEAST_ONE,
    "algorithm.micro_batch_size": AT_LEAST_ONE,
    "algorithm.value_clip": POSITIVE,
    "algorithm.dynamic_sampling_max_rounds": NON_NEGATIVE,
    "algorithm.mismatch_every": NON_NEGATIVE,
    "algorithm.rollout_correction_cap": Range(1),
    "filter.eps": NON_NEGATIVE,
    "filter.ddof": Range(0, 1),
    "filter.band_lo": PROBABILITY,
    "filter.band_hi": PROBABILITY,
    "filter.trajectories_per_group": NON_NEGATIVE,
    "filter.success_threshold": Range(-INF),
    "diagnostics.every": NON_NEGATIVE,
    "diagnostics.num_pairs": AT_LEAST_ONE,
    "diagnostics.null_draws": NON_NEGATIVE,
    "diagnostics.std_eps": POSITIVE,
    "diagnostics.ema_decay": Range(0, 1, hi_open=True),
    "diagnostics.max_batch_tokens": AT_LEAST_ONE,
    "diagnostics.gradient_every": NON_NEGATIVE,
    "diagnostics.regime_entropy_threshold": NON_NEGATIVE,
    "diagnostics.regime_retrieval_threshold": PROBABILITY,
    "diagnostics.regime_agnostic_threshold": PROBABILITY,
    "diagnostics.agnostic_power": Range(0, 1, lo_open=True),
    "diagnostics.regime_min_columns": Range(2),
    "diagnostics.regime_min_iterations": AT_LEAST_ONE,
    "validation.every": Range(-1),
    "validation.num_instances": AT_LEAST_ONE,
    "validation.group_size": AT_LEAST_ONE,
    "validation.temperature": POSITIVE,
    "logging.rollout_sample_groups": NON_NEGATIVE,
    "trainer.iterations": AT_LEAST_ONE,
    "trainer.seed": Range(0, 2**31 - 1),  # seed * 1_000_003 + iteration must fit a torch generator's 64-bit seed
    "trainer.checkpoint_every": NON_NEGATIVE,
    "trainer.keep_checkpoints": AT_LEAST_ONE,
    "trainer.early_stop.max_empty_steps": NON_NEGATIVE,
    "trainer.early_stop.spread_baseline_iterations": NON_NEGATIVE,
    "trainer.early_stop.spread_fraction": PROBABILITY,
    "trainer.early_stop.spread_patience": AT_LEAST_ONE,
    "trainer.early_stop.val_success_floor": PROBABILITY,
    "trainer.early_stop.val_patience": NON_NEGATIVE,
}
# filter.value depends on the strategy (mirl.filtering.select_groups)
FILTER_VALUE: dict[str, Range] = {
    "top_p": Range(0, 1, lo_open=True),
    "top_k": Range(0, 1, lo_open=True),
    "top_k_abs": AT_LEAST_ONE,
    "min_p": PROBABILITY,
    "band": Range(-INF),
    "none": Range(-INF),
}
SCOPES = ("first_turn", "trajectory", "turn_position")
# a run name is one path component: letters, digits and _ . + = , @ - ; no leading dot, no separators
_RUN_NAME = re.compile(r"[A-Za-z0-9_][\w.+=,@-]{0,127}")
_DEVICE = re.compile(r"auto|cpu|mps|(cuda|xpu)(:\d+)?")


def _get(config: Any, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _default(key: str) -> Any:
    return _get(Config(), key)


def check_choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{key} must be one of {', '.join(choices)}, got {value!r}{hint}")


def check_range(key: str, value: Any, allowed: Range, default: Any = None) -> None:
    """Raise unless ``value`` is a finite number in ``allowed`` (bools are not numbers here)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not (number and allowed.holds(value)):
        fix = f"; the default is {key}={default!r}" if default is not None else ""
        raise ConfigError(f"{key} must be a finite number {allowed}, got {value!r}{fix}")


def validate(config: Config) -> None:
    """Check every field (module docstring); raise ConfigError saying the key, the allowed values and the fix."""
    for key, choices in CHOICES.items():
        check_choice(key, _get(config, key), choices)
    for key, choices in OPTIONAL_CHOICES.items():
        if _get(config, key) is not None:
            check_choice(key, _get(config, key), choices)
    for key, allowed in RANGES.items():
        if _get(config, key) is not None:
            check_range(key, _get(config, key), allowed, _default(key))
    check_range("filter.value", config.filter.value, FILTER_VALUE[config.filter.strategy], _default("filter.value"))
    _check_relations(config)
    _check_lists(config)
    _check_names(config)
    check_envs(config)


def _check_relations(config: Config) -> None:
    """Invariants between keys."""
    if config.algorithm.preset in ("grpo", "dr_grpo") and config.rollout.group_size < 2:
        raise ConfigError(
            f"rollout.group_size must be >= 2 for group advantages, got {config.rollout.group_size}; "
            "set rollout.group_size=8 or algorithm.preset=ppo"
        )
    _check_credit(config)
    _check_wording(config)
    if config.model.backend == "vllm" and config.rollout.top_p < 1.0:
        raise ConfigError(
            f"model.backend=vllm needs rollout.top_p=1 (vLLM reports log-probs after top-p truncation), got "
            f"{config.rollout.top_p}; set rollout.top_p=1 or model.backend=hf"
        )
    if config.model.sampler_dtype != "same" and config.model.backend != "hf":
        raise ConfigError(
            f"model.sampler_dtype applies to the hf sampler, got model.sampler_dtype={config.model.sampler_dtype} "
            f"with model.backend={config.model.backend}; set model.sampler_dtype=same (vLLM samples in model.dtype)"
        )
    if config.model.modality == "vision" and config.model.backend != "hf":
        raise ConfigError(
            f"model.modality=vision runs on the hf backend only, got model.backend={config.model.backend}; "
            "set model.backend=hf"
        )
    if not config.filter.band_lo < config.filter.band_hi:
        raise ConfigError(
            f"filter.band_lo/band_hi must satisfy 0 <= lo < hi <= 1, got {config.filter.band_lo}, "
            f"{config.filter.band_hi}"
        )
    if config.filter.trajectories_per_group > config.rollout.group_size:
        raise ConfigError(
            f"filter.trajectories_per_group must be <= rollout.group_size ({config.rollout.group_size}), "
            f"got {config.filter.trajectories_per_group}"
        )


def _check_credit(config: Config) -> None:
    """A turn-level credit needs the estimator it is built on (mirl.algorithms.CREDIT_ESTIMATOR)."""
    from mirl.algorithms import CREDIT_ESTIMATOR, PRESETS

    credit, preset = config.algorithm.credit, config.algorithm.preset
    needed = CREDIT_ESTIMATOR[credit]
    allowed = tuple(name for name, p in PRESETS.items() if needed in (None, p.estimator))
    if preset not in allowed:
        raise ConfigError(
            f"algorithm.credit={credit} works with algorithm.preset {' or '.join(allowed)}, got {preset}; "
            f"set algorithm.preset={allowed[0]} or algorithm.credit=episode"
        )
    if config.filter.signal == "turn" and config.filter.ddof != 1:
        raise ConfigError(
            f"filter.signal=turn ranks the spread of turn advantages with ddof 1, got "
            f"filter.ddof={config.filter.ddof}; set filter.ddof=1 or filter.signal=episode"
        )
    if config.filter.signal == "turn" and config.filter.statistic not in ("std", "var"):
        raise ConfigError(
            f"filter.signal=turn scores groups by the spread of turn advantages (filter.statistic std or var), got "
            f"filter.statistic={config.filter.statistic}; set filter.statistic=std or filter.signal=episode"
        )


def _check_wording(config: Config) -> None:
    """The wording bonus's regex compiles, and a nonzero bonus has one (mirl.rollout.reasoning_measures)."""
    from mirl.rollout.reasoning_measures import check_wording

    try:
        check_wording(config.rollout.wording_regex, config.rollout.wording_bonus)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _check_lists(config: Config) -> None:
    scopes = config.diagnostics.scopes
    for scope in scopes:
        check_choice("diagnostics.scopes entries", scope, SCOPES)
    if len(set(scopes)) != len(scopes):
        raise ConfigError(f"diagnostics.scopes lists a scope twice, got {list(scopes)}; list each once")
    if config.diagnostics.enabled and not scopes:
        raise ConfigError(
            "diagnostics.scopes must list at least one of " + ", ".join(SCOPES) + " while diagnostics.enabled=true; "
            "e.g. diagnostics.scopes=[first_turn,trajectory], or set diagnostics.enabled=false"
        )
    if not config.diagnostics.ks:
        raise ConfigError("diagnostics.ks must list at least one cut-off k >= 1, e.g. diagnostics.ks=[1,2,4,8]")
    for k in config.diagnostics.ks:
        check_range("diagnostics.ks entries", k, AT_LEAST_ONE)
    if config.diagnostics.null_draws == 1:
        raise ConfigError(
            "diagnostics.null_draws must be 0 (off) or >= 2 shuffles for a null distribution, got 1; "
            "set diagnostics.null_draws=200"
        )


def _check_names(config: Config) -> None:
    """The run name is one safe path component; names and paths are non-empty; the device is well formed."""
    name = config.trainer.name
    if name is not None and (not _RUN_NAME.fullmatch(name) or ".." in name):
        raise ConfigError(
            f"trainer.name must be one path component of letters, digits and _ . + = , @ - (at most 128, not "
            f"starting with '.', no '..' or '/'), got {name!r}; e.g. trainer.name=frozenlake-ppo-1"
        )
    for key in ("model.name", "trainer.output_dir", "logging.wandb_project"):
        if not str(_get(config, key)).strip():
            raise ConfigError(f"{key} must be a non-empty string; the default is {_default(key)!r}")
    for key in ("model.cache_dir", "model.critic_name", "model.reference_name"):  # None = not set
        if _get(config, key) is not None and not str(_get(config, key)).strip():
            raise ConfigError(f"{key} must be a non-empty string when set; leave it out to use the default")
    if not _DEVICE.fullmatch(config.model.device):
        raise ConfigError(
            f"model.device must be auto, cpu, mps, cuda, cuda:N, xpu or xpu:N, got {config.model.device!r}"
        )


def check_envs(config: Config) -> None:
    """Every entry names a registered env, has a finite weight > 0, and options the env accepts: names, types and
    bounds (``check_options``), then the env's own range checks by building it, when it reads no external data
    (:func:`builds_locally`), so a bad value fails here rather than after the model has loaded."""
    from mirl.envs.registry import check_options, make

    if not config.envs:
        raise ConfigError("envs must list at least one environment, e.g. envs=[{name: frozenlake}]")
    for i, entry in enumerate(config.envs):
        check_range(f"envs[{i}].weight", entry.weight, POSITIVE, 1.0)
        try:
            check_options(entry.name, entry.options)
            if builds_locally(entry.options):
                make(entry.name, **entry.options)
        except (ValueError, TypeError) as err:
            raise ConfigError(f"envs[{i}] ({entry.name!r}): {err}") from None


def builds_locally(options: dict[str, Any]) -> bool:
    """Whether an env with these options builds from generated data only (no ``source`` other than "synthetic",
    no ``*path`` or ``*url`` option): then building it reads no file and no network, in well under a second."""
    if options.get("source", "synthetic") != "synthetic":
        return False
    return not any(key.endswith(("path", "url")) and value is not None for key, value in options.items())
