"""The training loop. It reads like the data flow in DESIGN.md: rollout, diagnose, select, advantages, update,
log, checkpoint, validate, early stops. Everything else lives in named helpers (stages, run, update, ...).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from mirl.config import Config
from mirl.diagnostics.groups import label_counts, label_groups
from mirl.diagnostics.run import DiagnosticsState, is_scheduled, run_diagnostics
from mirl.filtering import group_spread
from mirl.rollout.prompts import EXAMPLE_REASONINGS
from mirl.trainer import credit, stages
from mirl.trainer.early_stop import after_selection, after_validation
from mirl.trainer.filter_watch import SoftmaxKeepWatch
from mirl.trainer.mismatch import behaviour_logprobs, measured_in_update
from mirl.trainer.pace import PaceWatch
from mirl.trainer.run import (
    Timer,
    TrainState,
    commit,
    is_due,
    log_groups,
    peak_memory_gb,
    prepare,
    restore,
    run_directory,
    save_rollouts,
)
from mirl.trainer.rundir import RunSummary
from mirl.trainer.setup import build_learner, load_policy, resolve_preset
from mirl.trainer.sinks import Sinks
from mirl.trainer.update import UpdateInputs, update
from mirl.trainer.validation import validate


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    iterations_done: int
    stop_reason: str | None
    final_metrics: dict


def iteration_seed(config: Config, iteration: int) -> int:
    """Seed of an iteration's sampling, shuffling and pair draws: a function of (run seed, iteration) only."""
    return config.trainer.seed * 1_000_003 + iteration


def resume_hint(run_dir: Path) -> str:
    """How to continue an interrupted run: resume from its checkpoint, or start it again when it has none.

    >>> resume_hint(Path("/nonexistent/run"))
    'no checkpoint yet; start it again with: mirl train --resume /nonexistent/run --restart'
    """
    saved = any((run_dir / "checkpoints").glob("iteration_*/state.pt"))
    if saved:
        return f"continue it with: mirl train --resume {run_dir}"
    return f"no checkpoint yet; start it again with: mirl train --resume {run_dir} --restart"


def discard_run_directory(run_dir: Path) -> None:
    """Remove a run directory this call made (a real folder holding only what :func:`prepare` wrote)."""
    import shutil

    if run_dir.is_dir() and not run_dir.is_symlink():
        shutil.rmtree(run_dir, ignore_errors=True)


def _preflight_envs(config: Config) -> None:
    """Env checks that need the machine (the code sandbox's isolation), before a run directory or a model."""
    from mirl.envs import registry

    for entry in config.envs:
        preflight = getattr(registry.get(entry.name), "preflight", None)
        if preflight is not None:
            preflight(dict(entry.options))


def train(
    config: Config, *, policy=None, run_dir: str | Path | None = None, resume: bool = False, console=None
) -> RunResult:
    """Train ``config.trainer.iterations`` iterations (or continue a run with ``resume=True``).

    ``config`` is checked as ``load_config`` checks it (a Config built or changed in Python gets the same range and
    choice checks) before anything is written.
    """
    from mirl.config_checks import validate

    validate(config)
    _preflight_envs(config)
    run_dir = Path(run_dir) if run_dir is not None else run_directory(config)
    fresh = not resume and not run_dir.exists()
    prepare(run_dir, config, resume)
    try:
        policy = policy if policy is not None else load_policy(config)
    except BaseException:
        if fresh:  # a start that failed before its first iteration leaves no half-made run behind
            discard_run_directory(run_dir)
        raise
    preset = resolve_preset(config.algorithm)
    learner = build_learner(policy, config, preset)
    state = TrainState(diagnostics=DiagnosticsState.from_config(config.diagnostics))
    if resume:
        restore(run_dir, learner, state)
    summary = RunSummary(
        run_dir,
        name=run_dir.name,
        model=config.model.name,
        device=str(policy.device),
        iterations_done=state.iteration,
        iterations_planned=config.trainer.iterations,
    )
    sinks = Sinks(run_dir, config.logging, total=config.trainer.iterations, start=state.iteration, console=console)
    stop_reason, status = None, "crashed"
    watches = (PaceWatch(), SoftmaxKeepWatch(mode=config.filter.mode, strategy=config.filter.strategy))
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(config.trainer.deterministic, warn_only=True)
    try:
        while stop_reason is None and state.iteration < config.trainer.iterations:
            state.iteration += 1
            metrics, stop_reason = run_iteration(policy, learner, preset, config, state, run_dir, sinks)
            commit(run_dir, config, learner, state, sinks, metrics, stop_reason)
            summary.update(iterations_done=state.iteration)
            say_warnings(watches, state.iteration, metrics, sinks, summary)
            if stop_reason:
                sinks.print(f"[bold red]early stop at iteration {state.iteration}:[/] {stop_reason}")
        state.wait_for_checkpoint()  # the run is finished when its last checkpoint is on disk
        status = "stopped" if stop_reason else "finished"
    except KeyboardInterrupt as interrupt:
        status, stop_reason = "stopped", "interrupted"
        state.wait_for_checkpoint(raise_error=False)  # the hint names the checkpoint a write under way is landing
        interrupt.resume_hint = resume_hint(run_dir)  # the CLI's "interrupted" line says how to go on
        raise
    finally:
        state.wait_for_checkpoint(raise_error=False)  # after an error or Ctrl-C: a write under way still lands
        torch.use_deterministic_algorithms(previous)
        sinks.close()
        final = {k: v for k, v in sinks.latest.items() if isinstance(v, int | float)}
        summary.update(
            status=status,
            stop_reason=stop_reason,
            final=final,
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
        )
    return RunResult(run_dir, state.iteration, stop_reason, final)


