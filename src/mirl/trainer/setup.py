"""Building what a run trains: the policy (optionally LoRA), its optimiser, the critic and the reference model."""

from __future__ import annotations

import copy
import functools
import warnings

import torch

from mirl.algorithms import AlgorithmPreset, get_preset
from mirl.config import AlgorithmConfig, Config, ConfigError
from mirl.trainer.critic import Critic
from mirl.trainer.update import Learner

_PRESET_OVERRIDES = ("eps_low", "eps_high", "dual_clip", "agg", "entropy_coef", "kl_coef", "gamma", "lam")
_CREDIT_FIELDS = ("credit", "credit_gamma", "credit_lam", "step_weight")


def resolve_preset(config: AlgorithmConfig) -> AlgorithmPreset:
    """The named preset with every non-None override from the config applied."""
    overrides = {name: getattr(config, name) for name in _PRESET_OVERRIDES if getattr(config, name) is not None}
    overrides |= {name: getattr(config, name) for name in _CREDIT_FIELDS}
    fixed = {"kl_kind": config.kl_kind, "value_clip": config.value_clip, "task_coef": config.task_coef}
    return get_preset(config.preset, **fixed, **overrides)


def load_policy(config: Config):
    from mirl.policy import HFPolicy
    from mirl.policy.sources import model_modality

    policy_class = HFPolicy
    if model_modality(config.model.name, config.model.modality, config.model.cache_dir) == "vision":
        from mirl.policy.hf_vision import VisionPolicy

        if config.model.backend != "hf":
            raise ConfigError(
                f"{config.model.name} is a vision-language model, which runs on the hf backend only, got "
                f"model.backend={config.model.backend}; set model.backend=hf"
            )

        policy_class = VisionPolicy
    policy = policy_class.load(
        config.model.name,
        device=config.model.device,
        dtype=config.model.dtype,
        cache_dir=config.model.cache_dir,
        max_batch_tokens=config.diagnostics.max_batch_tokens,
    )
    if config.model.sampler_dtype != "same":
        if policy_class is not HFPolicy:
            raise ConfigError(
                f"model.sampler_dtype={config.model.sampler_dtype} samples text models only, and {config.model.name} "
                "is a vision-language model; set model.sampler_dtype=same"
            )
        policy.sample_in(config.model.sampler_dtype)
    if config.model.backend == "vllm":
        from mirl.policy.vllm import VLLMPolicy

        return VLLMPolicy.from_config(policy, config)
    return policy


def resolve_rollout_correction(config: Config, policy) -> str:
    """``algorithm.rollout_correction`` with "auto" resolved: token_tis when the sampler's log-probs come from
    another engine (vLLM) or a 16-bit forward pass, none when they come from the trainer's own float32 numerics
    (measured mismatch there: docs/gpu.md)."""
    chosen = config.algorithm.rollout_correction
    if chosen != "auto":
        return chosen
    sampler_dtype = getattr(policy, "sampler_dtype", getattr(policy, "dtype", torch.float32))
    sixteen_bits = sampler_dtype in (torch.bfloat16, torch.float16)
    return "token_tis" if config.model.backend == "vllm" or sixteen_bits else "none"


# a vision-language model's adapters go on its language tower's linear layers only; the vision tower stays frozen
LANGUAGE_TOWER_LINEARS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


def _lora(model, config: Config):
    return lora_model(model, rank=config.model.lora_rank, alpha=config.model.lora_alpha, seed=config.trainer.seed)


