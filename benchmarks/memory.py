"""Peak memory (RSS) of one quickstart update, without and with the lean options, each in its own process.

    python benchmarks/memory.py                 # SmolLM2-135M as the quickstart loads it, one iteration each
    python benchmarks/memory.py model.name=Qwen/Qwen2.5-0.5B-Instruct

Each setting runs ``configs/quickstart.yaml`` for one iteration (diagnostics and validation off) in a fresh
process, so one setting's peak cannot leak into the other's. The rollout is scripted (every reply is the same
~60-token think-and-answer text, tokenized by the model's tokenizer; ``--sampled`` samples it from the model
instead) and the filter is off, so both settings update on the same full 4 x 4 batch, the largest the quickstart
trains on. The peak resident set size is reset (``/proc/self/clear_refs``) when the update starts, so the figure
is the update's own peak, not the rollout's. Settings: "plain" = ``model.gradient_checkpointing=false``;
"lean" = the defaults (decoder layers checkpointed in the update's forward pass). In both, the chunked log-prob
path keeps one chunk of full-vocabulary logits alive, and no reference model is built while ``kl_coef`` is 0.

Where the memory goes: weights, gradients and AdamW state are counted from the tensors; "activations, logits and
the rest" is the update's peak minus its starting RSS minus gradients and optimiser state (created in the update).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = {"plain": ["model.gradient_checkpointing=false"], "lean": []}
GB = 2**30


def _status_kb(field: str) -> int:
    """A ``VmRSS`` / ``VmHWM`` line of /proc/self/status in kB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line; this benchmark needs Linux")


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


REPLY = (
    "<think>The goal is down and to the right of me. Moving right keeps me away from the hole below, so I will "
    "step right first and then go down next turn.</think><answer>Right</answer>"
)


def _scripted_rollouts(stages) -> None:
    """Replace the rollout by one whose every reply is :data:`REPLY` (same batch for every setting)."""
    from mirl.policy.scripted import ScriptedPolicy

    collect = stages.collect

    def scripted_collect(policy, config, iteration, sampling_seed, **kwargs):
        return collect(ScriptedPolicy(policy.tokenizer, lambda _: REPLY), config, iteration, sampling_seed, **kwargs)

    stages.collect = scripted_collect


def child(overrides: list[str], out: str, sampled: bool) -> dict:
    """Train one quickstart iteration and measure its update (runs in the child process)."""
    import torch

    from mirl import load_config  # the public name, which the baseline revisions have too
    from mirl.trainer import loop, stages, train

    measured = {}
    original = loop.train_on

    def train_on(batch, kept, returns, learner, *args, **kwargs):
        start_kb = _status_kb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM (the peak RSS) to the current RSS
        start = time.perf_counter()
        metrics = original(batch, kept, returns, learner, *args, **kwargs)
        model, optimizer = learner.policy.model, learner.optimizer
        measured.update(
            update_s=time.perf_counter() - start,
            start_gb=start_kb * 1024 / GB,
            peak_gb=_status_kb("VmHWM") * 1024 / GB,
            weights_gb=_tensor_bytes(model.parameters()) / GB,
            gradients_gb=_tensor_bytes(p for p in model.parameters() if p.requires_grad) / GB,
            optimizer_gb=_tensor_bytes(
                t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)
            )
            / GB,
            reference_gb=_tensor_bytes(learner.reference.model.parameters()) / GB
            if learner.reference is not None and learner.reference.model is not None
            else 0.0,
            rows=batch.num_rows,
            tokens=int(batch.attention_mask.sum()),
            longest=batch.input_ids.shape[1],
        )
        return metrics

    loop.train_on = train_on
    if not sampled:
        _scripted_rollouts(stages)
        overrides = ["filter.strategy=none", *overrides]
    config = load_config("configs/quickstart.yaml", [
        *overrides, "trainer.iterations=1", "diagnostics.enabled=false", "validation.every=-1",
        "logging.progress=false", "logging.tensorboard=false", "logging.save_rollouts=none",
        f"trainer.output_dir={out}", "trainer.name=memory",
    ])  # fmt: skip
    torch.manual_seed(0)
    result = train(config)
    if not measured:
        raise SystemExit("the filter kept no trajectory, so there was no update to measure; try filter.strategy=none")
    lines = (result.run_dir / "metrics.jsonl").read_text().splitlines()
    metrics = json.loads(lines[-1])
    process_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB
    return measured | {"rollout_s": metrics["time/rollout"], "process_peak_gb": process_peak}


def report(results: dict[str, dict]) -> None:
    rows = [
        ("update peak RSS (GB)", "peak_gb"),
        ("RSS at update start", "start_gb"),
        ("  weights", "weights_gb"),
        ("  reference model", "reference_gb"),
        ("gradients", "gradients_gb"),
        ("AdamW state", "optimizer_gb"),
        ("activations, logits, rest", "rest_gb"),
        ("process peak RSS (GB)", "process_peak_gb"),
        ("update time (s)", "update_s"),
        ("rollout time (s)", "rollout_s"),
        ("batch rows", "rows"),
        ("batch tokens", "tokens"),
        ("longest row", "longest"),
    ]
    for r in results.values():
        r["rest_gb"] = max(0.0, r["peak_gb"] - r["start_gb"] - r["gradients_gb"] - r["optimizer_gb"])
    print(f"{'':28s}" + "".join(f"{name:>12s}" for name in results))
    for label, key in rows:
        print(f"{label:28s}" + "".join(f"{r[key]:12.3f}" for r in results.values()))
    plain, lean = results["plain"], results["lean"]
    print(f"\nupdate peak lean / plain: {lean['peak_gb'] / plain['peak_gb']:.3f}")
    print(f"update time lean / plain: {lean['update_s'] / plain['update_s']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    parser.add_argument("--sampled", action="store_true", help="sample the rollout from the model (slower)")
    parser.add_argument("overrides", nargs="*", help="extra key=value config overrides")
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as out:
            print("RESULT " + json.dumps(child([*SETTINGS[args.child], *args.overrides], out, args.sampled)))
        return
    results = {}
    for name in SETTINGS:
        sampled = ["--sampled"] if args.sampled else []
        command = [sys.executable, __file__, "--child", name, *sampled, *args.overrides]
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            sys.exit(f"setting {name!r} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        results[name] = json.loads(lines[-1].removeprefix("RESULT "))
    report(results)


if __name__ == "__main__":
    main()
