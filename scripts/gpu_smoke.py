"""GPU smoke run (``bash scripts/gpu-smoke.sh``): the tiny model through ``mirl train`` and TRL's trainer on CUDA.

Offline: the model is built in-process (:func:`mirl.policy.tiny.tiny_qwen2_model`, tied embeddings, grouped-query
attention, q/k/v biases) and saved to a directory. Then:

1. ``mirl train`` (the command line, in a child process) on CUDA in bfloat16 for two iterations, with the MI
   diagnostics in both iterations and the SNR filter keeping the top half of the groups, so each iteration scores,
   filters and takes an optimiser step;
2. if ``trl`` imports, one step of mirl's ``SNRFilterGRPOTrainer`` on the same model in bfloat16, with the
   diagnostics callback.

Without a CUDA GPU it prints why it skipped and exits 0. ``MIRL_SMOKE_DEVICE=cpu`` runs the same sequence on the CPU
in float32 (what the tests do on a machine without a GPU). ``MIRL_SMOKE_DIR`` keeps the model and runs there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAKE = {"success_rate": 1.0}  # deterministic FrozenLake, as in the quickstart
# temperature 0.7 as in the quickstart: the tiny model's replies parse more often; TRL's GRPOConfig gets the same
ROLLOUT = {"max_turns": 1, "max_new_tokens": 16, "max_context_tokens": 512, "temperature": 0.7, "top_p": 1.0}
PROMPTS, GROUP = 4, 4


def say(message: str) -> None:
    print(f"gpu-smoke: {message}", flush=True)


def fail(message: str, status: int = 1) -> None:
    print(f"gpu-smoke: {message}", file=sys.stderr, flush=True)
    raise SystemExit(status)


def pick_device() -> tuple[str, str] | None:
    """(device, dtype) to run on, or None (after saying why) when there is no CUDA GPU and no override."""
    import torch

    forced = os.environ.get("MIRL_SMOKE_DEVICE", "")
    if forced == "cpu":
        return "cpu", "float32"
    if forced not in ("", "cuda"):
        fail(f"MIRL_SMOKE_DEVICE must be 'cuda' or 'cpu', got {forced!r}", status=2)
    if not torch.cuda.is_available():
        if forced == "cuda":
            fail("MIRL_SMOKE_DEVICE=cuda but torch sees no CUDA GPU", status=2)
        reason = "torch has no CUDA support" if torch.version.cuda is None else "torch sees no CUDA device"
        say(f"skipped: no CUDA GPU ({reason}, torch {torch.__version__}); nothing ran.")
        say("MIRL_SMOKE_DEVICE=cpu bash scripts/gpu-smoke.sh runs the same steps on the CPU in float32.")
        return None
    if not torch.cuda.is_bf16_supported():
        fail(f"{torch.cuda.get_device_name(0)} has no bfloat16 support; this smoke run is for bfloat16 GPUs")
    return "cuda", "bfloat16"


def teach_format(policy, steps: int = 40) -> float:
    """Supervised steps on FrozenLake's first prompt with ``W</think><answer>W</answer>`` replies, W a random move.

    A random model never closes ``<think>``, so the diagnostics would see no reasoning to score. Returns the last
    loss.
    """
    import torch

    from mirl.config import RolloutConfig
    from mirl.policy.scripted import ScriptedPolicy
    from mirl.rollout import run_episodes
    from mirl.types import EnvSpec

    tokenizer, words = policy.tokenizer, ("Up", "Down", "Left", "Right")
    recorder = ScriptedPolicy(tokenizer, lambda context: "Down</think><answer>Down</answer>")
    run_episodes(recorder, [EnvSpec("frozenlake", 0, {"success_rate": 1.0})], 1, RolloutConfig(**ROLLOUT))
    context = list(recorder.calls[0][0])
    model = policy.model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        picks = [words[i] for i in torch.randint(len(words), (8,), generator=generator)]
        replies = [tokenizer.encode(f"{w}</think><answer>{w}</answer>", add_special_tokens=False) for w in picks]
        width = max(map(len, replies))
        ids = torch.tensor([context + r + [tokenizer.pad_token_id] * (width - len(r)) for r in replies])
        labels = ids.clone()
        labels[:, : len(context)] = -100
        labels[ids == tokenizer.pad_token_id] = -100
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()


def build_model(directory: Path) -> str:
    """Save the tiny Qwen2 model, taught the reply format, and its tokenizer to ``directory``; a description."""
    from mirl.policy.tiny import tiny_policy

    policy = tiny_policy(arch="qwen2", hidden_size=256, num_heads=4, num_kv_heads=2, seed=1)
    loss = teach_format(policy)
    policy.save(directory)
    config = policy.model.config
    params = sum(p.numel() for p in policy.model.parameters())
    return (
        f"tiny Qwen2, {params / 1e6:.2f}M parameters, hidden {config.hidden_size}, {config.num_attention_heads} query "
        f"/ {config.num_key_value_heads} key-value heads, tied embeddings, taught the reply format (loss {loss:.3f})"
    )


def run_mirl_train(model_dir: Path, out: Path, device: str, dtype: str) -> dict:
    """``mirl train`` for two iterations in a child process; what its metrics say ran."""
    args = [
        f"model.name={model_dir}",
        f"model.device={device}",
        f"model.dtype={dtype}",
        "envs=[{name: frozenlake, options: {success_rate: 1.0}}]",
        f"rollout.prompts_per_iteration={PROMPTS}",
        f"rollout.group_size={GROUP}",
        *(f"rollout.{key}={value}" for key, value in ROLLOUT.items()),
        "filter.strategy=top_k",  # keeps the top half of the groups by reward spread, whatever the rewards
        "filter.value=0.5",
        "filter.include_zero=true",  # the tiny model's groups often have zero spread
        "diagnostics.every=1",
        "diagnostics.num_pairs=8",
        "algorithm.mini_batch_size=8",
        "validation.every=-1",
        "trainer.iterations=2",
        "trainer.checkpoint_every=0",
        "logging.progress=false",
        "logging.tensorboard=false",
        f"trainer.output_dir={out}",
        "trainer.name=smoke",
        "--no-report",
    ]
    start = time.perf_counter()
    status = subprocess.run([sys.executable, "-m", "mirl.cli", "train", *args]).returncode
    if status != 0:
        fail(f"mirl train exited with status {status} (its output is above)")
    seconds = time.perf_counter() - start
    lines = [json.loads(line) for line in (out / "smoke" / "metrics.jsonl").read_text().splitlines()]
    if [m["iteration"] for m in lines] != [1, 2]:
        fail(f"mirl train logged iterations {[m['iteration'] for m in lines]}, not [1, 2]")
    for m in lines:
        if m.get("train/optimizer_steps", 0) < 1 or not m.get("diag/first_turn/pairs"):
            fail(f"iteration {m['iteration']} took no optimiser step or scored no diagnostic pairs")
    return {"seconds": seconds, "metrics": lines}


def describe_train(result: dict) -> list[str]:
    rows = []
    for m in result["metrics"]:
        rows.append(
            f"  iteration {m['iteration']}: kept {m['filter/kept_count']:.0f} of {PROMPTS} groups, "
            f"{m['train/optimizer_steps']:.0f} optimiser step(s), policy_loss {m['train/policy_loss']:.4g}, "
            f"grad_norm {m['train/grad_norm']:.4g}, diagnostics on {m['diag/first_turn/pairs']:.0f} first-turn "
            f"pairs (MI-Est {m.get('diag/first_turn/est/mi_estimate', float('nan')):.4g}, "
            f"regime {m['diag/first_turn/regime']})"
        )
    return rows


def run_trl_step(model_dir: Path, out: Path, device: str, dtype: str) -> str:
    """One step of ``SNRFilterGRPOTrainer`` (filter and diagnostics on) on the tiny model; what it logged."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    from mirl.integrations.trl import (
        CollapseDiagnosticsCallback,
        MirlRollout,
        SNRFilterGRPOConfig,
        SNRFilterGRPOTrainer,
        dataset,
        episode_return,
    )
    from mirl.policy.sources import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(str(model_dir), dtype=dtype, device=device)
    config = SNRFilterGRPOConfig(
        filter_strategy="top_k",
        filter_value=0.5,
        filter_include_zero=True,
        output_dir=str(out),
        per_device_train_batch_size=GROUP,
        gradient_accumulation_steps=PROMPTS,
        num_generations=GROUP,
        max_completion_length=ROLLOUT["max_new_tokens"],
        temperature=ROLLOUT["temperature"],
        top_p=ROLLOUT["top_p"],
        max_steps=1,
        learning_rate=1e-5,
        loss_type="dapo",
        beta=0.0,
        bf16=dtype == "bfloat16",
        use_cpu=device == "cpu",
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
        train_dataset=dataset("frozenlake", 16, env_options=LAKE),
        rollout_func=MirlRollout(ROLLOUT, env_options={"frozenlake": LAKE}),
    )
    trainer.add_callback(CollapseDiagnosticsCallback(trainer, {"every": 1, "num_pairs": 8}))
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    if trainer.state.global_step != 1 or not logged:
        fail(f"TRL ran {trainer.state.global_step} steps and logged {len(logged)}, expected 1 and 1")
    entry = logged[-1]
    keys = ("loss", "reward", "filter/kept_ratio", "diag/first_turn/pairs", "diag/first_turn/est/mi_estimate")
    if "diag/first_turn/pairs" not in entry:
        fail(f"TRL's step logged no diagnostics: {sorted(entry)}")
    shown = ", ".join(f"{k}={entry[k]:.4g}" for k in keys if isinstance(entry.get(k), int | float))
    param_device = next(trainer.model.parameters()).device
    return f"TRL {trl.__version__}: SNRFilterGRPOTrainer 1 step on {param_device} ({seconds:.1f} s): {shown}"


def main() -> int:
    picked = pick_device()
    if picked is None:
        return 0
    device, dtype = picked
    import torch
    import transformers

    say(
        f"device {device} ({_device_name(device)}), dtype {dtype}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    root = Path(os.environ.get("MIRL_SMOKE_DIR") or tempfile.mkdtemp(prefix="mirl-gpu-smoke-"))
    model_dir = root / "model"
    say(f"built {build_model(model_dir)} in {model_dir}")
    train = run_mirl_train(model_dir, root / "runs", device, dtype)
    say(f"mirl train: 2 iterations on {device} in {dtype}, top-k filter, diagnostics ({train['seconds']:.1f} s)")
    for row in describe_train(train):
        print(row, flush=True)
    if importlib.util.find_spec("trl") is None:
        say("TRL: skipped (trl is not installed)")
    else:
        say(run_trl_step(model_dir, root / "trl", device, dtype))
    say(f"passed on {device} ({dtype}); outputs in {root}")
    return 0


def _device_name(device: str) -> str:
    import platform

    import torch

    return torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())
