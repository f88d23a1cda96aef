"""mirl environments in TRL: a prompt dataset and a ``rollout_func`` that plays them multi-turn.

TRL 1.16 hands a ``rollout_func(prompts, trainer)`` the prompt column of the batch (each prompt repeated
``num_generations`` times) and expects ``prompt_ids``, ``completion_ids`` and ``logprobs`` back, one list per row,
plus optional extra columns. Here:

- The prompt column is an *instance key* ``"mirl/<env>/<split>/<seed>"`` on its first line (made by
  :func:`dataset`, read by :func:`parse_instance`) followed by the instance's first observation, so TRL's
  completion tables show the state the episode started from. The text the model sees is rendered inside the
  rollout by mirl's own prompts (``mirl.rollout.prompts``), with the tokenizer's chat template, as the native
  trainer does.
- :class:`MirlRollout` plays every row with mirl's rollout engine (``mirl.rollout.run_episodes``: the same
  prompts, reply parser, action budget and format penalty) using the trainer's current model, reached the way
  TRL's own generation reaches it (``trl.models.unwrap_model_for_generation`` and TRL's ``summon_full_params``:
  ZeRO-3 parameters gathered, gradient checkpointing off for the block), token-in/token-out.
- Sampling has one source of truth, the ``GRPOConfig``: ``temperature``, ``top_p`` and ``max_completion_length``
  (the token cap of each reply) come from it, because TRL computes the training log-probs at
  ``GRPOConfig.temperature``; the sampled log-probs then equal TRL's at the first update (ratio 1). An explicit
  mirl setting that differs is an error, and so are settings mirl's sampler lacks (``top_k``, ``min_p``,
  ``repetition_penalty``, ``generation_kwargs``).
- Each episode becomes one row (:func:`episodes_to_rollout`, built on ``mirl.rollout.collate``): ``prompt_ids`` =
  the first turn's context, ``completion_ids`` = every later token of the trajectory (replies and the env's
  next user messages in order), ``env_mask`` = 1 exactly on sampled reply tokens, 0 on env text, so TRL
  trains only on what the model wrote. An episode whose last reply ended on the ``</answer>`` stop string gets
  the tokenizer's eos appended as an env token (masked out, log-prob 0), where a chat template closes the turn:
  TRL counts a row as truncated when it does not end in eos, and ``mask_truncated_completions`` would drop it.
  Replies cut at the token cap stay truncated. ``episode_return`` (sum of turn rewards) is an extra column that
  :func:`episode_return` hands to TRL as the reward.
- Per-turn columns: ``turn_rewards`` (each turn's reward, in order; they sum to ``episode_return``) and
  ``turn_state_keys`` (each turn's ``state_key``, None where the env gives none). TRL passes a rollout's extra
  columns to every reward function as keyword arguments, one value per row; its GRPO turns the summed reward
  into one advantage per row, so training in TRL stays episode-level (turn-level credit: ``mirl train`` or veRL).

Instance seeds: split ``train`` uses even seeds ``2 * (first + i)``, ``validation`` odd seeds ``2 * (first + i) + 1``,
so the two splits never share an instance; envs with a ``split`` option also get it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping, Sequence

import torch

from mirl.config import RolloutConfig
from mirl.envs import make, registry
from mirl.rollout import collate, run_episodes
from mirl.types import EnvSpec, Episode

SPLITS = ("train", "validation")
_KEY = re.compile(r"^mirl/([A-Za-z0-9_\-]+)/(train|validation)/(\d+)$")
# mirl rollout field -> the GRPOConfig field it must equal
SAMPLING_FIELDS = {"temperature": "temperature", "top_p": "top_p", "max_new_tokens": "max_completion_length"}
# GRPOConfig settings mirl's sampler does not implement, with their neutral values
UNSUPPORTED = {"top_k": (0, None), "min_p": (None, 0.0), "repetition_penalty": (1.0,), "generation_kwargs": (None, {})}


def instance_key(env: str, split: str, seed: int) -> str:
    """The prompt-column key of one env instance.

    >>> instance_key("frozenlake", "train", 4)
    'mirl/frozenlake/train/4'
    """
    return f"mirl/{env}/{split}/{seed}"


def parse_instance(key: str) -> tuple[str, str, int]:
    """``(env, split, seed)`` from a key made by :func:`instance_key` (the prompt's first line; the observation text
    that :func:`dataset` puts after it is ignored); anything else raises ``ValueError``.

    >>> parse_instance("mirl/sokoban/validation/7")
    ('sokoban', 'validation', 7)
    >>> parse_instance("mirl/frozenlake/train/4\\nState: ...")
    ('frozenlake', 'train', 4)
    """
    match = _KEY.match(key.split("\n", 1)[0]) if isinstance(key, str) else None
    if match is None:
        raise ValueError(
            f"prompt {key!r} is not a mirl instance key 'mirl/<env>/<split>/<seed>'; build the train dataset with "
            "mirl.integrations.trl.dataset(env, n)"
        )
    return match.group(1), match.group(2), int(match.group(3))


def instance_spec(key: str, env_options: Mapping[str, Mapping] | None = None) -> EnvSpec:
    """The ``EnvSpec`` of an instance key: per-env ``env_options`` applied, ``split`` passed to envs that take one."""
    env, split, seed = parse_instance(key)
    if env not in registry:
        raise ValueError(f"unknown environment {env!r} in prompt {key!r}; registered: {sorted(registry)}")
    options = dict((env_options or {}).get(env, {}))
    if "split" in inspect.signature(registry[env].__init__).parameters:
        options.setdefault("split", split)
    return EnvSpec(env, seed, options)


def first_observation(spec: EnvSpec) -> str:
    """The observation of ``spec`` right after ``reset``: the state its episodes start from."""
    env = make(spec.env, **dict(spec.options))
    try:
        observation, _ = env.reset(seed=spec.seed)
    finally:
        env.close()
    return str(observation)


def dataset(env: str, n: int, split: str = "train", *, first: int = 0, env_options: Mapping | None = None):
    """A ``datasets.Dataset`` of ``n`` instances of ``env``: columns ``prompt``, ``env``, ``split``, ``seed``.

    ``prompt`` is the instance key, a newline, and the instance's first observation (what TRL's completion tables
    show); :class:`MirlRollout` checks that observation against the one it plays.

    Args:
        env: a registered mirl env name (``mirl envs`` lists them).
        n: number of instances (rows), >= 1. TRL repeats each row ``num_generations`` times itself.
        split: ``"train"`` (even seeds) or ``"validation"`` (odd seeds).
        first: index of the first instance, >= 0 (instance i has seed ``2 * (first + i)`` (+1 for validation)).
        env_options: constructor options of ``env`` (e.g. ``{"size": 4}``); pass the same to ``MirlRollout``.
    """
    from datasets import Dataset

    if env not in registry:
        raise ValueError(f"unknown environment {env!r}; registered: {', '.join(sorted(registry))}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    for name, value, low in (("n", n, 1), ("first", first, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    seeds = [2 * (first + i) + (split == "validation") for i in range(n)]
    keys = [instance_key(env, split, s) for s in seeds]
    options = {env: dict(env_options or {})}
    return Dataset.from_dict(
        {
            "prompt": [f"{key}\n{first_observation(instance_spec(key, options))}" for key in keys],
            "env": [env] * n,
            "split": [split] * n,
            "seed": seeds,
        }
    )


def episode_return(completions, episode_return: Sequence[float], **kwargs) -> list[float]:
    """TRL reward function: the return of each row's episode (the ``episode_return`` column of the rollout)."""
    return [float(r) for r in episode_return]


