"""Run bookkeeping the loop delegates to: the run directory, timing, checkpoints, saved rollouts, groups."""

from __future__ import annotations

import resource
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mirl.config import Config, save_resolved
from mirl.diagnostics.run import DiagnosticsState
from mirl.rollout import write_episodes
from mirl.trainer.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from mirl.trainer.early_stop import EarlyStopState
from mirl.trainer.rundir import append_jsonl, truncate_jsonl
from mirl.trainer.update import Learner


@dataclass
class TrainState:
    """What a checkpoint restores besides the weights and optimisers."""

    iteration: int = 0
    diagnostics: DiagnosticsState = field(default_factory=DiagnosticsState)
    early_stop: EarlyStopState = field(default_factory=EarlyStopState)


class Timer:
    """Wall time per stage, reported as ``time/<stage>`` seconds."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"time/{stage}": round(value, 4) for stage, value in self.seconds.items()}


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
    if run_dir.exists() and not resume and any(run_dir.glob("metrics.jsonl")):
        raise FileExistsError(
            f"run directory {str(run_dir)!r} already holds a run; resume it with `mirl train --resume {run_dir}` "
            "or choose another trainer.name"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "rollouts").mkdir(exist_ok=True)
    save_resolved(config, run_dir)


def save(run_dir: Path, config: Config, learner: Learner, state: TrainState) -> None:
    payload = {
        "iteration": state.iteration,
        "policy": learner.policy.model.state_dict(),
        "optimizer": learner.optimizer.state_dict(),
        "critic": learner.critic.state_dict() if learner.critic is not None else None,
        "critic_optimizer": learner.critic_optimizer.state_dict() if learner.critic_optimizer else None,
        "diagnostics": state.diagnostics.state_dict(),
        "early_stop": state.early_stop.state_dict(),
        "rng": rng_state(),
    }
    save_checkpoint(run_dir / "checkpoints", state.iteration, payload, keep=config.trainer.keep_checkpoints)


def restore(run_dir: Path, learner: Learner, state: TrainState) -> bool:
    """Load the newest complete checkpoint; cut the logs back to it. False when there is none."""
    path = latest_checkpoint(run_dir / "checkpoints")
    if path is None:
        return False
    payload = load_checkpoint(path)
    learner.policy.model.load_state_dict(payload["policy"])
    learner.optimizer.load_state_dict(payload["optimizer"])
    if learner.critic is not None:
        learner.critic.load_state_dict(payload["critic"])
        learner.critic_optimizer.load_state_dict(payload["critic_optimizer"])
    state.iteration = payload["iteration"]
    state.diagnostics.load_state_dict(payload["diagnostics"])
    state.early_stop.load_state_dict(payload["early_stop"])
    set_rng_state(payload["rng"])
    for log in ("metrics.jsonl", "groups.jsonl"):
        truncate_jsonl(run_dir / log, state.iteration)
    for saved in (run_dir / "rollouts").glob("iteration_*.jsonl"):
        if int(saved.stem.split("_")[1]) > state.iteration:
            saved.unlink()
    return True


def save_rollouts(run_dir: Path, config: Config, iteration: int, episodes) -> None:
    mode = config.logging.save_rollouts
    if mode == "none":
        return
    if mode == "sample":
        episodes = [e for e in episodes if e.group < config.logging.rollout_sample_groups]
    write_episodes(run_dir / "rollouts" / f"iteration_{iteration:06d}.jsonl", episodes, iteration=iteration)


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

    path = latest_checkpoint(Path(run_dir) / "checkpoints")
    if path is None:
        raise FileNotFoundError(f"no complete checkpoint under {run_dir}/checkpoints; was the run saved?")
    policy = load_policy(config)
    if config.model.lora_rank > 0:
        policy.model = _lora(policy.model, config)
    policy.model.load_state_dict(load_checkpoint(path)["policy"])
    if config.model.lora_rank > 0:
        policy.model = policy.model.merge_and_unload()
    return policy.eval()
