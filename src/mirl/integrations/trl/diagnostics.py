"""Collapse diagnostics for TRL: the ``diag/*`` MI proxies of the last batch, in TRL's logger.

On TRL's optimizer steps 1, ``every``, ``2 * every``, ... the callback takes the episodes of the last generation
batch from every process (gathered, so the proxies see the whole batch, not one process's share), samples (X, Z)
pairs with mirl's samplers, cross-scores them with the trainer's model (mirl's prefix-shared scorer) and computes
the proxies with ``mirl.diagnostics.run_diagnostics``: per scope ``diag/<scope>/est/*`` and ``seq/*`` (MI-Est, MI
z-scores, retrieval@k and its chance level, H(Z|X), H(Z)), ``pairs``, ``columns``, ``empty_reasoning``. The metrics
enter TRL's metric buffer, so they reach whatever ``report_to`` names (TensorBoard, W&B, stdout) at the next log.
TRL averages numbers only, so the regime name is logged as ``diag/<scope>/regime_id`` = its index in
``mirl.diagnostics.REGIMES`` (-1: undetermined); ``last_metrics`` keeps the names.

Where the episodes come from: with ``MirlRollout`` as the ``rollout_func``, its multi-turn episodes; otherwise
episodes rebuilt from the trainer's batch before filtering (:func:`batch_episodes`), X = the prompt ids, Z = the
completion up to ``</think>`` when it has one, else the whole completion; with TRL's ``tool_mask`` (tools and
``environment_factory``) each run of model tokens is a turn and the tool results are context. Groups are numbered
over the gathered batch by the first turn's context (the prompt tokens), so a prompt's samples form one group whichever
process played them. The scoring runs after the step's update (TRL gives callbacks no earlier hook with the
batch). It runs on every process, which is a collective: the gather, and the model reached as TRL's generation
reaches it (ZeRO-3 gathers the parameters on every process), so each process scores the same gathered episodes
with the same seeded sampler and holds the same metrics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from transformers import TrainerCallback

from mirl.config import DiagnosticsConfig
from mirl.diagnostics import REGIMES
from mirl.diagnostics.run import DiagnosticsState, is_scheduled, run_diagnostics
from mirl.integrations.trl.envs import generation_model
from mirl.rollout.parsing import decode, reasoning_span
from mirl.rollout.prompts import EXAMPLE_REASONINGS
from mirl.types import EnvSpec, Episode, Turn


def _config(config: DiagnosticsConfig | Mapping | None) -> DiagnosticsConfig:
    if config is None or isinstance(config, DiagnosticsConfig):
        return config or DiagnosticsConfig()
    names = {f.name for f in dataclasses.fields(DiagnosticsConfig)}
    unknown = sorted(set(config) - names)
    if unknown:
        raise ValueError(f"unknown diagnostics key(s) {unknown}; valid keys: {sorted(names)}")
    return DiagnosticsConfig(**dict(config))


def batch_episodes(inputs: Mapping[str, torch.Tensor], tokenizer) -> list[Episode]:
    """Episodes from one TRL batch (``prompt_ids``/``prompt_mask`` left-padded, completions right-padded).

    Without ``tool_mask`` each row is one single-turn episode: X = the prompt, Z = the completion up to ``</think>``
    (or all of it). With ``tool_mask`` (TRL's tool loop and ``environment_factory``: 1 on the model's tokens, 0 on
    the tool results) each run of model tokens is a turn whose context is the prompt and everything before the run,
    so the first turn's X is the prompt (with the env's first observation) and Z its first reply, and the tool
    results are context, never Z. Rows with identical prompt ids share a group (numbered by first appearance). The
    loss mask is otherwise not applied: Z is what the model was conditioned on and wrote.
    """
    episodes, group_of = [], {}
    tool_mask = inputs.get("tool_mask")
    for b in range(inputs["prompt_ids"].shape[0]):
        x = tuple(inputs["prompt_ids"][b][inputs["prompt_mask"][b].bool()].tolist())
        kept = inputs["completion_mask"][b].bool()
        completion = tuple(inputs["completion_ids"][b][kept].tolist())
        model_tokens = tool_mask[b][kept].tolist() if tool_mask is not None else [1] * len(completion)
        group = group_of.setdefault(x, len(group_of))
        turns = tuple(
            _turn(x + completion[:start], completion[start:end], tokenizer) for start, end in runs(model_tokens)
        )
        episodes.append(
            Episode(EnvSpec("trl", group), group, b, turns or (_turn(x, (), tokenizer),), False, "max_turns")
        )
    return episodes


def runs(mask) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of ones in ``mask``.

    >>> runs([1, 1, 0, 0, 1, 0, 1])
    [(0, 2), (4, 5), (6, 7)]
    """
    out, start = [], None
    for i, value in enumerate([*mask, 0]):
        if value and start is None:
            start = i
        elif not value and start is not None:
            out.append((start, i))
            start = None
    return out