def episodes_to_rollout(episodes: Sequence[Episode], pad_id: int, eos_id: int | None = None) -> dict[str, list]:
    """TRL rollout output for ``episodes``, one row each (module docstring for the columns).

    With ``eos_id`` given, a row whose last reply ended on a stop string (finish reason ``"stop"``) gets ``eos_id``
    appended with ``env_mask`` 0 and log-prob 0, so TRL does not count it as truncated. Every episode must be one
    collated row (its turn contexts nest: ``context_mode="full"`` and no turn dropped for length); otherwise
    ``ValueError`` says how to fix the rollout config.
    """
    batch = collate(episodes, pad_id=pad_id)  # (B, T); one row per episode when contexts nest
    if batch.num_rows != len(episodes) or batch.episode_ids.tolist() != list(range(len(episodes))):
        raise ValueError(
            "an episode did not collate to one token stream (window context mode, a turn dropped for length, or "
            "an empty reply); use rollout context_mode='full' and raise max_context_tokens"
        )
    out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
    for b, episode in enumerate(episodes):
        start, end = len(episode.turns[0].context_ids), int(batch.attention_mask[b].sum())
        closed = eos_id is not None and episode.turns[-1].finish_reason == "stop"
        out["prompt_ids"].append(batch.input_ids[b, :start].tolist())
        out["completion_ids"].append(batch.input_ids[b, start:end].tolist() + [eos_id] * closed)
        out["logprobs"].append(batch.old_logprobs[b, start:end].tolist() + [0.0] * closed)
        out["env_mask"].append(batch.response_mask[b, start:end].int().tolist() + [0] * closed)
    out["episode_return"] = [float(e.total_reward) for e in episodes]
    out["success"] = [float(e.success) for e in episodes]
    out["num_turns"] = [float(e.num_turns) for e in episodes]
    out["turn_rewards"] = [[float(turn.reward) for turn in e.turns] for e in episodes]
    out["turn_state_keys"] = [[turn.state_key for turn in e.turns] for e in episodes]
    return out