def run_iteration(
    policy, learner, preset, config: Config, state: TrainState, run_dir: Path, sinks: Sinks | None = None
):
    """One iteration up to its logs; returns its metrics and a stop reason (or None). :func:`commit` writes
    the metrics line and then the checkpoint. ``sinks`` draws the rollout, scoring and validation bars (none
    without it)."""
    iteration, seed, timer = state.iteration, iteration_seed(config, state.iteration), Timer()
    P, K = config.rollout.prompts_per_iteration, config.rollout.group_size
    diagnosed = config.diagnostics.enabled and is_scheduled(iteration, config.diagnostics.every)
    keep = getattr(policy, "keep_rollout_caches", None) if diagnosed else None  # the scoring reuses them
    with keep() if keep is not None else nullcontext():
        with timer("rollout"), _work(sinks, "rollout", "episode turns") as progress:
            episodes, refills = stages.collect(policy, config, iteration, sampling_seed=seed, progress=progress)
        returns = stages.group_returns(episodes, P, K)  # (P, K)
        turns = credit.turn_table(episodes, P, K)  # per-turn rewards and state keys, (P, K, U)
        metrics = stages.rollout_metrics(episodes, config.rollout.wording_regex)
        if config.rollout.wording_bonus_ramp:
            metrics["rollout/wording_bonus"] = stages.wording_bonus(config.rollout, iteration)
        metrics["rollout/refill_rounds"] = float(refills)
        if diagnosed:
            with timer("scoring"), _work(sinks, "scoring", "tokens") as progress:
                metrics |= run_diagnostics(
                    policy,
                    episodes,
                    config.diagnostics,
                    state.diagnostics,
                    generator=torch.Generator().manual_seed(seed),
                    progress=progress,
                    sample_temperature=config.rollout.temperature,
                    format_reasoning=EXAMPLE_REASONINGS,  # one no_reasoning rule wherever the diagnostics run
                )
    with timer("filter"):
        turn_scores, turn_metrics = credit.turn_signal(preset, turns, returns, config.filter.statistic)
        selection, rows = stages.select(returns, config, turn_scores)
        labels = label_groups(episodes, returns, success_threshold=config.filter.success_threshold)
    metrics |= {f"filter/{k}": v for k, v in (selection.metrics | label_counts(labels) | turn_metrics).items()}
    stop = after_selection(
        state.early_stop,
        config.trainer.early_stop,
        empty=selection.empty,
        spread=selection.metrics["spread_mean_before"],
    )
    metrics["filter/empty_streak"] = float(state.early_stop.empty_streak)
    kept, batch = stages.kept_batch(episodes, rows, policy.pad_token_id)
    if batch is not None:
        metrics["filter/kept_trajectories"] = float(batch.num_rows)
        state.wait_for_checkpoint()  # the last checkpoint holds the weights the update is about to change
        with timer("update"):
            metrics |= train_on(batch, kept, (returns, turns), learner, preset, config, state, seed, timer)
    save_rollouts(run_dir, config, iteration, episodes)
    log_groups(run_dir, iteration, episodes, returns, selection, labels)
    if is_due(iteration, config.validation.every, config):
        with timer("validation"), _work(sinks, "validation", "episode turns") as progress:
            val = validate(policy, config, progress=progress)
        metrics |= val
        stop = stop or after_validation(state.early_stop, config.trainer.early_stop, success=val["val/success"])
    return _with_timing(metrics, timer, episodes, batch, config.algorithm.ppo_epochs), stop


