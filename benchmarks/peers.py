"""One iteration of the same FrozenLake work through mirl's trainer, SNRFilterGRPOTrainer and plain GRPOTrainer.

    .venv-trl/bin/python benchmarks/peers.py                     # SmolLM2-135M-Instruct offline, 1 round each
    .venv-trl/bin/python benchmarks/peers.py --model tiny        # a random 4-layer model built in-process
    .venv-trl/bin/python benchmarks/peers.py --rounds 3          # medians over 3 iterations each

The work is ``configs/quickstart.yaml``'s: P = 4 FrozenLake instances x K = 4 rollouts, 2 turns of at most 64
tokens, temperature 0.7, top-p 0.95, the format example, micro-batches of 2 rows, activation checkpointing,
learning rate 1e-5, no KL term. mirl's trainer runs it with its GRPO preset and SNR-Aware Filtering (linear top-p
0.9); ``SNRFilterGRPOTrainer`` with the same filter and ``loss_type="dapo"``; ``GRPOTrainer`` unfiltered with
``loss_type="dapo"``; both TRL trainers play the episodes with ``MirlRollout``, so generation is mirl's sampler in
all three and the difference is the training loop. Diagnostics are off. The kept share differs between runs (each
samples its own episodes), so it is printed beside the times.

Each trainer runs in its own worker process and the workers take turns, one iteration each (``_interleave.py``):
a busy spell on a shared machine slows all of them alike. Times are medians over the rounds; peak memory is each
worker's peak RSS over its whole run (model load included). When ``.venv-vllm`` exists, a second table compares
the first-round generation (the same 16 episodes, top-p 1 as the vLLM backend needs) of the vLLM CPU backend with
mirl's sampler, the vLLM worker running in ``.venv-vllm``; otherwise that part is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _interleave import ROOT, interleave

P, K = 4, 4
ROLLOUT = {"max_turns": 2, "max_context_tokens": 1024, "format_example": True}
FROZENLAKE = {"success_rate": 1.0}
SAMPLING = {"temperature": 0.7, "top_p": 0.95, "max_completion_length": 64}
TRAINERS = ("mirl", "SNRFilterGRPOTrainer", "GRPOTrainer")
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def _peak_gb() -> float:
    from mirl.trainer.run import peak_memory_gb

    return peak_memory_gb()


def _native_config(model: str, out: str, extra: list[str]):
    from mirl import load_config  # the public name, which the baseline revisions have too

    return load_config(str(ROOT / "configs" / "quickstart.yaml"), [
        f"model.name={model}", "trainer.iterations=1000000", "diagnostics.enabled=false", "validation.every=-1",
        "logging.progress=false", "logging.tensorboard=false", "logging.save_rollouts=none",
        f"trainer.output_dir={out}", "trainer.name=peers", *extra,
    ])  # fmt: skip


def native_worker(model: str, out: str) -> None:
    """mirl's own trainer, one iteration per line read (as ``step.py``'s worker)."""
    from _interleave import serve

    from mirl.diagnostics.run import DiagnosticsState
    from mirl.trainer.loop import run_iteration
    from mirl.trainer.run import TrainState, prepare
    from mirl.trainer.setup import build_learner, load_policy, resolve_preset

    config = _native_config(model, out, [])
    run_dir = Path(out) / "peers"
    prepare(run_dir, config, False)
    policy = load_policy(config)
    preset = resolve_preset(config.algorithm)
    learner = build_learner(policy, config, preset)
    state = TrainState(diagnostics=DiagnosticsState.from_config(config.diagnostics))

    def iteration() -> dict:
        state.iteration += 1
        start = time.perf_counter()
        metrics, _ = run_iteration(policy, learner, preset, config, state, run_dir)
        elapsed = time.perf_counter() - start
        return {"iteration_s": elapsed, "kept_ratio": metrics.get("filter/kept_ratio", 1.0), "peak_gb": _peak_gb()}

    serve(iteration)


def turn_taking(report):
    """A ``TrainerCallback`` for ``_interleave``'s protocol: ``READY`` when training starts, then every optimizer
    step waits for a line on stdin and answers it with ``RESULT`` + ``report(seconds, trainer_state)`` as JSON."""
    from transformers import TrainerCallback

    class Turns(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            print("READY", flush=True)

        def on_step_begin(self, args, state, control, **kwargs):
            sys.stdin.readline()
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            result = report(time.perf_counter() - self.start, state) | {"peak_gb": _peak_gb()}
            print("RESULT " + json.dumps(result), flush=True)

    return Turns()


def trl_worker(kind: str, model: str, out: str, rounds: int) -> None:
    """A TRL trainer taking turns with the others (:func:`turn_taking`), one optimizer step per turn."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    from mirl.integrations.trl import MirlRollout, SNRFilterGRPOConfig, SNRFilterGRPOTrainer, dataset, episode_return
    from mirl.policy.sources import load_model_and_tokenizer

    def report(seconds: float, state) -> dict:
        kept = trainer._metrics["train"].get("filter/kept_ratio") or [1.0]
        return {"iteration_s": seconds, "kept_ratio": kept[-1]}

    torch_model, tokenizer = load_model_and_tokenizer(model, dtype="float32", device="cpu")
    common = dict(
        output_dir=out, per_device_train_batch_size=2, gradient_accumulation_steps=P * K // 2, num_generations=K,
        max_steps=rounds, learning_rate=1e-5, loss_type="dapo", beta=0.0, bf16=False, use_cpu=True, report_to=[],
        logging_steps=1, save_strategy="no", seed=0, disable_tqdm=True, **SAMPLING,
    )  # fmt: skip
    filtered = kind == "SNRFilterGRPOTrainer"
    args = SNRFilterGRPOConfig(**common, filter_strategy="top_p", filter_value=0.9) if filtered else None
    trainer = (SNRFilterGRPOTrainer if filtered else trl.GRPOTrainer)(
        model=torch_model,
        processing_class=tokenizer,
        args=args or trl.GRPOConfig(**common),
        reward_funcs=episode_return,
        train_dataset=dataset("frozenlake", 64, env_options=FROZENLAKE),
        rollout_func=MirlRollout(ROLLOUT, env_options={"frozenlake": FROZENLAKE}),
        callbacks=[turn_taking(report)],
    )
    trainer.train()


