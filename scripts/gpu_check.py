"""The device check (``bash scripts/gpu-check.sh``): everything worth knowing from one short call of a GPU.

Steps, each timed, each allowed to fail without stopping the others, all inside one time budget
(``MIRL_CHECK_BUDGET_S``, default 420 s; a step that would start with less than its reserve left is skipped and
says so):

1. ``pytest -m gpu``: the CUDA tests (CPU-float32 vs GPU-bfloat16 log-probs of the sampler and the scorer, the
   first update's ratio); without CUDA they skip, and the table says so.
2. A model of Qwen2.5-0.5B-Instruct's shape (``scripts/gpu-check-model.json``) with random weights and mirl's tiny
   tokenizer: timing does not depend on the weights' values, and a random model's replies run to the token budget.
3. ``mirl train`` at the paper's batch shape (8 prompts x 16 samples, 5 turns, 400 tokens a turn) for 3 iterations,
   GRPO, diagnostics every iteration, the filter keeping the top half of the groups: rollout and update tokens per
   second, the diagnostics' share of the iteration, peak memory, the sampler/trainer mismatch.
4. The same work through TRL's ``GRPOTrainer`` with mirl's ``rollout_func``, then through mirl's
   ``SNRFilterGRPOTrainer``: seconds per iteration and peak memory, and their ratio to mirl's in this run.
5. mirl's sampler against ``model.generate`` on the same 128 prompts (first turns of the 8 instances x 16).

``MIRL_CHECK_DEVICE=cpu`` runs the same steps on the CPU in float32 at tiny shapes (the tests do). One table is
printed; with ``OUT`` set it goes to ``$OUT/gpu-report.md`` with the raw numbers in ``$OUT/gpu-report.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_steps import Shape, build_model, generate_vs_sampler, mirl_train, trl_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    "cuda": Shape(prompts=8, group=16, turns=5, tokens=400, iterations=3, tiny=False),
    "cpu": Shape(prompts=2, group=4, turns=2, tokens=12, iterations=2, tiny=True),
}


def say(message: str) -> None:
    print(f"gpu-check: {message}", flush=True)


def fail(message: str, status: int = 2) -> None:
    print(f"gpu-check: {message}", file=sys.stderr, flush=True)
    raise SystemExit(status)


def pick_device() -> tuple[str, str] | None:
    """(device, dtype), or None after saying why when there is no CUDA GPU and no override."""
    import torch

    forced = os.environ.get("MIRL_CHECK_DEVICE", "")
    if forced not in ("", "cuda", "cpu"):
        fail(f"MIRL_CHECK_DEVICE must be 'cuda' or 'cpu', got {forced!r}")
    if forced == "cpu":
        return "cpu", "float32"
    if not torch.cuda.is_available():
        if forced == "cuda":
            fail("MIRL_CHECK_DEVICE=cuda but torch sees no CUDA GPU; run it where one is, or set MIRL_CHECK_DEVICE=cpu")
        say(f"skipped: no CUDA GPU (torch {torch.__version__}); nothing ran.")
        say("MIRL_CHECK_DEVICE=cpu bash scripts/gpu-check.sh runs the same steps on the CPU at tiny shapes.")
        return None
    return "cuda", "bfloat16"


class Budget:
    """Wall-clock budget of the whole check; a step starts only with at least its reserve left."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def run_step(rows: list[dict], name: str, budget: Budget, reserve: float, step) -> dict | None:
    """Run ``step()`` (a dict of figures) unless the budget is short; record a row either way."""
    if budget.left() < reserve:
        rows.append({"step": name, "status": "skipped", "seconds": 0.0, "note": f"budget: {budget.left():.0f} s left"})
        return None
    start = time.perf_counter()
    try:
        figures = step()
    except Exception as error:  # a failed step is a finding; the others still run
        message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        rows.append({"step": name, "status": "failed", "seconds": time.perf_counter() - start, "note": message})
        return None
    status = figures.pop("status", "ok")
    note = figures.pop("note", "")
    rows.append({"step": name, "status": status, "seconds": time.perf_counter() - start, "note": note, **figures})
    say(f"{name}: {status} ({rows[-1]['seconds']:.1f} s) {note}")
    return figures