def _with_groups(episodes: Sequence[Episode], keys: Sequence[str]) -> list[Episode]:
    """Number groups by first appearance of each key, samples by occurrence within the key."""
    group_of: dict[str, int] = {}
    seen: dict[str, int] = {}
    out = []
    for episode, key in zip(episodes, keys, strict=True):
        group = group_of.setdefault(key, len(group_of))
        out.append(dataclasses.replace(episode, group=group, sample=seen.get(key, 0)))
        seen[key] = seen.get(key, 0) + 1
    return out


def _explicit_fields(rollout: RolloutConfig | Mapping | None) -> set[str]:
    """The sampling fields the user set: a mapping's keys, or a ``RolloutConfig``'s fields off their defaults."""
    if isinstance(rollout, RolloutConfig):
        default = RolloutConfig()
        return {name for name in SAMPLING_FIELDS if getattr(rollout, name) != getattr(default, name)}
    return set(rollout or {}) & set(SAMPLING_FIELDS)


def refuse_unused_vllm(args, rollout_func) -> None:
    """``use_vllm=True`` with :class:`MirlRollout` raises ``ValueError``: mirl's sampler would ignore the engine."""
    if getattr(args, "use_vllm", False) and isinstance(rollout_func, MirlRollout):
        raise ValueError(
            "MirlRollout samples with mirl's own sampler on the trainer's model, so use_vllm=True would only sync "
            "weights to a vLLM engine nothing reads; set use_vllm=False"
        )


