"""Run bookkeeping the loop delegates to: the run directory, timing, checkpoints, saved rollouts, groups."""

from __future__ import annotations

import copy
import ctypes
import json
import resource
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mirl.config import Config, to_yaml
from mirl.diagnostics.run import DiagnosticsState
from mirl.rollout.io import IMAGES_DIR, episode_to_record, write_images
from mirl.safeio import append_jsonl, atomic_write_text, ensure_dir
from mirl.trainer.checkpoint import (
    MISFIT,
    CheckpointError,
    load_latest,
    misfit_error,
    remove_incomplete,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from mirl.trainer.early_stop import EarlyStopState
from mirl.trainer.rundir import check_outputs, clean_leftovers, repair_jsonl, repair_rollouts
from mirl.trainer.update import Learner


class CheckpointWriter:
    """Writes a checkpoint in a thread while the run goes on.

    After an iteration's checkpoint starts, the next iteration's rollout, scoring and filter read the weights and
    optimiser state but never change them, so the write (seconds of serialising and fsyncing on a CPU machine)
    overlaps them instead of stalling the run. The payload holds the live parameter and optimiser tensors, not
    copies: :meth:`wait` must come before anything changes them (the update), before the next write, and before
    the run ends. A write that failed raises its error there.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, write) -> None:
        """Run ``write()`` in a thread, after the write under way (if any) has ended."""
        self.wait()

        def run() -> None:
            try:
                write()
            except BaseException as error:  # raised again by wait(), in the training thread
                self._error = error

        self._thread = threading.Thread(target=run, name="mirl-checkpoint")
        self._thread.start()

    def wait(self, *, raise_error: bool = True) -> float:
        """Block until the write under way has ended; returns the seconds waited."""
        if self._thread is None:
            return 0.0
        start = time.perf_counter()
        self._thread.join()
        self._thread = None
        error, self._error = self._error, None
        if error is not None and raise_error:
            raise error
        return time.perf_counter() - start


@dataclass
class TrainState:
    """What a checkpoint restores besides the weights and optimisers (and the checkpoint being written)."""

    iteration: int = 0
    diagnostics: DiagnosticsState = field(default_factory=DiagnosticsState)
    early_stop: EarlyStopState = field(default_factory=EarlyStopState)
    # the run's time spent on the last checkpoint (starting its write, waiting for it), logged on a later line
    checkpoint_seconds: float | None = None
    writer: CheckpointWriter = field(default_factory=CheckpointWriter)

    def wait_for_checkpoint(self, *, raise_error: bool = True) -> None:
        """Wait for the checkpoint being written (before the update changes the weights, and at the end)."""
        waited = self.writer.wait(raise_error=raise_error)
        if waited and self.checkpoint_seconds is not None:
            self.checkpoint_seconds += waited


class Timer:
    """Wall time per stage, reported as ``time/<stage>`` seconds; freed heap memory goes back to the system after
    each stage (:func:`release_free_memory`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            release_free_memory()
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"time/{stage}": round(value, 4) for stage, value in self.seconds.items()}


def release_free_memory() -> None:
    """Return freed heap pages to the system (glibc ``malloc_trim``), so a stage does not start with the memory
    the previous one freed still resident: the rollout's caches, the update's activations and gradients are freed
    in pieces the allocator otherwise keeps. A no-op where the C library has no such call."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (AttributeError, OSError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None  # resolved on first use: the C library's malloc_trim, or False


def peak_memory_gb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**30
    kilobytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kilobytes / (2**30 if sys.platform == "darwin" else 2**20)


def run_directory(config: Config) -> Path:
    name = config.trainer.name or "{}-{}-{}".format(
        "+".join(entry.name for entry in config.envs), config.algorithm.preset, time.strftime("%Y%m%d-%H%M%S")
    )
    return Path(config.trainer.output_dir) / name


def prepare(run_dir: Path, config: Config, resume: bool) -> None:
    """Create (or reopen) the run directory: refuse planted links, clear debris of killed writes, save the config."""
    check_outputs(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if not resume and (metrics.exists() or metrics.is_symlink()):
        raise FileExistsError(
            f"run directory {str(run_dir)!r} already holds a run; resume it with `mirl train --resume {run_dir}` "
            "or choose another trainer.name"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    clean_leftovers(run_dir)
    remove_incomplete(run_dir / "checkpoints")
    ensure_dir(run_dir / "rollouts", run_dir)
    if not resume:  # debris of an attempt killed before its first metrics line
        for log in ("metrics.jsonl", "groups.jsonl"):
            repair_jsonl(run_dir / log, 0)
        repair_rollouts(run_dir / "rollouts", 0)
    atomic_write_text(run_dir / "config.yaml", to_yaml(config))


def is_due(iteration: int, every: int, config: Config) -> bool:
    """Every ``every`` iterations and at the last one; never when ``every`` < 0."""
    last = iteration == config.trainer.iterations
    return every >= 0 and (last or (every > 0 and iteration % every == 0))


def commit(run_dir: Path, config: Config, learner: Learner, state: TrainState, sinks, metrics: dict, stop) -> None:
    """Finish an iteration: its metrics line first, then its checkpoint (when due).

    The order is what makes a kill harmless: the logs of an iteration are complete (fsynced) before the
    checkpoint that resume starts from exists, and resume cuts every log back to that checkpoint. A line whose
    checkpoint was never written is dropped and its iteration run again, deterministically.
    """
    if state.checkpoint_seconds is not None:
        metrics["time/checkpoint"] = round(state.checkpoint_seconds, 4)
        state.checkpoint_seconds = None
    sinks.log(state.iteration, metrics)
    if is_due(state.iteration, config.trainer.checkpoint_every, config) or stop:
        start = time.perf_counter()
        save(run_dir, config, learner, state)
        state.checkpoint_seconds = time.perf_counter() - start


def save(run_dir: Path, config: Config, learner: Learner, state: TrainState) -> None:
    """Start writing the iteration's checkpoint (:class:`CheckpointWriter`); the small state is copied now."""
    payload = {
        "iteration": state.iteration,
        "policy": learner.policy.model.state_dict(),
        "optimizer": learner.optimizer.state_dict(),
        "critic": learner.critic.state_dict() if learner.critic is not None else None,
        "critic_optimizer": learner.critic_optimizer.state_dict() if learner.critic_optimizer else None,
        "diagnostics": copy.deepcopy(state.diagnostics.state_dict()),
        "early_stop": copy.deepcopy(state.early_stop.state_dict()),
        "rng": rng_state(),
    }
    directory, iteration, keep = run_dir / "checkpoints", state.iteration, config.trainer.keep_checkpoints
    state.writer.start(lambda: save_checkpoint(directory, iteration, payload, keep=keep))


def restore(run_dir: Path, learner: Learner, state: TrainState) -> bool:
    """Load the newest checkpoint that loads and cut every log back to it (to nothing when there is none, so
    the run starts again from iteration 0). False when there is no checkpoint."""
    found = load_latest(run_dir / "checkpoints")
    if found is not None:
        try:
            _load_payload(found[1], learner, state)
        except MISFIT as error:
            raise misfit_error(found[0], error) from None
    for log in ("metrics.jsonl", "groups.jsonl"):
        repair_jsonl(run_dir / log, state.iteration)
    repair_rollouts(run_dir / "rollouts", state.iteration)
    return found is not None


def _load_payload(payload: dict, learner: Learner, state: TrainState) -> None:
    learner.policy.model.load_state_dict(payload["policy"])
    learner.optimizer.load_state_dict(payload["optimizer"])
    if learner.critic is not None:
        learner.critic.load_state_dict(payload["critic"])
        learner.critic_optimizer.load_state_dict(payload["critic_optimizer"])
    state.iteration = payload["iteration"]
    state.diagnostics.load_state_dict(payload["diagnostics"])
    state.early_stop.load_state_dict(payload["early_stop"])
    set_rng_state(payload["rng"])


def save_rollouts(run_dir: Path, config: Config, iteration: int, episodes) -> None:
    mode = config.logging.save_rollouts
    if mode == "none":
        return
    if mode == "sample":
        episodes = [e for e in episodes if e.group < config.logging.rollout_sample_groups]
    write_images(run_dir / "rollouts" / IMAGES_DIR, episodes, root=run_dir)  # each image once, before its lines
    lines = [json.dumps(episode_to_record(e, iteration=iteration), ensure_ascii=False) + "\n" for e in episodes]
    rollouts = run_dir / "rollouts" / f"iteration_{iteration:06d}.jsonl"
    atomic_write_text(rollouts, "".join(lines), root=run_dir)  # whole, once


def log_groups(run_dir: Path, iteration: int, episodes, returns, selection, labels) -> None:
    P = returns.shape[0]
    firsts = {e.group: e for e in episodes if e.sample == 0}
    append_jsonl(
        run_dir / "groups.jsonl",
        {
            "iteration": iteration,
            "envs": [firsts[p].spec.env for p in range(P)],
            "seeds": [firsts[p].spec.seed for p in range(P)],
            "returns": returns.tolist(),
            "kept": selection.keep.tolist(),
            "scores": selection.scores.tolist(),
            "labels": list(labels),
        },
    )


def load_trained_policy(run_dir: Path, config: Config):
    """The policy of a run's newest checkpoint (LoRA adapters merged in), ready for generation."""
    from mirl.trainer.setup import _lora, load_policy

    found = load_latest(Path(run_dir) / "checkpoints")  # before the model: a refused checkpoint costs no load
    if found is None:
        raise CheckpointError(f"no complete checkpoint under {run_dir}/checkpoints; was the run saved?")
    policy = load_policy(config)
    if config.model.lora_rank > 0:
        policy.model = _lora(policy.model, config)
    try:
        policy.model.load_state_dict(found[1]["policy"])
    except MISFIT as error:
        raise misfit_error(found[0], error) from None
    if config.model.lora_rank > 0:
        policy.model = policy.model.merge_and_unload()
    return policy.eval()
