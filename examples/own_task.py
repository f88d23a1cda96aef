"""Your own task in ten lines: prompts, a reward function, ``mirl.train`` (docs/your-task.md).

The task: two-digit sums. Each example is a dict; its ``solution`` field reaches the reward function by name.
Training uses the CPU quickstart's settings (configs/quickstart.yaml: 4 prompts x 4 samples, 4 iterations, the
MI diagnostics and the top-p filter on) with the task in place of the quickstart's env.

    python examples/own_task.py                        # SmolLM2-135M-Instruct, offline
    python examples/own_task.py --model Qwen/Qwen2.5-0.5B-Instruct --iterations 20
    mirl serve-env examples/own_task.py:task           # the same task over OpenEnv, on 127.0.0.1:8000
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import mirl

if TYPE_CHECKING:
    from mirl.trainer import RunResult

examples = [{"prompt": f"What is {a} + {b}?", "solution": str(a + b)} for a in range(10, 20) for b in range(10, 20)]


def reward(prompt: str, answer: str, solution: str) -> float:
    return 1.0 if answer.strip() == solution else 0.0


task = mirl.Task(examples, reward=reward, name="addition", instruction="Add the two numbers; answer with the sum.")

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def main(argv: list[str] | None = None) -> RunResult:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a model name, hub id or directory (default: the config's)")
    parser.add_argument("--iterations", type=int, default=None, help="training iterations (default: the config's)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. trainer.seed=1")
    args = parser.parse_args(argv)
    # ends as `mirl train` does: report.html, the run directory, the report and the summary line (quiet=True: silent)
    return mirl.train(task, model=args.model, iterations=args.iterations, config=QUICKSTART, overrides=args.overrides)


if __name__ == "__main__":
    main()
