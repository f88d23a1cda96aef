"""Exploratory, not pre-registered: where the turn-level signal of tied groups comes from.

    python studies/credit/depth.py studies/runs/credit --output studies/results/credit/depth.md

A step group pools the turns of a prompt group that start from one env state, at any turn index. On Sokoban a turn
whose action is invalid leaves the state unchanged, so a sample that never moves visits the start state at every
turn; with the -0.1 step cost its returns-to-go still differ by depth (G_0 = -0.1 (1 + g + g^2 + g^3), G_3 = -0.1),
and the step group carries "signal" that says nothing about which reply was better. This script splits the tied
groups of each run's rollouts (episode returns all equal) into:

- with step signal: some step group (same state key) holds returns-to-go that differ (what the registered Z counts
  for step groups);
- with same-depth signal: some (state key, turn index) pair holds returns-to-go that differ, i.e. two samples in
  the same state at the same depth did differently; signal that depth alone cannot explain.

It also counts the turns followed by a turn in the same state (an action that left the state unchanged). It reads
the rollout files (not committed: the run directory holds them), so it runs where the sweep ran; its output is
committed.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

import torch

from mirl.algorithms import discounted_returns
from mirl.report.rundir import read_episodes

GAMMA = 0.95  # the spec's credit_gamma
EPS = 1e-6


def returns_to_go(rewards: list[float], gamma: float = GAMMA) -> list[float]:
    """One episode's G_u = sum_{j >= u} gamma^(j - u) r_j, from the estimators' own ``discounted_returns``."""
    if not rewards:
        return []
    r = torch.tensor([[rewards]], dtype=torch.float64)  # (1, 1, U)
    return discounted_returns(r, torch.ones_like(r, dtype=torch.bool), gamma)[0, 0].tolist()


def _spread(values: list[float]) -> bool:
    return len(values) > 1 and max(values) - min(values) > EPS


def group_signal(episodes: list[dict]) -> tuple[bool, bool]:
    """(step signal, same-depth signal) of one prompt group's episodes (module docstring)."""
    by_state, by_state_depth = defaultdict(list), defaultdict(list)
    for episode in episodes:
        turns = episode.get("turns") or []
        togo = returns_to_go([float(t.get("reward", 0.0)) for t in turns])
        for u, (turn, g) in enumerate(zip(turns, togo, strict=True)):
            key = turn.get("state_key")
            if key is None:
                continue
            by_state[key].append(g)
            by_state_depth[(key, u)].append(g)
    return any(map(_spread, by_state.values())), any(map(_spread, by_state_depth.values()))


def run_counts(run_dir: Path) -> dict:
    counts = {"tied": 0, "step": 0, "same_depth": 0, "turns": 0, "unchanged": 0}
    for path in sorted((run_dir / "rollouts").glob("iteration_*.jsonl")):
        groups = defaultdict(list)
        for episode in read_episodes(path, limit=4096):
            groups[episode.get("group")].append(episode)
            keys = [t.get("state_key") for t in episode.get("turns") or []]
            counts["turns"] += len(keys)
            counts["unchanged"] += sum(a == b for a, b in zip(keys[:-1], keys[1:], strict=True))
        for episodes in groups.values():
            returns = [float(e.get("return", math.nan)) for e in episodes]
            if len(episodes) < 2 or _spread(returns) or not all(map(math.isfinite, returns)):
                continue
            step, same_depth = group_signal(episodes)
            counts["tied"] += 1
            counts["step"] += step
            counts["same_depth"] += same_depth
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = ["| run | tied groups | with step signal | with same-depth signal | turns | next turn in the same state |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for run_dir in sorted(p for p in (args.sweep_dir / "runs").iterdir() if p.is_dir()):
        c = run_counts(run_dir)
        lines.append(f"| {run_dir.name} | {c['tied']} | {c['step']} | {c['same_depth']} | {c['turns']} | "
                     f"{c['unchanged']} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
