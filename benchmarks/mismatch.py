"""The sampler/trainer log-prob mismatch and what each rollout correction does with it, at the first update.

    python benchmarks/mismatch.py                                   # SmolLM2-135M, FrozenLake, 4 x 4 episodes
    python benchmarks/mismatch.py --model tiny --turns 1 --tokens 32

For each sampler dtype (float32 = the trainer's own, bfloat16 = a rounded copy of the same weights) one batch is
sampled; the trainer's float32 forward pass scores the same tokens. Printed per dtype: the ``rollout/*`` mismatch
metrics, then per correction mode the first update's PPO statistics on that batch (before any optimiser step, so
an on-policy update would show ratio 1 and nothing clipped) and the correction's weights.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from mirl.algorithms import get_preset  # noqa: E402
from mirl.config import AlgorithmConfig, Config, RolloutConfig  # noqa: E402
from mirl.rollout import collate, run_episodes  # noqa: E402
from mirl.trainer.mismatch import behaviour_logprobs  # noqa: E402
from mirl.trainer.mismatch import measure as measure_mismatch  # noqa: E402
from mirl.trainer.setup import build_learner  # noqa: E402
from mirl.trainer.update import UpdateInputs, accumulate_gradients  # noqa: E402
from mirl.types import EnvSpec  # noqa: E402

MODES = ("none", "token_tis", "sequence_mask")


def load(name: str, sampler_dtype: str):
    from mirl.policy import HFPolicy
    from mirl.policy.tiny import tiny_policy

    policy = tiny_policy(seed=3) if name == "tiny" else HFPolicy.load(name, device="cpu", dtype="float32")
    policy.sample_in(sampler_dtype)
    return policy


def measure(args, sampler_dtype: str) -> None:
    policy = load(args.model, sampler_dtype)
    rollout = RolloutConfig(max_turns=args.turns, max_new_tokens=args.tokens, temperature=1.0, format_example=True)
    specs = [EnvSpec("frozenlake", seed, {"success_rate": 1.0}) for seed in range(args.prompts)]
    episodes = run_episodes(policy, specs, args.group, rollout, sampling_seed=7)
    batch = collate(episodes, pad_id=policy.pad_token_id)
    preset = get_preset("grpo")
    tokens = int(batch.response_mask.sum())
    print(f"\nsampler {sampler_dtype}: {batch.num_rows} trajectories, {tokens} sampled tokens")
    for mode in MODES:
        config = Config(rollout=rollout, algorithm=AlgorithmConfig(rollout_correction=mode))
        learner = build_learner(policy, config, preset)
        algo = AlgorithmConfig(rollout_correction=mode, rollout_correction_cap=args.cap)
        old, weights, metrics = behaviour_logprobs(learner, batch, algo, iteration=1)
        if mode == "none":
            metrics = measure_mismatch(learner, batch)[
                1
            ]  # without a correction the update measures it; here on its own
            print("  " + ", ".join(f"{k} {v:.3g}" for k, v in metrics.items()))
        advantages = torch.where(batch.response_mask, 1.0, 0.0)  # (B, T)
        inputs = UpdateInputs(batch, advantages, None, None, old, None, rollout_weights=weights)
        stats = accumulate_gradients(learner, inputs, torch.arange(batch.num_rows), preset, 4).metrics()
        policy.model.zero_grad(set_to_none=True)
        shown = {k: stats[f"train/{k}"] for k in ("ratio_max", "clip_frac", "approx_kl")}
        shown |= {k.removeprefix("rollout/"): v for k, v in metrics.items() if "correction" in k}
        print(f"  {mode:>13}: " + ", ".join(f"{k} {v:.3g}" for k, v in shown.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help='a model name, or "tiny"')
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=48, help="max new tokens per turn")
    parser.add_argument("--cap", type=float, default=2.0, help="algorithm.rollout_correction_cap")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    for sampler_dtype in ("same", "bfloat16"):
        measure(args, sampler_dtype)


if __name__ == "__main__":
    main()
