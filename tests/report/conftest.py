"""Synthetic run directories in the trainer's format, with the trends of a run sliding into template collapse.

``write_run`` writes config.yaml, metrics.jsonl, groups.jsonl, rollouts/ and summary.json. The story the
numbers tell: MI-Est and retrieval accuracy decay towards 0 and chance while H(Z|X) and token entropy stay flat,
reasoning gets shorter, format validity stays high, success rises then plateaus. ``omit`` drops whole files
(``config``, ``metrics``, ``groups``, ``rollouts``, ``summary``) or metric families (``diag``, ``val``,
``grad``, ``filter``), to exercise the missing-data notes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

SCOPES = {"first_turn": 8, "trajectory": 64}  # scope -> N columns
NASTY = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _config(envs, groups: int, samples: int, iterations: int) -> dict:
    return {
        "model": {"name": "tiny-test-model", "device": "cpu"},
        "envs": [{"name": env, "weight": 1.0, "options": {}} for env in envs],
        "rollout": {"prompts_per_iteration": groups, "group_size": samples, "max_turns": 3, "max_new_tokens": 64},
        "algorithm": {"preset": "grpo", "actor_lr": 1e-6},
        "filter": {"strategy": "top_p", "value": 0.9, "mode": "linear", "statistic": "std", "include_zero": False},
        "diagnostics": {"enabled": True, "every": 5, "scopes": list(SCOPES), "gradient_every": 10},
        "validation": {"every": 10},
        "trainer": {"iterations": iterations, "seed": 0},
    }


def _diag(t: float, rng: np.random.Generator) -> dict:
    out = {}
    for scope, columns in SCOPES.items():
        mi = 0.6 * math.exp(-3.0 * t) + 0.01 * rng.normal()
        cond = 1.2 + 0.03 * rng.normal()  # flat: entropy hides the collapse
        chance = 1.0 / columns
        retrieval = chance + (0.85 - chance) * math.exp(-3.0 * t)
        base = f"diag/{scope}/est"
        out |= {
            f"{base}/mi_estimate": mi,
            f"{base}/mi_upper_bound": math.log(columns),
            f"{base}/conditional_entropy": cond,
            f"{base}/reasoning_entropy": cond + mi,
            f"{base}/mi_zscore_ema": mi / 0.15,
            f"{base}/retrieval_acc": retrieval,
            f"{base}/retrieval_chance": chance,
            f"{base}/retrieval_above_chance": retrieval - chance,
            f"diag/{scope}/columns": columns,
            f"diag/{scope}/pairs": 64,
            f"diag/{scope}/sample_temperature": 1.0,
            # labels as a collapsing run logs them (the trainer's rule is tested in tests/diagnostics)
            f"diag/{scope}/regime": "diverse_grounded" if t < 0.5 else "template_collapse",
        }
    return out


def _grad() -> dict:
    out = {}
    for index, bucket in enumerate(["b0", "b1", "b2", "b3", "b4", "b5", "all"]):
        spread = 0.1 * index if bucket != "all" else 0.25
        norms = {"task": 0.05 + 0.3 * index, "entropy": 0.3, "kl": 0.02}
        for component, norm in norms.items():
            out[f"grad/{bucket}/{component}/norm"] = norm
            out[f"grad/{bucket}/{component}/norm_per_token"] = norm / 100
        out[f"grad/{bucket}/spread_mean"] = spread
    return out


def _metrics_line(iteration: int, total: int, envs, rng: np.random.Generator, omit) -> dict:
    t = iteration / total
    success = 0.2 + 0.4 * (1 - math.exp(-4 * t)) + 0.05 * rng.normal()
    line = {"iteration": iteration, "time": 1_700_000_000.0 + 3.0 * iteration}
    line |= {
        "rollout/success": success,
        "rollout/return_mean": success - 0.05,
        "train/entropy": 0.9 + 0.02 * rng.normal(),
        "train/optimizer_steps": 1.0,
    }
    for offset, env in enumerate(envs):
        line |= {f"rollout/success/{env}": success - 0.1 * offset, f"rollout/return/{env}": success - 0.1 * offset}
    line |= {
        "rollout/reasoning_tokens_mean": 25 + 35 * math.exp(-2 * t),
        "rollout/response_tokens_mean": 40 + 35 * math.exp(-2 * t),
        "rollout/invalid_frac": 0.04 + 0.01 * rng.random(),
        "rollout/action_invalid_frac": 0.08,
        "rollout/valid_thinking_frac": 0.97,
    }
    if "mismatch" not in omit:
        line |= {
            "rollout/logp_diff_mean": 0.02 + 0.002 * rng.random(),
            "rollout/logp_diff_max": 0.6,
            "rollout/mismatch_kl": 0.05,
            "rollout/ratio_outside_frac": 0.001,
            "rollout/correction_frac": 0.002,
        }
    if "filter" not in omit:
        kept = min(1.0, max(0.125, 0.75 - 0.4 * t + 0.05 * rng.normal()))
        line |= {
            "filter/kept_ratio": kept,
            "filter/spread_mean_before": 0.3 * (1 - 0.5 * t),
            "filter/spread_mean_after": 0.42 * (1 - 0.5 * t),
            "filter/spread_ratio": 0.8 + 0.3 * t,
            "filter/groups_too_easy": round(3 * t),
            "filter/groups_too_hard": round(2 * (1 - t)),
            "filter/groups_too_coarse": 0,
            "filter/groups_mixed": 8 - round(3 * t) - round(2 * (1 - t)),
            "filter/groups_zero_spread_turn_signal": round(2 * t),
        }
    if "diag" not in omit and (iteration == 1 or iteration % 5 == 0):
        line |= _diag(t, rng)
    if "val" not in omit and iteration % 10 == 0:
        line |= {"val/success": success + 0.05, "val/return": success}
        line |= {f"val/success/{env}": success for env in envs}
    if "grad" not in omit and iteration % 10 == 0:
        line |= _grad()
    return line


def _groups_line(iteration: int, envs, groups: int, samples: int, rng: np.random.Generator) -> dict:
    p_success = rng.choice([0.0, 0.3, 0.6, 1.0], size=groups)
    returns = (rng.random((groups, samples)) < p_success[:, None]).astype(float)  # (P, K)
    spread = returns.std(axis=1, ddof=1)
    order = np.argsort(-spread, kind="stable")
    mass = np.cumsum(spread[order])
    count = int(np.searchsorted(mass, 0.9 * spread.sum() - 0.01) + 1) if spread.sum() > 0 else 0
    kept = np.zeros(groups, dtype=bool)
    kept[order[:count]] = True
    labels = [
        "mixed" if s > 0 else ("too_easy" if r[0] >= 1 else "too_hard") for s, r in zip(spread, returns, strict=True)
    ]
    return {
        "iteration": iteration,
        "envs": [envs[p % len(envs)] for p in range(groups)],
        "seeds": [1000 * iteration + p for p in range(groups)],
        "returns": returns.tolist(),
        "kept": kept.tolist(),
        "scores": spread.tolist(),
        "labels": labels,
    }


def _episode(iteration: int, group: int, sample: int, env: str, success: bool) -> dict:
    think = "The goal is down-right; the hole is left, so I move right." if sample else f"I ignore the board {NASTY}"
    turns = [
        {
            "context_ids": [1, 2, 3],
            "response_ids": [4, 5],
            "response_logprobs": [-0.5, -0.1],
            "response_text": f"<think>{think}</think><answer>Right || Down</answer>",
            "observation": "_ _ G\n_ P _\nO _ _",
            "reasoning_span": [1, 10],
            "actions": ["Right", "Down"],
            "reward": 1.0 if success else 0.0,
            "format_valid": True,
            "actions_valid": sample != 1,
            "finish_reason": "stop",
        }
    ]
    return {
        "env": env, "seed": 1000 * iteration + group, "options": {}, "group": group, "sample": sample,
        "iteration": iteration, "success": success, "end_reason": "success" if success else "max_turns",
        "return": 1.0 if success else 0.0, "turns": turns,
    }  # fmt: skip


def write_run(
    root: Path,
    name: str = "demo",
    *,
    iterations: int = 30,
    envs: tuple[str, ...] = ("frozenlake",),
    groups: int = 8,
    samples: int = 4,
    status: str = "finished",
    omit: tuple[str, ...] = (),
    truncated_tail: bool = False,
    seed: int = 0,
) -> Path:
    """A run directory ``root/name`` in the trainer's format; see the module docstring."""
    rng = np.random.default_rng(seed)
    run = root / name
    run.mkdir(parents=True)
    if "config" not in omit:
        (run / "config.yaml").write_text(yaml.safe_dump(_config(envs, groups, samples, iterations)))
    lines = [_metrics_line(i, iterations, envs, rng, omit) for i in range(1, iterations + 1)]
    if "metrics" not in omit:
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (run / "metrics.jsonl").write_text(text + ('{"iteration": 999, "rollout/succ' if truncated_tail else ""))
    if "groups" not in omit:
        records = [_groups_line(i, envs, groups, samples, rng) for i in range(1, iterations + 1)]
        (run / "groups.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if "rollouts" not in omit:
        (run / "rollouts").mkdir()
        for iteration in sorted({1, *range(10, iterations + 1, 10)}):
            episodes = [_episode(iteration, g, k, envs[0], (g + k) % 2 == 0) for g in range(2) for k in range(samples)]
            path = run / "rollouts" / f"iteration_{iteration:06d}.jsonl"
            path.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    if "summary" not in omit:
        summary = {
            "name": name, "status": status, "stop_reason": "reward-spread collapse" if status == "stopped" else None,
            "iterations_done": iterations, "iterations_planned": iterations if status == "finished" else 2 * iterations,
            "started_at": "2026-04-01T10:00:00", "finished_at": None if status == "running" else "2026-04-01T10:30:00",
            "wall_time_s": 3.0 * iterations, "model": "tiny-test-model", "device": "cpu",
            "hardware": {"cpu": "Test CPU", "cores": 2, "memory_gb": 8.0, "gpu": None}, "mirl_version": "0.1.0",
            "final": {"rollout/success": lines[-1]["rollout/success"]} if status == "finished" else {},
        }  # fmt: skip
        (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.fixture
def make_run(tmp_path):
    """``make_run(name, **options)`` -> Path of a synthetic run directory under tmp_path/runs."""
    return lambda name="demo", **options: write_run(tmp_path / "runs", name, **options)


@pytest.fixture(scope="session")
def full_report(tmp_path_factory):
    """One complete 20-iteration, two-env run and its report, shared by tests that only read them.

    Returns ``(run_dir, ReportResult, html_text)``.
    """
    from mirl.report import build_report

    run = write_run(tmp_path_factory.mktemp("runs"), "full", iterations=20, envs=("frozenlake", "sokoban"))
    result = build_report(run)
    return run, result, result.html_path.read_text()


def write_vision_run(
    root: Path, name: str = "vision", *, turns: int = 3, modality: str | None = None, omit: tuple[str, ...] = ()
) -> Path:
    """A run directory whose saved episodes played image-rendered Sokoban (``render=both``): each turn lists the
    ids of its boards, stored as ``rollouts/images/<id>.png`` by the env's own renderer. Config, metrics and
    summary come from :func:`write_run` (2 iterations; ``omit`` as there, e.g. ``("metrics",)`` for no plots)."""
    from mirl.envs import make
    from mirl.envs.images import image_id, png_bytes

    run = write_run(root, name, iterations=2, envs=("sokoban",), omit=omit)
    if modality is not None:
        config = yaml.safe_load((run / "config.yaml").read_text())
        (run / "config.yaml").write_text(yaml.safe_dump(config | {"model": config["model"] | {"modality": modality}}))
    images = run / "rollouts" / "images"
    images.mkdir()
    for path in sorted((run / "rollouts").glob("iteration_*.jsonl")):
        episodes = [json.loads(line) for line in path.read_text().splitlines()]
        for number, episode in enumerate(episodes):
            env = make("sokoban", render="both")
            observation, info = env.reset(seed=number)
            episode["turns"] = []
            for action in ["Up", "Left", "Down", "Right"][:turns]:
                ids = [image_id(image) for image in info["images"]]
                for ident, image in zip(ids, info["images"], strict=True):
                    (images / f"{ident}.png").write_bytes(png_bytes(image))
                reply = f"<think>I look at the board.</think><answer>{action}</answer>"
                episode["turns"].append({"observation": observation, "images": ids, "response_text": reply})
                observation, _, _, _, info = env.step(action)
        path.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    return run