def train_on(batch, kept, outcomes, learner, preset, config: Config, state, seed: int, timer) -> dict:
    """Advantages by ``algorithm.credit`` and the optimiser steps on the kept batch (plus the gradient
    decomposition, on the same advantages, when scheduled); ``outcomes`` = ((P, K) returns, turn table)."""
    returns, turns = outcomes
    advantages, targets, old_values = credit.advantages(preset, batch, returns, kept, learner, turns)
    scale = stages.LOSS_SCALES[config.algorithm.loss_scaling](batch.num_rows / returns.numel())
    old, weights, mismatch = behaviour_logprobs(learner, batch, config.algorithm, state.iteration)
    inputs = UpdateInputs(
        batch,
        advantages,
        targets,
        old_values,
        old,
        stages.reference_logprobs(learner, batch),
        loss_scale=scale,
        rollout_weights=weights,
        measure_mismatch=measured_in_update(learner, config.algorithm, state.iteration),
    )
    metrics = (
        mismatch
        | stages.advantage_metrics(advantages, batch)
        | credit.credit_metrics(advantages, batch)
        | {
            "train/loss_scale": scale,
            "train/lr": config.algorithm.actor_lr,
        }
    )
    every = config.diagnostics.gradient_every
    if every > 0 and (state.iteration == 1 or state.iteration % every == 0):
        from mirl.diagnostics.gradients import gradient_decomposition

        spreads = group_spread(returns)[batch.group_ids]  # (B,): each row's group reward spread (0 when K = 1)
        with timer("gradients"):
            metrics |= gradient_decomposition(
                learner.policy,
                batch,
                advantages,
                spreads,
                preset,
                buckets=config.diagnostics.gradient_buckets,
                ref_logprobs=inputs.ref_logprobs,
                micro_batch_size=config.algorithm.micro_batch_size,
                temperature=learner.temperature,
            )
    return metrics | update(learner, inputs, preset, config.algorithm, torch.Generator().manual_seed(seed))


def say_warnings(watches, iteration: int, metrics: dict, sinks: Sinks, summary: RunSummary) -> None:
    """Print each watch's warning once per run, resumes included (a busy machine, :mod:`mirl.trainer.pace`; a
    filter keeping nearly every group, :mod:`mirl.trainer.filter_watch`), and keep it in summary.json's warnings
    with the watch's name in ``warned_by``."""
    for watch in watches:
        name = type(watch).__name__
        if name in summary.data.get("warned_by", []):
            continue
        message = watch.check(iteration, metrics)
        if message:
            sinks.print(f"warning: {message}")
            summary.update(
                warnings=[*summary.data.get("warnings", []), message],
                warned_by=[*summary.data.get("warned_by", []), name],
            )


def _work(sinks: Sinks | None, label: str, unit: str):
    """``sinks.work(label, unit)``, or a block that yields None (no bar) without sinks."""
    return sinks.work(label, unit) if sinks is not None else nullcontext()


def _with_timing(metrics: dict, timer: Timer, episodes, batch, epochs: int) -> dict:
    metrics |= timer.metrics()
    metrics["time/iteration"] = sum(timer.seconds.values())
    sampled = sum(len(t.response_ids) for e in episodes for t in e.turns)
    metrics["perf/rollout_tokens_per_s"] = sampled / max(timer.seconds["rollout"], 1e-9)
    if batch is not None:
        trained = int(batch.attention_mask.sum()) * epochs
        metrics["perf/update_tokens_per_s"] = trained / max(timer.seconds["update"], 1e-9)
    metrics["perf/peak_memory_gb"] = peak_memory_gb()
    return metrics
