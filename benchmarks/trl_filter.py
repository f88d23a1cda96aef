"""SNRFilterGRPOTrainer's update time against the kept share, at equal generation, in one run.

    .venv-trl/bin/python benchmarks/trl_filter.py              # 8 groups x 4 rows, 3 interleaved steps each
    .venv-trl/bin/python benchmarks/trl_filter.py --rounds 5

A scripted ``rollout_func`` returns the same batch every step (8 prompt groups x K = 4 rows, 32 prompt and 96
completion tokens per row, rewards whose spread ranks the groups), so generation costs the same in every setting
and the optimizer step is what differs. ``filter_strategy="top_k_abs"`` keeps 8, 6, 4 or 2 groups; plain
``GRPOTrainer`` on the same batch is the reference. The model is a random 4-layer, 256-wide Llama built
in-process; micro-batches of 4 rows (8 per generation batch), ``loss_type="dapo"``. The time is TRL's optimizer
step (the generation batch and every micro-batch's forward and backward pass) as seen by a callback, median over
the rounds; the workers take turns (``_interleave.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from _interleave import interleave
from peers import turn_taking

GROUPS, K, PROMPT, COMPLETION = 8, 4, 32, 96
SETTINGS = {"GRPOTrainer": 8, "kept 8/8": 8, "kept 6/8": 6, "kept 4/8": 4, "kept 2/8": 2}


def _rollout(tokenizer):
    """The same rows on every call: prompt ``g<p>`` has spread (p + 1) / GROUPS, so top_k_abs keeps the last ones."""

    def rollout(prompts, trainer):
        seen: dict[str, int] = {}
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "reward": []}
        for key in prompts:
            k, p = seen.get(key, 0), int(key[1:])
            seen[key] = k + 1
            out["prompt_ids"].append([50 + (p + j) % 40 for j in range(PROMPT)])
            out["completion_ids"].append([100 + (7 * p + 3 * k + j) % 150 for j in range(COMPLETION - 1)])
            out["completion_ids"][-1].append(tokenizer.eos_token_id)
            out["logprobs"].append([0.0] * COMPLETION)
            out["reward"].append((p + 1) / GROUPS * (k % 2))
        return out

    return rollout


def worker(name: str, out: str, rounds: int) -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl
    from datasets import Dataset

    from mirl.integrations.trl import SNRFilterGRPOConfig, SNRFilterGRPOTrainer
    from mirl.policy.tiny import tiny_model, tiny_tokenizer

    common = dict(
        output_dir=out, per_device_train_batch_size=4, gradient_accumulation_steps=GROUPS * K // 4, num_generations=K,
        max_steps=rounds, learning_rate=1e-5, loss_type="dapo", beta=0.0, bf16=False, use_cpu=True, report_to=[],
        logging_steps=1, save_strategy="no", seed=0, disable_tqdm=True, max_completion_length=COMPLETION,
    )  # fmt: skip
    plain = name == "GRPOTrainer"
    args = trl.GRPOConfig(**common) if plain else SNRFilterGRPOConfig(
        **common, filter_strategy="top_k_abs", filter_value=SETTINGS[name]
    )  # fmt: skip
    tokenizer = tiny_tokenizer()
    trainer = (trl.GRPOTrainer if plain else SNRFilterGRPOTrainer)(
        model=tiny_model(hidden_size=256, num_layers=4, num_heads=4),
        reward_funcs=lambda completions, reward, **kwargs: list(reward),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"g{p}" for p in range(GROUPS)]}),
        processing_class=tokenizer,
        rollout_func=_rollout(tokenizer),
        callbacks=[turn_taking(lambda seconds, state: {"step_s": seconds})],
    )
    trainer.train()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="optimizer steps per setting (the median is printed)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.out, args.rounds)
        return
    if args.rounds < 1:
        sys.exit(f"trl_filter.py: --rounds must be >= 1, got {args.rounds}")
    with tempfile.TemporaryDirectory() as scratch:
        settings = {name: ["--rounds", str(args.rounds), "--out", f"{scratch}/{i}"] for i, name in enumerate(SETTINGS)}
        results = interleave(__file__, settings, args.rounds)
    base = statistics.median(line["step_s"] for line in results["GRPOTrainer"])
    print(f"optimizer step over {GROUPS} groups x {K} rows at equal generation; medians over {args.rounds} rounds")
    print(f"{'':16s}{'kept share':>12s}{'step_s':>10s}{'ratio':>8s}{'peak_gb':>10s}")
    for name, lines in results.items():
        step = statistics.median(line["step_s"] for line in lines)
        share = SETTINGS[name] / GROUPS
        peak = max(line["peak_gb"] for line in lines)
        print(f"{name:16s}{share:12.2f}{step:10.3f}{step / base:8.3f}{peak:10.3f}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
