"""The steps of ``scripts/gpu_check.py``: build the model, train with mirl, train with TRL, sample two ways.

Each step returns a dict of figures plus ``note`` (one line for the table). Training runs in child processes, so
each framework's peak memory is its own. ``python scripts/gpu_check_steps.py trl VARIANT WORK DEVICE DTYPE SHAPE``
is the TRL child (VARIANT ``grpo`` or ``snr``; SHAPE the :class:`Shape` as JSON); it prints its figures as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = "frozenlake"
LAKE = {"success_rate": 1.0}


@dataclasses.dataclass(frozen=True)
class Shape:
    prompts: int  # P
    group: int  # K
    turns: int
    tokens: int  # max new tokens per turn
    iterations: int
    tiny: bool  # a tiny Qwen2 instead of Qwen2.5-0.5B's shape

    @property
    def rollout(self) -> dict:
        return {"max_turns": self.turns, "max_new_tokens": self.tokens, "temperature": 1.0, "top_p": 1.0}


def _synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def build_model(directory: Path, device: str, dtype: str, shape: Shape) -> dict:
    """A randomly initialised Qwen2 (Qwen2.5-0.5B's config, or tiny) and mirl's tiny tokenizer, saved."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mirl.policy.tiny import tiny_qwen2_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    if shape.tiny:
        model = tiny_qwen2_model(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, seed=1)
    else:
        fields = json.loads((ROOT / "scripts" / "gpu-check-model.json").read_text())
        fields = {k: v for k, v in fields.items() if not k.startswith("_") and k not in ("architectures", "model_type")}
        config = Qwen2Config(**fields, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        torch.manual_seed(0)
        with torch.device(device):
            model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
        # filler tokens up to the model's vocabulary, so every sampled id decodes to text (a reasoning Z to score)
        tokenizer.add_tokens([f"<w{i}>" for i in range(len(tokenizer), config.vocab_size)])
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    params = sum(p.numel() for p in model.parameters())
    config = model.config
    note = (
        f"{params / 1e6:.1f}M parameters, hidden {config.hidden_size}, {config.num_hidden_layers} layers, "
        f"{config.num_attention_heads}/{config.num_key_value_heads} heads, vocab {config.vocab_size}"
    )
    del model
    return {"parameters": params, "note": note}


def mirl_train(work: Path, device: str, dtype: str, shape: Shape) -> dict:
    """``mirl train`` in a child process; throughput, diagnostics share, peak memory and mismatch from its log."""
    args = [
        f"model.name={work / 'model'}",
        f"model.device={device}",
        f"model.dtype={dtype}",
        f"envs=[{{name: {ENV}, options: {{success_rate: 1.0}}}}]",
        f"rollout.prompts_per_iteration={shape.prompts}",
        f"rollout.group_size={shape.group}",
        *(f"rollout.{key}={value}" for key, value in shape.rollout.items()),
        "algorithm.preset=grpo",
        "filter.strategy=top_k",  # the top half of the groups, whatever the (random model's, tied) rewards
        "filter.value=0.5",
        "filter.include_zero=true",
        "diagnostics.every=1",
        "diagnostics.reasoning=open",  # a random model never closes <think>: its whole reply is the Z scored
        "validation.every=-1",
        f"trainer.iterations={shape.iterations}",
        "trainer.checkpoint_every=0",
        "logging.progress=false",
        "logging.tensorboard=false",
        f"trainer.output_dir={work / 'runs'}",
        "trainer.name=mirl",
        "--no-report",
    ]
    start = time.perf_counter()
    command = [sys.executable, "-m", "mirl.cli", "train", "--defaults", *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:], sep="\n", flush=True)
        raise RuntimeError(f"mirl train exited with status {result.returncode}: {result.stderr.strip()[-200:]}")
    lines = [json.loads(line) for line in (work / "runs" / "mirl" / "metrics.jsonl").read_text().splitlines()]
    return _train_figures(lines, time.perf_counter() - start)


def _train_figures(lines: list[dict], wall: float) -> dict:
    mean = lambda key: sum(m.get(key, 0.0) for m in lines) / len(lines)  # noqa: E731
    later = lines[1:] or lines  # the first iteration carries warm-up (kernel selection, allocator growth)
    per_iteration = sum(m["time/iteration"] for m in later) / len(later)
    figures = {
        "wall_s": wall,
        "s_per_iteration": per_iteration,
        "rollout_tokens_per_s": mean("perf/rollout_tokens_per_s"),
        "update_tokens_per_s": mean("perf/update_tokens_per_s"),
        "diagnostics_share": sum(m.get("time/scoring", 0.0) for m in lines) / sum(m["time/iteration"] for m in lines),
        "peak_memory_gb": max(m["perf/peak_memory_gb"] for m in lines),
        "logp_diff_mean": mean("rollout/logp_diff_mean"),
        "logp_diff_max": max(m.get("rollout/logp_diff_max", 0.0) for m in lines),
        "mismatch_kl": mean("rollout/mismatch_kl"),
        "ratio_outside_frac": mean("rollout/ratio_outside_frac"),
        "iterations": [{k: v for k, v in m.items() if not k.startswith("diag/")} for m in lines],
    }
    figures["note"] = (
        f"{figures['s_per_iteration']:.1f} s/iteration; rollout {figures['rollout_tokens_per_s']:.0f} tok/s, update "
        f"{figures['update_tokens_per_s']:.0f} tok/s; diagnostics {100 * figures['diagnostics_share']:.0f} % of the "
        f"time; peak {figures['peak_memory_gb']:.2f} GB; sampler/trainer |d| mean {figures['logp_diff_mean']:.2g} "
        f"max {figures['logp_diff_max']:.2g}, KL/seq {figures['mismatch_kl']:.2g}"
    )
    return figures


def trl_run(variant: str, work: Path, device: str, dtype: str, shape: Shape) -> dict:
    """One TRL variant in a child process (this file's ``trl`` entry); its figures."""
    command = [
        sys.executable,
        __file__,
        "trl",
        variant,
        str(work),
        device,
        dtype,
        json.dumps(dataclasses.asdict(shape)),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:], sep="\n", flush=True)
        raise RuntimeError(f"TRL {variant} exited with status {result.returncode}: {result.stderr.strip()[-200:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _trl_trainer(variant: str, work: Path, device: str, dtype: str, shape: Shape):
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

    model, tokenizer = load_model_and_tokenizer(str(work / "model"), dtype=dtype, device=device)
    rows = shape.prompts * shape.group
    common = {
        "output_dir": str(work / f"trl-{variant}"),
        "per_device_train_batch_size": min(4, rows),  # mirl's micro-batch
        "gradient_accumulation_steps": max(1, rows // 4),
        "num_generations": shape.group,
        "max_completion_length": shape.tokens,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_steps": shape.iterations,
        "learning_rate": 1e-6,
        "beta": 0.0,
        "bf16": dtype == "bfloat16",
        "use_cpu": device == "cpu",
        "gradient_checkpointing": device == "cuda",
        "report_to": [],
        "logging_steps": 1,
        "save_strategy": "no",
        "seed": 0,
    }
    if variant == "snr":
        config = SNRFilterGRPOConfig(filter_strategy="top_k", filter_value=0.5, filter_include_zero=True, **common)
        trainer_class = SNRFilterGRPOTrainer
    else:
        config, trainer_class = trl.GRPOConfig(**common), trl.GRPOTrainer
    rollout = MirlRollout({"max_turns": shape.turns}, env_options={ENV: LAKE})
    trainer = trainer_class(
        model=model,
        processing_class=tokenizer,
        args=config,
        reward_funcs=episode_return,
        train_dataset=dataset(ENV, rows * shape.iterations, env_options=LAKE),
        rollout_func=rollout,
    )
    if variant == "snr":  # mirl's filter and diagnostics inside TRL, as mirl train runs them
        trainer.add_callback(CollapseDiagnosticsCallback(trainer, {"every": 1, "reasoning": "open"}))
    return trainer


def trl_child(variant: str, work: Path, device: str, dtype: str, shape: Shape) -> dict:
    import torch

    trainer = _trl_trainer(variant, work, device, dtype, shape)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.train()
    _synchronize(device)
    wall = time.perf_counter() - start
    steps = trainer.state.global_step
    if steps != shape.iterations:
        raise RuntimeError(f"TRL ran {steps} steps, expected {shape.iterations}")
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 1e9
    else:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux -> GB
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    kept = [entry.get("filter/kept_ratio") for entry in logged if "filter/kept_ratio" in entry]
    note = f"{wall / steps:.1f} s/iteration; peak {peak:.2f} GB" + (f"; kept ratio {kept[-1]:.2f}" if kept else "")
    return {"s_per_iteration": wall / steps, "peak_memory_gb": peak, "steps": steps, "note": note}


def _first_prompts(tokenizer, shape: Shape) -> list[list[int]]:
    """The first-turn contexts of the P instances, each repeated K times (mirl's prompts, token ids)."""
    from mirl.config import RolloutConfig
    from mirl.policy.scripted import ScriptedPolicy
    from mirl.rollout import run_episodes
    from mirl.types import EnvSpec

    recorder = ScriptedPolicy(tokenizer, lambda context: "Down</think><answer>Down</answer>")
    specs = [EnvSpec(ENV, seed, LAKE) for seed in range(shape.prompts)]
    run_episodes(recorder, specs, 1, RolloutConfig(max_turns=1))
    first_turn = recorder.calls[0]  # one generate call: the P first-turn contexts
    return [list(context) for context in first_turn for _ in range(shape.group)]


def generate_vs_sampler(model_dir: Path, device: str, dtype: str, shape: Shape) -> dict:
    """Tokens per second of mirl's sampler and of ``model.generate`` on the same P x K prompts, no stop strings."""
    import torch

    from mirl.policy import HFPolicy
    from mirl.types import SamplingParams

    policy = HFPolicy.load(str(model_dir), device=device, dtype=dtype)
    prompts = _first_prompts(policy.tokenizer, shape)
    sampling = SamplingParams(max_new_tokens=shape.tokens, temperature=1.0, stop=(), seed=0)
    _synchronize(device)
    start = time.perf_counter()
    mirl_tokens = sum(len(g.token_ids) for g in policy.generate(prompts, sampling))
    _synchronize(device)
    mirl_s = time.perf_counter() - start
    ids, mask, _ = policy._left_pad(prompts)
    stops = sorted(policy.stop_token_ids)
    start = time.perf_counter()
    with torch.no_grad():
        out = policy.model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=shape.tokens,
            eos_token_id=stops,
            pad_token_id=policy.pad_token_id,
        )
    _synchronize(device)
    hf_s = time.perf_counter() - start
    new = out[:, ids.shape[1] :]
    ended = torch.isin(new, torch.tensor(stops, device=new.device)).int().cumsum(-1)
    hf_tokens = int(((ended == 0) | ((ended == 1) & torch.isin(new, torch.tensor(stops, device=new.device)))).sum())
    figures = {"batch": len(prompts), "mirl_tokens_per_s": mirl_tokens / mirl_s, "hf_tokens_per_s": hf_tokens / hf_s}
    figures["note"] = (
        f"batch {len(prompts)}: mirl {figures['mirl_tokens_per_s']:.0f} tok/s ({mirl_tokens} tokens, {mirl_s:.1f} s), "
        f"generate {figures['hf_tokens_per_s']:.0f} tok/s ({hf_tokens} tokens, {hf_s:.1f} s), "
        f"x{figures['mirl_tokens_per_s'] / figures['hf_tokens_per_s']:.2f}"
    )
    return figures


if __name__ == "__main__":
    if len(sys.argv) != 7 or sys.argv[1] != "trl":
        raise SystemExit("usage: gpu_check_steps.py trl VARIANT WORK DEVICE DTYPE SHAPE_JSON")
    _, _, variant, work, device, dtype, shape_json = sys.argv
    figures = trl_child(variant, Path(work), device, dtype, Shape(**json.loads(shape_json)))
    print(json.dumps(figures), flush=True)
