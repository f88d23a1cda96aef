"""E1 swap test, sampling and scoring: one pool of reasonings and its cross-scoring matrix (no training).

    python studies/evidence/e1_swap.py --task countdown --gen-seed 1 [--out studies/runs/evidence-e1]

(``--model`` and ``--prompts`` exist for testing the script on a tiny model; the registered run uses the defaults.)

The frozen SmolLM2-135M-Instruct answers 48 evaluation prompts and 48 donor prompts once each (one generation
seed per call), with the open reasoning span (``diagnostics.reasoning: open``). Every reasoning (evaluation and
donor) is then scored under every evaluation prompt at temperature 1 (an R x 48 matrix, prefix-shared), and each
donor reasoning under its own donor prompt (its generator score). The mixtures of PREREGISTRATION.md are drawn
from this pool afterwards by ``analysis.py e1`` without any further model call.

Writes ``<out>/<task>_g<seed>/pool.json`` (the row and column labels, the reasoning texts and the counts of empty
and placeholder reasonings) and ``scores.npy`` (float64 per-token scores; read back with allow_pickle=False).
A finished pool is skipped, so the command can be rerun after an interruption.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

TASKS = {
    "countdown": [
        "envs=[{name: countdown, options: {num_numbers: 3, max_number: 20}}]",
        "rollout.max_new_tokens=128",
    ],
    "frozenlake": ["envs=[{name: frozenlake, options: {success_rate: 1.0}}]", "rollout.max_new_tokens=64"],
}
COMMON = [
    "rollout.max_turns=1",
    "rollout.temperature=1.0",
    "rollout.top_p=1.0",
    "rollout.format_example=false",
    "rollout.max_context_tokens=1024",
]
EVAL_PROMPTS = 48  # and as many donor prompts
DONOR_OFFSET = 100_000  # donor instance seeds: validation seeds far past the evaluation ones
PLACEHOLDER = "[your thoughts]"


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def sample_pool(task: str, gen_seed: int, model: str, prompts: int):
    from mirl import load_config
    from mirl.diagnostics.reasoning import with_reasoning
    from mirl.rollout import run_episodes
    from mirl.trainer.setup import load_policy
    from mirl.trainer.specs import validation_seed
    from mirl.types import EnvSpec

    config = load_config(None, [f"model.name={model}", *COMMON, *TASKS[task]])
    policy = load_policy(config)
    entry = config.envs[0]
    options = dict(entry.options) | ({"split": "validation"} if entry.name == "countdown" else {})
    seeds = [validation_seed(j) for j in range(prompts)]
    seeds += [validation_seed(DONOR_OFFSET + d) for d in range(prompts)]
    specs = [EnvSpec(entry.name, seed, options) for seed in seeds]
    episodes = run_episodes(policy, specs, 1, config.rollout, sampling_seed=gen_seed)
    episodes = with_reasoning(episodes, "open", policy.tokenizer)
    return policy, [episode.turns[0] for episode in episodes]


def score_pool(policy, turns) -> tuple[dict, np.ndarray]:
    from mirl.diagnostics.scoring import score_grid, score_matrix

    eval_turns, donor_turns = turns[: len(turns) // 2], turns[len(turns) // 2 :]
    eval_contexts = {t.context_ids for t in eval_turns}
    # a donor whose prompt equals an evaluation prompt is no donor: its reasoning would carry that prompt's information
    donors = [t for t in donor_turns if t.reasoning_ids and t.context_ids not in eval_contexts]
    rows = [(t, "grounded", j) for j, t in enumerate(eval_turns) if t.reasoning_ids]
    rows += [(t, "donor", -1) for t in donors]
    prompts = [t.context_ids for t in eval_turns]
    reasonings = [t.reasoning_ids for t, _, _ in rows]
    _, per_token = score_matrix(policy, prompts, reasonings)  # (R, 48)
    own_prompts, own_reasonings = [[t.context_ids] for t in donors], [[t.reasoning_ids] for t in donors]
    scored = [len(t.reasoning_ids) for t in donors]
    _, donor_own = score_grid(policy, own_prompts, own_reasonings, scored)  # (D, 1): each donor under its own prompt
    decode = policy.tokenizer.decode
    texts = [decode(list(t.reasoning_ids)) for t, _, _ in rows]
    pool = {
        "rows": [{"kind": kind, "prompt": j, "tokens": len(t.reasoning_ids)} for t, kind, j in rows],
        "texts": texts,
        "donor_own_score": [float(x) for x in donor_own[:, 0]],
        "counts": {
            "eval_prompts": len(eval_turns),
            "donor_prompts": len(donor_turns),
            "empty_eval": sum(not t.reasoning_ids for t in eval_turns),
            "empty_donor": sum(not t.reasoning_ids for t in donor_turns),
            "donor_same_prompt": sum(bool(t.reasoning_ids) and t.context_ids in eval_contexts for t in donor_turns),
            "placeholder": sum(text.strip() == PLACEHOLDER for text in texts),
        },
    }
    return pool, per_token.numpy()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="countdown")
    parser.add_argument("--gen-seed", type=int, required=True)
    parser.add_argument("--out", type=Path, default=Path("studies/runs/evidence-e1"))
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=EVAL_PROMPTS, help="evaluation prompts, and as many donors")
    args = parser.parse_args(argv)
    out = args.out / f"{args.task}_g{args.gen_seed}"
    if (out / "pool.json").is_file() and (out / "scores.npy").is_file():
        print(f"{out}: already sampled and scored")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    policy, turns = sample_pool(args.task, args.gen_seed, args.model, args.prompts)
    pool, scores = score_pool(policy, turns)
    pool |= {"task": args.task, "gen_seed": args.gen_seed, "model": args.model, "overrides": COMMON + TASKS[args.task]}
    buffer = io.BytesIO()
    np.save(buffer, scores, allow_pickle=False)
    _write_atomic(out / "scores.npy", buffer.getvalue())
    _write_atomic(out / "pool.json", json.dumps(pool, indent=1).encode())  # last: its presence marks a finished pool
    print(f"{out}: {len(pool['rows'])} reasonings x {scores.shape[1]} prompts; counts {pool['counts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