class MirlRollout:
    """TRL ``rollout_func`` playing mirl env instances multi-turn with the trainer's current model.

    Args:
        rollout: mirl's ``rollout`` block (a ``RolloutConfig``) or a mapping of its fields: max_turns,
            format_penalty, format_example, ... ``context_mode`` must stay ``"full"``. ``temperature``, ``top_p``
            and ``max_new_tokens`` come from the ``GRPOConfig`` (module docstring); set here, they must equal it.
        env_options: per env name, constructor options (e.g. ``{"frozenlake": {"size": 4}}``).
        sampling_seed: base seed of the sampler (``None`` = unseeded); each call uses
            ``sampling_seed + 1_000_003 * global_step + 7919 * process_index``.
        policy: ``trainer -> Policy`` that plays the episodes; default an ``HFPolicy`` over the trainer's model as
            TRL's generation context yields it (another sampler, e.g. a scripted test double, must use the same
            tokenizer).

    After each call ``last_episodes`` holds this process's episodes (``CollapseDiagnosticsCallback`` gathers them).
    """

    def __init__(
        self,
        rollout: RolloutConfig | Mapping | None = None,
        *,
        env_options: Mapping[str, Mapping] | None = None,
        sampling_seed: int | None = 0,
        policy: Callable[[object], object] | None = None,
    ) -> None:
        self.config = rollout if isinstance(rollout, RolloutConfig) else RolloutConfig(**dict(rollout or {}))
        if self.config.context_mode != "full":
            raise ValueError(f"rollout context_mode must be 'full' for TRL, got {self.config.context_mode!r}")
        self.explicit = _explicit_fields(rollout)
        self.env_options = {name: dict(options) for name, options in (env_options or {}).items()}
        self.sampling_seed = sampling_seed
        self.policy = policy
        self.last_episodes: list[Episode] = []

    def spec(self, key: str) -> EnvSpec:
        """The ``EnvSpec`` of an instance key (env options applied, ``split`` passed to envs that take one)."""
        return instance_spec(key, self.env_options)

    def sampling_config(self, args) -> RolloutConfig:
        """The rollout config with the sampling settings of ``args`` (a ``GRPOConfig``); mismatches raise."""
        for name, neutral in UNSUPPORTED.items():
            if getattr(args, name, neutral[0]) not in neutral:
                raise ValueError(
                    f"MirlRollout: mirl's sampler has no {name}, got GRPOConfig.{name}={getattr(args, name)!r}; "
                    f"set {name}={neutral[0]!r}"
                )
        values = {name: getattr(args, field) for name, field in SAMPLING_FIELDS.items()}
        if values["max_new_tokens"] is None:
            del values["max_new_tokens"]  # no cap in the GRPOConfig: mirl's own
        for name, value in values.items():
            if name in self.explicit and getattr(self.config, name) != value:
                raise ValueError(
                    f"MirlRollout: rollout {name}={getattr(self.config, name)!r} differs from GRPOConfig."
                    f"{SAMPLING_FIELDS[name]}={value!r}; TRL computes the training log-probs with the GRPOConfig's "
                    f"settings, so set them there and leave {name} out of the rollout block"
                )
        return dataclasses.replace(self.config, **values)

    def __call__(self, prompts: Sequence[str], trainer) -> dict[str, list]:
        refuse_unused_vllm(trainer.args, self)
        config = self.sampling_config(trainer.args)
        specs = [self.spec(key) for key in prompts]
        seed = self.sampling_seed
        if seed is not None:
            seed += 1_000_003 * trainer.state.global_step + 7919 * trainer.accelerator.process_index
        with generation_model(trainer) as model:
            policy = self.policy(trainer) if self.policy is not None else _hf_policy(model, trainer)
            episodes = run_episodes(policy, specs, 1, config, sampling_seed=seed)
        _check_observations(prompts, episodes)
        self.last_episodes = _with_groups(episodes, prompts)
        tokenizer = trainer.processing_class
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return episodes_to_rollout(self.last_episodes, int(pad or 0), tokenizer.eos_token_id)


def _check_observations(prompts: Sequence[str], episodes: Sequence[Episode]) -> None:
    """A prompt carrying an observation (from :func:`dataset`) must show the state its episode started from."""
    for prompt, episode in zip(prompts, episodes, strict=True):
        shown = prompt.split("\n", 1)[1] if "\n" in prompt else None
        if shown is not None and shown != episode.turns[0].observation:
            raise ValueError(
                f"prompt {prompt.splitlines()[0]!r} shows another first observation than the instance played; build "
                "the dataset with the env_options given to MirlRollout: dataset(env, n, env_options=...)"
            )


@contextlib.contextmanager
def generation_model(trainer):
    """The trainer's model for sampling or scoring, reached as ``GRPOTrainer``'s own generation reaches it.

    ``unwrap_model_for_generation`` (ZeRO-3 parameters gathered unless ``ds3_gather_for_generation=False``,
    gradient checkpointing off for the block), TRL's ``summon_full_params`` (FSDP v1), no gradient, eval mode.
    Under ZeRO-3 or FSDP every process must enter it together.
    """
    from trl.distributed import DistributedBackend
    from trl.models import unwrap_model_for_generation

    args = trainer.args
    with (
        unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
        ) as model,
        torch.no_grad(),
        DistributedBackend(trainer.accelerator).summon_full_params(trainer.model_wrapped, recurse=False),
        eval_mode(model),
    ):
        yield model


@contextlib.contextmanager
def eval_mode(model):
    """``model.eval()`` for the block, then the previous mode back."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _hf_policy(model, trainer):
    """An ``HFPolicy`` over ``model`` and the trainer's tokenizer, in the model's device and dtype."""
    from mirl.policy.hf import HFPolicy

    param = next(model.parameters())
    return HFPolicy(model, trainer.processing_class, device=param.device, dtype=param.dtype)