def _turn(context: tuple[int, ...], z: tuple[int, ...], tokenizer) -> Turn:
    span = reasoning_span(tokenizer, z) or ((0, len(z)) if z else None)
    return Turn(context, z, (0.0,) * len(z), decode(tokenizer, z), "", span, (), 0.0, True, True)


def regroup(episodes: list[Episode]) -> list[Episode]:
    """Episodes gathered from several processes, groups renumbered by first-turn context, samples by occurrence."""
    group_of: dict[tuple[int, ...], int] = {}
    seen: dict[int, int] = {}
    out = []
    for episode in episodes:
        group = group_of.setdefault(episode.turns[0].context_ids, len(group_of))
        out.append(dataclasses.replace(episode, group=group, sample=seen.get(group, 0)))
        seen[group] = seen.get(group, 0) + 1
    return out


class CollapseDiagnosticsCallback(TrainerCallback):
    """Log the ``diag/*`` family of the last batch every ``every`` steps (module docstring).

    Args:
        trainer: the ``GRPOTrainer`` (or subclass) to read the batch and the model from and log into.
        config: mirl's ``diagnostics`` block (a ``DiagnosticsConfig``) or a mapping of its fields (``every``,
            ``scopes``, ``num_pairs``, ``ks``, ...).
        seed: seed of the pair sampler's generator.

    >>> # trainer.add_callback(CollapseDiagnosticsCallback(trainer, {"every": 5, "num_pairs": 32}))
    """

    def __init__(self, trainer, config: DiagnosticsConfig | Mapping | None = None, *, seed: int = 0) -> None:
        self.trainer = trainer
        self.config = _config(config)
        if self.config.every < 0:
            raise ValueError(f"diagnostics every must be >= 0 (0 = off), got {self.config.every}")
        self.state = DiagnosticsState(decay=self.config.ema_decay)
        self.generator = torch.Generator().manual_seed(seed)
        self.last_metrics: dict[str, float | str] = {}

    def local_episodes(self) -> list[Episode]:
        """This process's episodes of the last batch: ``MirlRollout.last_episodes``, else its token rows (before the
        filter dropped any: ``SNRFilterGRPOTrainer.unfiltered_batch``; TRL's buffered batch otherwise)."""
        rollout = getattr(self.trainer, "rollout_func", None)
        if getattr(rollout, "last_episodes", None):
            return list(rollout.last_episodes)
        unfiltered = getattr(self.trainer, "unfiltered_batch", None)
        buffered = [unfiltered] if unfiltered else getattr(self.trainer, "_buffered_inputs", None) or []
        tokenizer = self.trainer.processing_class
        return [e for inputs in buffered for e in batch_episodes(inputs, tokenizer)]

    def episodes(self) -> list[Episode]:
        """The last batch's episodes from every process (a collective), regrouped over the whole batch."""
        from accelerate.utils import gather_object

        return regroup(list(gather_object(self.local_episodes())))

    def compute(self) -> dict[str, float | str]:
        """Score the last batch now (every process); returns the metrics (regime names included), remembers them."""
        from mirl.policy.hf import HFPolicy

        episodes = self.episodes()
        with generation_model(self.trainer) as model:
            param = next(model.parameters())
            policy = HFPolicy(model, self.trainer.processing_class, device=param.device, dtype=param.dtype)
            metrics = run_diagnostics(
                policy, episodes, self.config, self.state, generator=self.generator, format_reasoning=EXAMPLE_REASONINGS
            )
        for key, value in list(metrics.items()):
            if isinstance(value, str) and key.endswith("/regime") and key.count("/") == 2:
                metrics[f"{key}_id"] = float(REGIMES.index(value)) if value in REGIMES else -1.0
        self.last_metrics = metrics
        return metrics

    def on_step_end(self, args, state, control, **kwargs):
        if not (self.config.enabled and is_scheduled(state.global_step, self.config.every)):
            return control  # the same decision on every process
        for key, value in self.compute().items():
            if not isinstance(value, str):
                self.trainer._metrics["train"][key].append(float(value))
        return control
