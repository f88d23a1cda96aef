"""Train the offline SmolLM2-135M-Instruct on mirl's FrozenLake with TRL's own GRPO loop, on CPU.

What mirl adds to a plain ``trl.GRPOTrainer`` run (docs/trl.md):

- ``SNRFilterGRPOTrainer`` + ``SNRFilterGRPOConfig``: SNR-Aware Filtering (linear top-p 0.9 on the in-group reward
  std) of every batch, set by the ``filter_*`` fields of the training arguments;
- ``MirlRollout`` + ``dataset``: FrozenLake played multi-turn with mirl's prompts and reply parser, env tokens
  masked out of the loss, the episode return as the reward;
- ``CollapseDiagnosticsCallback``: the ``diag/*`` MI proxies (MI-Est, retrieval@k vs chance, H(Z|X), H(Z), regime).

Run it in the TRL environment (``bash scripts/test-trl.sh`` builds ``.venv-trl``)::

    .venv-trl/bin/python examples/trl_frozenlake.py --steps 2 --output-dir /tmp/trl-frozenlake

On GPUs, with one of the accelerate configs TRL ships (``trl/accelerate_configs/``: multi_gpu, zero3, fsdp2)::

    CONFIGS=$(python -c 'import trl, pathlib; print(pathlib.Path(trl.__file__).parent / "accelerate_configs")')
    accelerate launch --config_file $CONFIGS/zero3.yaml --num_processes 2 \
        examples/trl_frozenlake.py --device cuda --steps 2

Each log line (TRL's stdout logger) holds TRL's own metrics plus ``filter/*`` and ``diag/*``.
"""

from __future__ import annotations

import argparse
import os

# the rollout settings of configs/quickstart.yaml: a 135M model needs the format example and T = 0.7; temperature,
# top-p and the reply length live in the GRPOConfig (TRL computes the training log-probs at its temperature)
ROLLOUT = {"max_turns": 2, "max_context_tokens": 1024, "format_example": True}
FROZENLAKE = {"success_rate": 1.0}  # no slips


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="hub id, directory, .gguf or the built-in")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps (one generation batch each)")
    parser.add_argument("--prompts", type=int, default=4, help="FrozenLake instances per step (P)")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per instance (K = num_generations)")
    parser.add_argument("--output-dir", default="runs/trl-frozenlake")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: bfloat16, one GPU a process")
    args = parser.parse_args(argv)
    for name, low in (("steps", 1), ("prompts", 1), ("group_size", 2)):
        if getattr(args, name) < low:
            parser.error(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16
    from mirl.integrations.trl import (
        CollapseDiagnosticsCallback,
        MirlRollout,
        SNRFilterGRPOConfig,
        SNRFilterGRPOTrainer,
        dataset,
        episode_return,
    )
    from mirl.policy.sources import load_model_and_tokenizer

    cpu = args.device == "cpu"
    # loaded on the CPU; the trainer places it (on a GPU per process under `accelerate launch`)
    model, tokenizer = load_model_and_tokenizer(args.model, dtype="float32" if cpu else "bfloat16", device="cpu")
    config = SNRFilterGRPOConfig(
        output_dir=args.output_dir,
        # one group per micro-batch, P micro-batches per optimizer step = one generation batch of P * K rows;
        # with activation checkpointing (TRL's default) this keeps the run within a few GB of memory
        per_device_train_batch_size=args.group_size,
        gradient_accumulation_steps=args.prompts,
        num_generations=args.group_size,
        max_steps=args.steps,
        learning_rate=1e-5,
        loss_type="dapo",  # token-sum over the global token count: the filter is exact (docs/trl.md)
        temperature=0.7,
        top_p=0.95,
        max_completion_length=64,  # tokens per reply
        filter_strategy="top_p",
        filter_value=0.9,
        beta=0.0,
        bf16=not cpu,
        use_cpu=cpu,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = SNRFilterGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=config,
        reward_funcs=episode_return,
        train_dataset=dataset("frozenlake", 64, env_options=FROZENLAKE),
        rollout_func=MirlRollout(ROLLOUT, env_options={"frozenlake": FROZENLAKE}),
    )
    trainer.add_callback(CollapseDiagnosticsCallback(trainer, {"every": 1, "num_pairs": 16}))
    trainer.train()
    for entry in trainer.state.log_history:
        if "loss" not in entry:
            continue
        picked = {k: v for k, v in entry.items() if k.startswith(("filter/", "diag/")) or k in ("loss", "reward")}
        print(f"step {entry['step']}: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(picked.items())))


if __name__ == "__main__":
    main()