def generation_worker(backend: str, model: str, out: str) -> None:
    """The first rollout of the quickstart (top-p 1) through ``model.backend=<backend>``, timed per line read."""
    from _interleave import serve

    from mirl.rollout import run_episodes
    from mirl.trainer.setup import load_policy
    from mirl.types import EnvSpec

    config = _native_config(model, out, [f"model.backend={backend}", "rollout.top_p=1.0"])
    policy = load_policy(config)
    specs = [EnvSpec("frozenlake", 2 * p, FROZENLAKE) for p in range(P)]

    def generate() -> dict:
        start = time.perf_counter()
        episodes = run_episodes(policy, specs, K, config.rollout, sampling_seed=0)
        tokens = sum(len(turn.response_ids) for episode in episodes for turn in episode.turns)
        return {"iteration_s": time.perf_counter() - start, "tokens": tokens, "peak_gb": _peak_gb()}

    serve(generate)


def _tiny_model_dir(directory: Path) -> str:
    """A random 4-layer, 256-wide Llama with the tiny tokenizer, saved where every worker can load it."""
    from mirl.policy.tiny import tiny_model, tiny_tokenizer

    tiny_model(hidden_size=256, num_layers=4, num_heads=4).save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    return str(directory)


def _table(results: dict[str, list[dict]], keys: tuple[str, ...]) -> dict[str, dict[str, float]]:
    table = {}
    for name, lines in results.items():
        row = {key: statistics.median(line[key] for line in lines) for key in keys if key != "peak_gb"}
        row["peak_gb"] = max(line["peak_gb"] for line in lines)
        table[name] = row
    return table


def _print(table: dict[str, dict[str, float]], base: str) -> None:
    keys = list(next(iter(table.values())))
    print(f"{'':24s}" + "".join(f"{key:>14s}" for key in keys) + f"{'time ratio':>12s}{'memory ratio':>14s}")
    for name, row in table.items():
        ratios = row["iteration_s"] / table[base]["iteration_s"], row["peak_gb"] / table[base]["peak_gb"]
        print(f"{name:24s}" + "".join(f"{row[key]:14.3f}" for key in keys) + f"{ratios[0]:12.3f}{ratios[1]:14.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="'tiny', a directory, or a built-in name")
    parser.add_argument("--rounds", type=int, default=1, help="iterations per trainer (the median is printed)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if args.worker == "mirl":
            native_worker(args.model, args.out)
        elif args.worker.startswith("generate-"):
            generation_worker(args.worker.removeprefix("generate-"), args.model, args.out)
        else:
            trl_worker(args.worker, args.model, args.out, args.rounds)
        return
    if args.rounds < 1:
        sys.exit(f"peers.py: --rounds must be >= 1, got {args.rounds}")
    with tempfile.TemporaryDirectory() as scratch:
        model = _tiny_model_dir(Path(scratch) / "tiny") if args.model == "tiny" else args.model
        settings = {
            name: ["--model", model, "--rounds", str(args.rounds), "--out", str(Path(scratch) / name)]
            for name in TRAINERS
        }
        table = _table(interleave(__file__, settings, args.rounds), ("iteration_s", "kept_ratio"))
        print(f"one iteration of {P} FrozenLake instances x {K} rollouts, model {args.model}; medians over "
              f"{args.rounds} interleaved round(s), peak memory in GB (maximum); ratios against mirl")  # fmt: skip
        _print(table, "mirl")
        if not VLLM_PYTHON.exists():
            print("\nvLLM generation: skipped, .venv-vllm not found (bash scripts/test-vllm.sh builds it)")
            return
        names = {"generate-hf": "mirl sampler", "generate-vllm": "vLLM CPU"}
        settings = {name: ["--model", model, "--out", str(Path(scratch) / name)] for name in names}
        results = interleave(__file__, settings, args.rounds, pythons={"generate-vllm": VLLM_PYTHON})
        print(f"\ngeneration of the same {P * K} episodes (top-p 1); ratios against mirl's sampler")
        _print({names[n]: row for n, row in _table(results, ("iteration_s", "tokens")).items()}, "mirl sampler")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
