"""SNRFilterGRPOTrainer on two CPU processes (torchrun, gloo, accelerate's real gather) equals one process.

The worker (``two_process_worker.py``) trains two steps on 4 groups, 2 per process, with exactly one group that
the filter drops: on each step one process keeps all its rows and the other drops one group. A process that
skipped a collective because it had nothing to drop would leave the other waiting for ever; the timeout turns
that into a failure. The diagnostics callback runs on both processes and scores the batch gathered from both.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

import torch  # noqa: E402

WORKER = Path(__file__).resolve().parent / "two_process_worker.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
TIMEOUT_S = 400  # a healthy run takes ~1 minute on a shared 2-core machine


def _run(command: list[str], out: Path) -> None:
    out.mkdir(parents=True)
    env = os.environ | {"OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        _, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # torchrun and both workers
        process.communicate()
        pytest.fail(f"{' '.join(command)} did not finish in {TIMEOUT_S} s: a process is waiting in a collective")
    assert process.returncode == 0, stderr[-4000:]


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="needs torchrun, torch's launcher, beside the python")
def test_two_processes_equal_one_process(tmp_path):
    torchrun = str(TORCHRUN)
    _run([torchrun, "--standalone", "--nproc_per_node", "2", str(WORKER), str(tmp_path / "two"), "8"],
         tmp_path / "two")  # fmt: skip
    _run([sys.executable, str(WORKER), str(tmp_path / "one"), "16"], tmp_path / "one")
    ranks = [torch.load(tmp_path / "two" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    single = torch.load(tmp_path / "one" / "rank0.pt", weights_only=True)
    for name in single:
        assert torch.equal(ranks[0][name], ranks[1][name]), name  # DDP keeps the replicas bitwise equal
    from mirl.policy.tiny import tiny_model

    start = {name: p.detach() for name, p in tiny_model(seed=0, dtype=torch.float64).named_parameters()}
    moved = max(float((single[n] - start[n]).abs().max()) for n in single)
    worst = max(float((ranks[0][n] - single[n]).abs().max()) for n in single)
    assert moved > 1e-2  # two steps happened, so the equality below is not vacuous
    # the same loss over the same 12 kept rows, summed over processes by DDP instead of in one batch: float64
    # model with the lm-head log-probs at float32 precision, ~1e-7 of the step; a process that trained on another
    # selection or normaliser would be off by a sizeable part of it
    assert worst <= 1e-6 * moved, (worst, moved)
    info = [json.loads((tmp_path / "two" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [i["kept_count"] for i in info] == [[3.0, 3.0]] * 2  # g1 dropped on both steps, seen by both processes
    # the dropped group left the micro-batches: 8 rows trained per process (the larger kept share), not 16 / 2 + 4
    assert [i["trained_rows"] for i in info] == [[8, 8]] * 2
    # the diagnostics ran on both processes over the gathered batch: the one-process run's figures, on both
    alone = json.loads((tmp_path / "one" / "rank0.json").read_text())["diag"]
    assert alone["diag/first_turn/pairs"] == 16 and set(info[0]["diag"]) == set(alone)
    for key, value in alone.items():
        for rank in info:
            assert rank["diag"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
