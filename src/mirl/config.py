"""Typed configuration: dataclasses loaded as OmegaConf structured configs.

``load_config(path, overrides)`` merges, in order, the defaults below, a YAML file (``configs/*.yaml``) and
``key.sub=value`` overrides, then checks the invariants. Unknown keys and wrong types are errors that name the key,
the value received and the nearest valid key. The resolved config is written to the run directory by
``save_resolved``. Each field's comment is its documentation (``mirl train --help-config`` prints them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from mirl.errors import UserError


class ConfigError(UserError, ValueError):
    """A configuration value or key is wrong; the message says which, what came, and the fix."""


@dataclass
class ModelConfig:
    # hub id, local directory, .gguf file, or a built-in: the offline default "smollm2-135m-instruct" or the
    # model organism "keysum-organism" (docs/organism.md)
    name: str = "smollm2-135m-instruct"
    # "auto" (float32 on CPU, bfloat16 on GPU), "float32", "bfloat16", "float16"
    dtype: str = "auto"
    # "auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:1", ...
    device: str = "auto"
    # dtype of the hf sampler's forward passes: "same" (model.dtype), "float32", "bfloat16", "float16"; another
    # dtype samples on a copy of the weights, as a 16-bit inference engine does (docs/gpu.md, mismatch)
    sampler_dtype: str = "same"
    # where converted GGUF weights are cached; None = $MIRL_CACHE or ~/.cache/mirl
    cache_dir: str | None = None
    # generation backend: "hf" (mirl's sampler over transformers) or "vllm" (optional extra `vllm`; CPU or GPU)
    backend: str = "hf"
    # "auto" (vision when the model's config is an image-text-to-text model), "text" or "vision" (image
    # observations go to the model as images; needs an AutoModelForImageTextToText model and its AutoProcessor)
    modality: str = "auto"
    # LoRA rank for policy and critic; 0 trains all weights
    lora_rank: int = 0
    # LoRA scaling alpha
    lora_alpha: float = 32.0
    # critic backbone for ppo/dapo; None = a copy of the policy backbone
    critic_name: str | None = None
    # the KL term's reference policy: a model of the same vocabulary (e.g. the policy a trained model started from,
    # studies/mechanism); None = a frozen copy of the initial policy
    reference_name: str | None = None
    # recompute each decoder layer's activations in the backward pass: the update's peak memory falls by most of
    # its activations (quickstart: see benchmarks/memory.py) for about one more forward pass of time
    gradient_checkpointing: bool = True
    # the update encodes a prompt that several rows of a micro-batch start with once, in a packed row with a block
    # attention mask (mirl.policy.shared_prompts): the same log-probs and gradients up to float rounding; text
    # models with SDPA or eager attention; quickstart: see benchmarks/step.py --compare shared-prompts
    share_prompts: bool = True
    # vllm backend: share of GPU memory vLLM may take for weights and KV cache, in (0, 1]
    vllm_gpu_memory_utilization: float = 0.4
    # vllm backend: GiB of KV cache on the CPU build (sets VLLM_CPU_KVCACHE_SPACE when unset), >= 1
    vllm_cpu_kv_cache_gb: int = 1
    # vllm backend, GPU only: put the engine to sleep during the update and wake it for the next rollout
    vllm_sleep_mode: bool = False


@dataclass
class EnvEntry:
    # registered environment name (see `mirl envs`)
    name: str = "frozenlake"
    # relative share of the P prompt groups drawn from this env
    weight: float = 1.0
    # keyword arguments passed to mirl.envs.make(name, **options)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RolloutConfig:
    # P: distinct env instances (prompt groups) per iteration
    prompts_per_iteration: int = 8
    # K: rollouts per prompt group; all K share the instance seed
    group_size: int = 16
    # turns at most per episode
    max_turns: int = 5
    # actions a reply may hold, separated by "||"
    max_actions_per_turn: int = 2
    # actions an episode may take in all; None = the env's default
    action_budget: int | None = None
    # reward added for a turn whose reply does not parse or holds an illegal action
    format_penalty: float = -0.1
    # tokens per turn at most
    max_new_tokens: int = 400
    # sampling temperature for training rollouts
    temperature: float = 1.0
    # nucleus sampling mass for training rollouts
    top_p: float = 1.0
    # "full" (whole history, oldest turns dropped when too long), "window" (last context_window turns) or "memory"
    # (the current turn only, with the env's recap of the episode; docs/rollouts.md)
    context_mode: str = "full"
    # turns kept in "window" mode
    context_window: int = 2
    # context + reply tokens at most (capped at the model's positions); oldest turns are dropped to fit
    max_context_tokens: int = 4096
    # append a one-line example reply to each user message (helps ~100M models find the format)
    format_example: bool = False
    # prompts per generate call at most (all active episodes are batched up to this)
    generation_batch_size: int = 128
    # reward added to a turn whose reasoning Z matches wording_regex (a positive control; docs/rollouts.md)
    wording_bonus: float = 0.0
    # Python regex searched (re.search) in each turn's reasoning Z, never its answer; "" = off
    wording_regex: str = ""
    # iterations over which the bonus rises linearly to wording_bonus (iteration i earns i/ramp of it); 0 = full from
    # the first iteration (a graded positive control, studies/mechanism)
    wording_bonus_ramp: int = 0


@dataclass
class AlgorithmConfig:
    # "ppo", "dapo", "grpo" or "dr_grpo" (docs/metrics.md); the fields below left None take the preset's value
    preset: str = "ppo"
    # lower clip range of the importance ratio; None = preset
    eps_low: float | None = None
    # upper clip range (clip-higher); None = preset
    eps_high: float | None = None
    # dual-clip constant c for negative advantages; None = preset
    dual_clip: float | None = None
    # loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm
    agg: str | None = None
    # weight of the task (policy-gradient) term; 0 = regularisers only (the zero-reward-variance limit)
    task_coef: float = 1.0
    # entropy bonus coefficient; None = preset (0.001)
    entropy_coef: float | None = None
    # KL(pi || pi_ref) coefficient; 0 disables the reference model
    kl_coef: float | None = None
    # KL estimator: k1, k2, k3
    kl_kind: str = "k3"
    # GAE discount; None = preset
    gamma: float | None = None
    # GAE lambda; None = preset
    lam: float | None = None
    # credit assignment (docs/credit.md): "episode" (every turn gets its episode's advantage), "turn" (turn
    # returns-to-go normalised in the group; grpo/dr_grpo), "step_groups" (episode advantage + GiGPO step groups
    # over identical env states; grpo/dr_grpo), "bilevel_gae" (turn-level then token-level GAE; ppo/dapo)
    credit: str = "episode"
    # discount per turn of the turn-level returns (turn, step_groups) and of the turn-level GAE (bilevel_gae)
    credit_gamma: float = 1.0
    # turn-level GAE lambda (bilevel_gae)
    credit_lam: float = 1.0
    # weight of the normalised step-group advantage added to the episode advantage (step_groups)
    step_weight: float = 1.0
    # actor learning rate (AdamW)
    actor_lr: float = 1e-6
    # critic learning rate (AdamW)
    critic_lr: float = 1e-5
    # AdamW weight decay
    weight_decay: float = 0.01
    # global gradient-norm clip
    grad_clip: float = 1.0
    # passes over the kept batch per iteration
    ppo_epochs: int = 1
    # trajectories per optimiser step (reference semantics: filtering reduces the number of steps)
    mini_batch_size: int = 32
    # if set, a fixed number of optimiser steps per epoch; mini_batch_size is then derived from the kept rows
    updates_per_iteration: int | None = None
    # rows per forward/backward pass; gradients are accumulated with one global normaliser
    micro_batch_size: int = 4
    # scale the loss when filtering shrinks the batch: "none", "linear" (x kept ratio), "sqrt"
    loss_scaling: str = "none"
    # value-function clip range
    value_clip: float = 0.5
    # DAPO dynamic sampling: drop zero-spread groups and refill with fresh prompts
    dynamic_sampling: bool = False
    # refill rounds at most per iteration for dynamic sampling
    dynamic_sampling_max_rounds: int = 3
    # recompute old log-probs with a forward pass instead of using the sampled ones
    recompute_old_logprobs: bool = False
    # measure the sampler/trainer log-prob mismatch (rollout/logp_diff_*, ...) at iteration 1 and every n, from the
    # update's first step (no pass of its own); 0 = only when a rollout correction's pass measures it anyway
    mismatch_every: int = 1
    # correction for that mismatch (docs/gpu.md): "auto" (token_tis when the sampler runs in 16 bits or on vLLM,
    # else none), "none", "token_tis" (truncated token-level IS), "sequence_mask" (sequence IS, masked beyond C)
    rollout_correction: str = "auto"
    # C: token_tis truncates token weights at C; sequence_mask drops sequences whose ratio leaves [1/C, C]
    rollout_correction_cap: float = 2.0


@dataclass
class FilterConfig:
    # "top_p", "top_k", "top_k_abs", "min_p", "band", "none" (docs/metrics.md, filter)
    strategy: str = "top_p"
    # p for top_p / min_p, fraction for top_k, count for top_k_abs
    value: float = 0.9
    # "linear" (recommended) or "softmax" (the paper's main table)
    mode: str = "linear"
    # per-group score: "std" (reference), "var", "mean", "sum"
    statistic: str = "std"
    # delta degrees of freedom of std and var: 1 (sample variance; RAGEN's torch.std and the upstream proposals'
    # variance_ddof default) or 0 (population; VAGEN's np.var); scales every spread, so it moves eps and the
    # logged spreads, not a ranking of equal-size groups
    ddof: int = 1
    # what the score measures: "episode" (episode returns, the paper) or "turn" (the turn-level advantages of
    # algorithm.credit, the turn estimator's for episode / bilevel_gae credit: tied episodes can still carry
    # step-level signal); "turn" needs statistic std or var
    signal: str = "episode"
    # keep the groups without spread in the ranking (reference default true; recommended false); a group has no
    # spread when its returns are all equal up to float rounding (mirl.filtering.has_spread)
    include_zero: bool = False
    # rank largest scores first; false inverts every ranking
    largest: bool = True
    # slack subtracted from the top-p mass target
    eps: float = 0.01
    # lower end of the rank range [lo, hi) kept by strategy "band", as a fraction of the sorted groups
    band_lo: float = 0.0
    # upper end of that rank range (e.g. band_lo=0.75 band_hi=1.0 keeps the lowest-spread quartile)
    band_hi: float = 1.0
    # trajectory-level control: keep this many trajectories per group (top and bottom halves); 0 = off
    trajectories_per_group: int = 0
    # a return at or above this counts as success when labelling groups too easy / too hard
    success_threshold: float = 1.0


@dataclass
class DiagnosticsConfig:
    # compute MI proxies during training
    enabled: bool = True
    # schedule: iteration 1 and every `every` iterations, on the batch before filtering
    every: int = 5
    # scopes: "first_turn", "trajectory", "turn_position"
    scopes: list[str] = field(default_factory=lambda: ["first_turn", "trajectory"])
    # what counts as the reasoning Z: "closed" (between <think> and </think>) or "open" (also an unclosed
    # <think>, up to <answer> or the end of the turn)
    reasoning: str = "closed"
    # shuffles of the attribution for the permutation null of MI-Est and retrieval (bias-corrected values and
    # 95 % intervals); 0 = off
    null_draws: int = 200
    # (X, Z) pairs per scope
    num_pairs: int = 64
    # first-turn columns: "sampled" (groups among the drawn pairs, as the paper) or "all" (every group)
    columns: str = "sampled"
    # retrieval recall@k cut-offs
    ks: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    # epsilon added to the marginal std in MI-ZScore
    std_eps: float = 1e-3
    # decay of the marginal-std EMA used by MI-ZScore-EMA
    ema_decay: float = 0.9
    # tokens per scoring forward pass at most (memory budget)
    max_batch_tokens: int = 8192
    # also score Z -> answer and X -> answer (action dependence, beyond the paper)
    action_dependence: bool = False
    # gradient decomposition every n iterations; 0 = off
    gradient_every: int = 0
    # "quantile" (6 equal-size buckets) or "fixed" ([0,1), [1,2), ..., [5, inf))
    gradient_buckets: str = "quantile"
    # per-token H(Z|X) (nats, scored at T = 1) separating high from low diversity, for samples drawn at T = 1
    regime_entropy_threshold: float = 0.5
    # retrieval above chance (null-corrected) separating input-grounded from collapsed (docs/metrics.md, Regimes)
    regime_retrieval_threshold: float = 0.1
    # agnostic share at or above this: input dependence reads low whatever retrieval says (docs/metrics.md, Regimes)
    regime_agnostic_threshold: float = 0.5
    # power of the agnostic share's per-row test: share of input-dependent reasonings whose own prompt ranks among
    # the first k (calibrated on the model organism: docs/metrics.md, Agnostic share)
    agnostic_power: float = 0.93
    # fewer distinct prompt columns than this: the scope's regime is "undetermined" (docs/metrics.md)
    regime_min_columns: int = 4
    # fewer determined diagnosed iterations than this: the run's regime is "undetermined" (report, summary)
    regime_min_iterations: int = 3


@dataclass
class EarlyStopConfig:
    # stop after this many consecutive iterations whose selection was empty
    max_empty_steps: int = 5
    # reward-spread collapse: baseline = mean in-group std over the first n non-empty iterations (0 = off)
    spread_baseline_iterations: int = 10
    # ... stop when spread stays below this fraction of the baseline ...
    spread_fraction: float = 0.1
    # ... for this many consecutive iterations
    spread_patience: int = 10
    # validation-success collapse: stop when success stays below this ...
    val_success_floor: float = 0.01
    # ... for this many consecutive validations (0 = off)
    val_patience: int = 5


@dataclass
class ValidationConfig:
    # validate every n iterations and at the end; 0 = only at the end; -1 = never
    every: int = 10
    # fixed validation instances per env (seeds disjoint from training)
    num_instances: int = 512
    # samples per validation instance (pass@K uses all of them)
    group_size: int = 1
    # sampling temperature for validation
    temperature: float = 0.5


@dataclass
class LoggingConfig:
    # write TensorBoard events when tensorboard is installed
    tensorboard: bool = True
    # log to Weights & Biases (needs the wandb extra)
    wandb: bool = False
    # wandb project name
    wandb_project: str = "mirl"
    # episodes saved per iteration under rollouts/: "all", "sample" or "none"
    save_rollouts: str = "sample"
    # groups saved per iteration when save_rollouts is "sample"
    rollout_sample_groups: int = 2
    # rich progress bar on the console
    progress: bool = True


@dataclass
class TrainerConfig:
    # training iterations at most
    iterations: int = 400
    # run seed: instance seeds, sampling and initialisation derive from it
    seed: int = 0
    # parent directory of run directories
    output_dir: str = "runs"
    # run name; None = "<env>-<preset>-<timestamp>"
    name: str | None = None
    # deterministic torch algorithms (slower; used for exact resume tests)
    deterministic: bool = False
    # checkpoint every n iterations (and at the end); 0 = only at the end
    checkpoint_every: int = 10
    # checkpoints kept on disk
    keep_checkpoints: int = 2
    early_stop: EarlyStopConfig = field(default_factory=EarlyStopConfig)


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    # environments mixed by weight; the P prompt groups are split among them
    envs: list[EnvEntry] = field(default_factory=lambda: [EnvEntry()])
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


# ---------------------------------------------------------------- loading


def to_yaml(config: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def save_resolved(config: Config, run_dir: str | os.PathLike) -> Path:
    """Write ``config.yaml`` into ``run_dir`` atomically; a link planted there is replaced, never followed."""
    from mirl.safeio import atomic_write_text, ensure_dir

    return atomic_write_text(ensure_dir(Path(run_dir)) / "config.yaml", to_yaml(config))
