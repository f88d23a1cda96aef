"""Worker of ``test_two_processes.py``: train ``SNRFilterGRPOTrainer`` on the scripted batch, save the parameters.

    torchrun --nproc_per_node 2 two_process_worker.py OUT 8     # two processes, 8 rows each
    python two_process_worker.py OUT 16                         # one process, the same 16-row global batch

Each process writes ``OUT/rank<i>.pt`` (its parameters after training) and ``OUT/rank<i>.json`` (the kept groups
of every step, how many rows each of its micro-batches trained on, and the diagnostics callback's last metrics).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("trl_test_helpers", HERE / "conftest.py")
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)

# exactly one group without spread (g1): whichever process does not hold it keeps all of its rows
REWARDS = {"g0": [0.0, 1.0, 0.0, 1.0], "g1": [0.0] * 4, "g2": [1.0, 0.5, 0.0, 0.2], "g3": [1.0, 0.0, 1.0, 1.0]}
FILTER = {"strategy": "top_p", "value": 0.9, "include_zero": False}
STEPS = 2


def main(out: Path, rows: int) -> None:
    from mirl.integrations.trl import CollapseDiagnosticsCallback, SNRFilterGRPOTrainer

    trainer = helpers.build(
        SNRFilterGRPOTrainer,
        out / "run",
        ["g0", "g1", "g2", "g3"],
        rewards=REWARDS,
        filter=FILTER,
        per_device_train_batch_size=rows,
        max_steps=STEPS,
    )
    callback = CollapseDiagnosticsCallback(trainer, {"every": 1, "num_pairs": 16, "scopes": ["first_turn"]})
    trainer.add_callback(callback)
    trained_rows: list[int] = []
    compute_loss = trainer.compute_loss

    def counting_compute_loss(model, inputs, *args, **kwargs):
        trained_rows.append(int(inputs["completion_ids"].shape[0]))  # rows this micro-batch forwards
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = counting_compute_loss
    trainer.train()
    rank = trainer.accelerator.process_index
    torch.save(helpers.params(trainer), out / f"rank{rank}.pt")
    kept = [entry["filter/kept_count"] for entry in trainer.state.log_history if "filter/kept_count" in entry]
    diag = {k: v for k, v in callback.last_metrics.items() if isinstance(v, float)}
    info = {"kept_count": kept, "trained_rows": trained_rows, "diag": diag}
    (out / f"rank{rank}.json").write_text(json.dumps(info))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
