"""mirl environments in TRL: a prompt dataset and a ``rollout_func`` that plays them multi-turn.

TRL 1.16 hands a ``rollout_func(prompts, trainer)`` the prompt column of the batch (each prompt repeated
``num_generations`` times) and expects ``prompt_ids``, ``completion_ids`` and ``logprobs`` back, one list per row,
plus optional extra columns. Here:

- The prompt column is an *instance key* ``"mirl/<env>/<split>/<seed>"`` (made by :func:`dataset`, read by
  :func:`parse_instance`); the text the model sees is rendered inside the rollout by mirl's own prompts
  (``mirl.rollout.prompts``), with the tokenizer's chat template, as the native trainer does.
- :class:`MirlRollout` plays every row with mirl's rollout engine (``mirl.rollout.run_episodes``: the same
  prompts, reply parser, action budget and format penalty) using the trainer's current model, token-in/token-out.
- Each episode becomes one row (:func:`episodes_to_rollout`, built on ``mirl.rollout.collate``): ``prompt_ids`` =
  the first turn's context, ``completion_ids`` = every later token of the trajectory (replies and the env's
  next user messages in order), ``env_mask`` = 1 exactly on sampled reply tokens, 0 on env text, so TRL
  trains only on what the model wrote. ``episode_return`` (sum of turn rewards) is an extra column that
  :func:`episode_return` hands to TRL as the reward.

Instance seeds: split ``train`` uses even seeds ``2 * (first + i)``, ``validation`` odd seeds ``2 * (first + i) + 1``,
so the two splits never share an instance; envs with a ``split`` option also get it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping, Sequence

from mirl.config import RolloutConfig
from mirl.envs import registry
from mirl.rollout import collate, run_episodes
from mirl.types import EnvSpec, Episode

SPLITS = ("train", "validation")
_KEY = re.compile(r"^mirl/([A-Za-z0-9_\-]+)/(train|validation)/(\d+)$")


def instance_key(env: str, split: str, seed: int) -> str:
    """The prompt-column key of one env instance.

    >>> instance_key("frozenlake", "train", 4)
    'mirl/frozenlake/train/4'
    """
    return f"mirl/{env}/{split}/{seed}"


def parse_instance(key: str) -> tuple[str, str, int]:
    """``(env, split, seed)`` from a key made by :func:`instance_key`; anything else raises ``ValueError``.

    >>> parse_instance("mirl/sokoban/validation/7")
    ('sokoban', 'validation', 7)
    """
    match = _KEY.match(key) if isinstance(key, str) else None
    if match is None:
        raise ValueError(
            f"prompt {key!r} is not a mirl instance key 'mirl/<env>/<split>/<seed>'; build the train dataset with "
            "mirl.integrations.trl.dataset(env, n)"
        )
    return match.group(1), match.group(2), int(match.group(3))


def dataset(env: str, n: int, split: str = "train", *, first: int = 0):
    """A ``datasets.Dataset`` of ``n`` instances of ``env``: columns ``prompt`` (the key), ``env``, ``split``, ``seed``.

    Args:
        env: a registered mirl env name (``mirl envs`` lists them).
        n: number of instances (rows), >= 1. TRL repeats each row ``num_generations`` times itself.
        split: ``"train"`` (even seeds) or ``"validation"`` (odd seeds).
        first: index of the first instance, >= 0 (instance i has seed ``2 * (first + i)`` (+1 for validation)).
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
    return Dataset.from_dict(
        {
            "prompt": [instance_key(env, split, s) for s in seeds],
            "env": [env] * n,
            "split": [split] * n,
            "seed": seeds,
        }
    )


def episode_return(completions, episode_return: Sequence[float], **kwargs) -> list[float]:
    """TRL reward function: the return of each row's episode (the ``episode_return`` column of the rollout)."""
    return [float(r) for r in episode_return]


def episodes_to_rollout(episodes: Sequence[Episode], pad_id: int) -> dict[str, list]:
    """TRL rollout output for ``episodes``, one row each (module docstring for the columns).

    Every episode must be one collated row (its turn contexts nest: ``context_mode="full"`` and no turn dropped
    for length); otherwise ``ValueError`` says how to fix the rollout config.
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
        out["prompt_ids"].append(batch.input_ids[b, :start].tolist())
        out["completion_ids"].append(batch.input_ids[b, start:end].tolist())
        out["logprobs"].append(batch.old_logprobs[b, start:end].tolist())
        out["env_mask"].append(batch.response_mask[b, start:end].int().tolist())
    out["episode_return"] = [float(e.total_reward) for e in episodes]
    out["success"] = [float(e.success) for e in episodes]
    out["num_turns"] = [float(e.num_turns) for e in episodes]
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


class MirlRollout:
    """TRL ``rollout_func`` playing mirl env instances multi-turn with the trainer's current model.

    Args:
        rollout: mirl's ``rollout`` block (a ``RolloutConfig``) or a mapping of its fields: max_turns,
            max_new_tokens, temperature, top_p, format_penalty, ... ``context_mode`` must stay ``"full"``.
        env_options: per env name, constructor options (e.g. ``{"frozenlake": {"size": 4}}``).
        sampling_seed: base seed of the sampler (``None`` = unseeded); each call uses
            ``sampling_seed + 1_000_003 * global_step + 7919 * process_index``.
        policy: ``trainer -> Policy`` that plays the episodes; default an ``HFPolicy`` over the trainer's current
            model and tokenizer (another sampler, e.g. a scripted test double, must use the same tokenizer).

    After each call ``last_episodes`` holds this process's episodes (used by ``CollapseDiagnosticsCallback``).
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
        self.env_options = {name: dict(options) for name, options in (env_options or {}).items()}
        self.sampling_seed = sampling_seed
        self.policy = policy if policy is not None else _trainer_policy
        self.last_episodes: list[Episode] = []

    def spec(self, key: str) -> EnvSpec:
        """The ``EnvSpec`` of an instance key (env options applied, ``split`` passed to envs that take one)."""
        env, split, seed = parse_instance(key)
        if env not in registry:
            raise ValueError(f"unknown environment {env!r} in prompt {key!r}; registered: {sorted(registry)}")
        options = dict(self.env_options.get(env, {}))
        if "split" in inspect.signature(registry[env].__init__).parameters:
            options.setdefault("split", split)
        return EnvSpec(env, seed, options)

    def __call__(self, prompts: Sequence[str], trainer) -> dict[str, list]:
        specs = [self.spec(key) for key in prompts]
        policy = self.policy(trainer)
        seed = self.sampling_seed
        if seed is not None:
            seed += 1_000_003 * trainer.state.global_step + 7919 * trainer.accelerator.process_index
        with eval_mode(trainer.accelerator.unwrap_model(trainer.model)):
            episodes = run_episodes(policy, specs, 1, self.config, sampling_seed=seed)
        self.last_episodes = _with_groups(episodes, prompts)
        tokenizer = trainer.processing_class
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return episodes_to_rollout(self.last_episodes, int(pad or 0))


@contextlib.contextmanager
def eval_mode(model):
    """``model.eval()`` for the block, then the previous mode back (TRL trains with gradient checkpointing, which
    turns the KV cache off in training mode)."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _trainer_policy(trainer):
    """An ``HFPolicy`` sharing the trainer's (unwrapped) model and tokenizer, in the model's device and dtype."""
    from mirl.policy.hf import HFPolicy

    model = trainer.accelerator.unwrap_model(trainer.model)
    param = next(model.parameters())
    return HFPolicy(model, trainer.processing_class, device=param.device, dtype=param.dtype)
