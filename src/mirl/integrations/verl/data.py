"""The parquet files veRL's trainer reads for a mirl environment (``mirl verl-data``); needs no veRL.

One row per env instance. veRL's dataset hands every column to the agent loop as a keyword, and
:class:`~mirl.integrations.verl.agent_loop.MirlAgentLoop` reads three of them: ``env_name``, ``env_seed`` and
``env_options`` (JSON). The other columns exist because veRL's dataset and logging expect them: ``prompt`` (a
one-message placeholder naming the instance; the agent loop renders mirl's own system prompt and turns, so set
``data.filter_overlong_prompts=false``), ``data_source`` (the env name, veRL's per-source validation metrics),
``agent_name`` (``mirl``), ``reward_model`` (unused: the agent loop returns the episode return) and
``extra_info`` (``index``, ``split``).

Seeds are mirl's own (``mirl.trainer.specs``), so training and validation never share an instance:
train row i has ``train_seed(seed, i // 4096, i % 4096)`` (even), validation row j ``validation_seed(j)`` (odd).
Dataset-backed envs with a ``split`` option also get ``split=train`` / ``validation``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mirl.config import EnvEntry
from mirl.trainer.specs import MAX_PROMPTS_PER_ITERATION, _options, train_seed, validation_seed

AGENT_NAME = "mirl"  # the agent loop's registered name (plugin.AGENT_NAME; importing the plugin installs its hook)
FILES = {"train": "train.parquet", "validation": "val.parquet"}


def instance_rows(env: str, options: dict, count: int, split: str, run_seed: int = 0) -> list[dict]:
    """``count`` dataset rows of ``env`` for ``split`` ("train" or "validation").

    >>> [r["env_seed"] for r in instance_rows("bandit", {}, 3, "validation")]
    [1, 3, 5]
    >>> [r["env_seed"] for r in instance_rows("bandit", {}, 2, "train")]
    [0, 2]
    """
    from mirl.envs import registry

    if env not in registry:
        raise ValueError(f"unknown environment {env!r}; registered: {', '.join(sorted(registry))} (see `mirl envs`)")
    if split not in FILES:
        raise ValueError(f"split must be one of {sorted(FILES)}, got {split!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"the number of {split} instances must be an int >= 0, got {count!r}")
    options = _options(EnvEntry(name=env, options=dict(options)), split)
    rows = []
    for i in range(count):
        seed = (
            train_seed(run_seed, i // MAX_PROMPTS_PER_ITERATION, i % MAX_PROMPTS_PER_ITERATION)
            if split == "train"
            else validation_seed(i)
        )
        rows.append(
            {
                "data_source": env,
                "agent_name": AGENT_NAME,
                "prompt": [{"role": "user", "content": f"mirl {env} instance {seed}"}],
                "env_name": env,
                "env_seed": seed,
                "env_options": json.dumps(options, sort_keys=True),
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": {"index": i, "split": split},
            }
        )
    return rows


def write_parquet(rows: list[dict], path: Path) -> None:
    """Write ``rows`` to ``path`` through a temporary file and a rename (a planted symlink is replaced)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError('writing veRL parquet files needs pyarrow; pip install "mirl[data]"') from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, path)


def write_dataset(
    env: str, out_dir: str | os.PathLike, *, train: int, val: int, options: dict | None = None, run_seed: int = 0
) -> dict[str, Path]:
    """``OUT_DIR/train.parquet`` (``train`` rows) and ``OUT_DIR/val.parquet`` (``val`` rows); returns the paths."""
    if train < 1:
        raise ValueError(f"--train must be >= 1, got {train}")
    out = Path(out_dir)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ValueError(f"{out} is not a directory; pass a directory for the parquet files")
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, count in (("train", train), ("validation", val)):
        paths[split] = out / FILES[split]
        write_parquet(instance_rows(env, options or {}, count, split, run_seed), paths[split])
    return paths