def lora_model(model, *, rank: int, alpha: float, seed: int):
    """``model`` with LoRA adapters on every linear layer (a text model) or on the language tower's (a model with a
    ``vision_config``: :data:`LANGUAGE_TOWER_LINEARS`); everything else is frozen."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:
        raise ImportError("model.lora_rank > 0 needs peft: pip install 'mirl[lora]'") from err
    vision = getattr(model.config, "vision_config", None) is not None
    lora = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=LANGUAGE_TOWER_LINEARS if vision else "all-linear",
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        torch.manual_seed(seed)  # LoRA init draws from the global RNG: keep it reproducible and local
        # peft (through 0.21) reads transformers' deprecated `is_gradient_checkpointing` while wrapping: nothing
        # mirl can change, and mirl's own checkpointing does not use the flag (mirl.policy.checkpointing)
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, lora)


class _Reference:
    """Log-probs of a frozen copy of the initial policy (or of the LoRA base with adapters off), at the sampling
    temperature like every other log-prob of the update."""

    def __init__(self, policy, use_adapters: bool, temperature: float = 1.0, model=None) -> None:
        self.policy = policy
        self.temperature = temperature
        if model is not None:  # model.reference_name: another model's weights
            self.model = model.to(policy.device).requires_grad_(False).eval()
        else:
            self.model = None if use_adapters else copy.deepcopy(policy.model).requires_grad_(False).eval()

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, needed=None, **images) -> torch.Tensor:
        options = {"temperature": self.temperature, "needed": needed, **images}  # images: a vision policy's rows
        logprobs = functools.partial(self.policy.token_logprobs, **options)
        if self.model is None:
            with self.policy.model.disable_adapter():
                return logprobs(input_ids, attention_mask)[0]
        trained, self.policy.model = self.policy.model, self.model
        try:
            return logprobs(input_ids, attention_mask)[0]
        finally:
            self.policy.model = trained


def reference_model(policy, config: Config):
    """The model ``model.reference_name`` names, loaded like the policy; its vocabulary must be the policy's (the KL
    compares log-probs token by token)."""
    from mirl.policy.sources import load_model_and_tokenizer

    name = config.model.reference_name
    model, tokenizer = load_model_and_tokenizer(
        name, dtype=config.model.dtype, device=config.model.device, cache_dir=config.model.cache_dir
    )
    if tokenizer.get_vocab() != policy.tokenizer.get_vocab():
        raise ConfigError(
            f"model.reference_name={name} has another vocabulary than model.name={config.model.name}; the KL term "
            "compares their log-probs token by token: name a model with the policy's tokenizer"
        )
    return model


def build_learner(policy, config: Config, preset: AlgorithmPreset) -> Learner:
    if config.model.lora_rank > 0:
        policy.model = _lora(policy.model, config)
    policy.activation_checkpointing = config.model.gradient_checkpointing  # works in eval mode, unlike HF's switch
    if not config.model.share_prompts:
        getattr(policy, "hf", policy).share_prompts = False  # the vllm backend trains its hf policy
    policy.model.eval()
    algo = config.algorithm
    params = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = adamw(params, lr=algo.actor_lr, weight_decay=algo.weight_decay)
    critic = critic_optimizer = None
    if preset.use_critic:
        critic = _make_critic(policy, config)
        critic_optimizer = adamw(
            [p for p in critic.parameters() if p.requires_grad],
            lr=algo.critic_lr,
            weight_decay=algo.weight_decay,
        )
    temperature = config.rollout.temperature
    reference = None
    if preset.kl_coef > 0:
        named = reference_model(policy, config) if config.model.reference_name else None
        reference = _Reference(policy, config.model.lora_rank > 0, temperature, named)
    return Learner(
        policy,
        optimizer,
        critic,
        critic_optimizer,
        reference,
        temperature=temperature,
        rollout_correction=resolve_rollout_correction(config, policy),
    )


def adamw(params: list, **kwargs) -> torch.optim.AdamW:
    """AdamW, fused where torch has a fused kernel for the parameters' device and dtype (CPU and CUDA floats).

    The fused step reads each parameter once and allocates no full-size temporaries: on SmolLM2-135M on 2 CPU
    cores it takes 1.2 s instead of 4.6 s and avoids 0.5 GB of transient memory (the default multi-tensor step
    builds a square-root copy of every second moment). Elsewhere the default implementation is used.
    """
    try:
        return torch.optim.AdamW(params, fused=True, **kwargs)
    except (RuntimeError, ValueError):  # no fused kernel here (device or dtype)
        return torch.optim.AdamW(params, **kwargs)


def _make_critic(policy, config: Config) -> Critic:
    """A value head on a copy of the policy backbone (or on ``model.critic_name``); LoRA runs put adapters on the
    copy too, so only the adapters and the head train."""
    if config.model.critic_name is None:
        causal_lm = copy.deepcopy(policy.model)
        if config.model.lora_rank > 0:  # fresh adapters are a no-op: merging them gives back the base weights
            causal_lm = causal_lm.merge_and_unload()
    else:
        from mirl.policy.sources import load_model_and_tokenizer

        causal_lm, _ = load_model_and_tokenizer(
            config.model.critic_name,
            dtype=config.model.dtype,
            device=config.model.device,
            cache_dir=config.model.cache_dir,
        )
    if config.model.lora_rank > 0:
        _lora(causal_lm, config)  # injects adapters in place and freezes the rest
    critic = Critic(causal_lm).to(policy.device)
    critic.checkpointing = config.model.gradient_checkpointing
    return critic