def cuda_tests() -> dict:
    """``pytest -m gpu`` in a child process; its summary line."""
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests/test_gpu.py"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else result.stderr.strip()[-200:]
    if result.returncode not in (0, 5):
        print(result.stdout[-4000:], result.stderr[-2000:], sep="\n", flush=True)
    status = "ok" if result.returncode == 0 and "passed" in summary else "failed"
    if result.returncode == 0 and "passed" not in summary:
        status = "skipped"
    return {"status": status, "note": summary + (": they need CUDA" if status == "skipped" else "")}


def trl_available() -> str | None:
    """None when trl imports, else why not."""
    try:
        import trl  # noqa: F401
    except ImportError as error:
        return f"trl does not import ({error}); bash scripts/gpu-wheels.sh puts it in .whl/"
    return None


def compare(rows: list[dict]) -> None:
    """Seconds per iteration and peak memory of the TRL rows as ratios to mirl's, in place."""
    mirl = next((r for r in rows if r["step"] == "mirl train" and r["status"] == "ok"), None)
    for row in rows:
        if row["step"].startswith("TRL") and row["status"] == "ok" and mirl is not None:
            row["time_vs_mirl"] = row["s_per_iteration"] / mirl["s_per_iteration"]
            row["memory_vs_mirl"] = row["peak_memory_gb"] / max(mirl["peak_memory_gb"], 1e-9)
            row["note"] += f"; x{row['time_vs_mirl']:.2f} mirl's time, x{row['memory_vs_mirl']:.2f} its memory"


def table(rows: list[dict]) -> str:
    lines = ["| step | status | seconds | figures |", "|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['step']} | {row['status']} | {row['seconds']:.1f} | {row['note']} |")
    return "\n".join(lines)


def write_report(header: dict, rows: list[dict]) -> None:
    text = "\n".join([f"# mirl device check: {header['device_name']}", "", *header["lines"], "", table(rows), ""])
    print("\n" + text, flush=True)
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "gpu-report.md").write_text(text)
        raw = {"header": header, "rows": rows}
        (Path(out) / "gpu-report.json").write_text(json.dumps(raw, indent=2, default=str) + "\n")
        say(f"report written to {out}/gpu-report.md and .json")


def environment(device: str, dtype: str, shape: Shape) -> dict:
    import torch
    import transformers

    name = torch.cuda.get_device_name(0) if device == "cuda" else f"CPU ({platform.machine()})"
    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    try:
        import trl

        versions += f", trl {trl.__version__}"
    except ImportError:
        versions += ", no trl"
    shape_text = (
        f"{shape.prompts} prompts x {shape.group} samples, {shape.turns} turns x {shape.tokens} tokens, "
        f"{shape.iterations} iterations"
    )
    lines = [
        f"- device: {name}, {dtype}",
        f"- {versions}, Python {platform.python_version()}",
        f"- shape: {shape_text}",
    ]
    return {"device": device, "device_name": name, "dtype": dtype, "shape": dataclasses.asdict(shape), "lines": lines}


def main() -> int:
    picked = pick_device()
    if picked is None:
        return 0
    device, dtype = picked
    shape = SHAPES[device]
    budget = Budget(float(os.environ.get("MIRL_CHECK_BUDGET_S", "420")))
    header = environment(device, dtype, shape)
    for line in header["lines"]:
        say(line.removeprefix("- "))
    work = Path(os.environ.get("MIRL_CHECK_DIR") or tempfile.mkdtemp(prefix="mirl-gpu-check-"))
    rows: list[dict] = []
    run_step(rows, "CUDA tests", budget, 60, cuda_tests)
    model = run_step(rows, "model", budget, 30, lambda: build_model(work / "model", device, dtype, shape))
    if model is None:
        write_report(header, rows)
        return 1
    run_step(rows, "mirl train", budget, 60, lambda: mirl_train(work, device, dtype, shape))
    missing = trl_available()
    for variant, name in (("grpo", "TRL GRPOTrainer"), ("snr", "TRL SNRFilterGRPOTrainer")):
        if missing:
            rows.append({"step": name, "status": "skipped", "seconds": 0.0, "note": missing})
            continue
        run_step(rows, name, budget, 60, lambda v=variant: trl_run(v, work, device, dtype, shape))
    run_step(rows, "sampler vs generate", budget, 20, lambda: generate_vs_sampler(work / "model", device, dtype, shape))
    compare(rows)
    write_report(header, rows)
    return 0 if all(row["status"] in ("ok", "skipped") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
