"""The MI diagnostics through a row log-prob function (veRL's actor ``compute_log_prob`` shape), and the
metrics file ``mirl report`` reads. Runs without veRL.

Parity: ``run_diagnostics`` over :class:`RowScorer` (one full forward per (prompt, reasoning) row, as the actor
computes it) equals ``run_diagnostics`` over the policy itself (prefix-shared scoring) on the same episodes
rebuilt from veRL rows, to float precision.
"""

import json
import math

import pytest
import torch

from mirl.catalogue import is_known, unknown_keys
from mirl.config import DiagnosticsConfig
from mirl.diagnostics.run import DiagnosticsState, run_diagnostics
from mirl.integrations.verl.metrics_file import MetricsFile, mirl_record
from mirl.integrations.verl.scoring import RowScorer, policy_logprob_fn
from mirl.policy.tiny import tiny_policy
from mirl.report.rundir import read_run


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


def test_row_scorer_diagnostics_equal_the_policys(policy, tok, verl_episodes):
    episodes = verl_episodes
    config = DiagnosticsConfig(num_pairs=8)
    scorer = RowScorer(tok, policy_logprob_fn(policy), max_rows=5)
    native = run_diagnostics(policy, episodes, config, DiagnosticsState(), generator=torch.Generator().manual_seed(3))
    rows = run_diagnostics(scorer, episodes, config, DiagnosticsState(), generator=torch.Generator().manual_seed(3))
    assert native.keys() == rows.keys() and unknown_keys(list(rows)) == []
    assert native["diag/first_turn/columns"] == 3.0  # three distinct first prompts
    assert scorer.rows_scored > 0
    for key, value in native.items():
        if isinstance(value, str):
            assert rows[key] == value, key
        else:
            assert math.isclose(rows[key], value, rel_tol=1e-5, abs_tol=1e-5), (key, rows[key], value)


def test_row_scorer_checks_what_the_function_returns(tok):
    scorer = RowScorer(tok, lambda prompts, responses: [torch.zeros(1) for _ in prompts])
    with pytest.raises(ValueError, match="returned 1 log-probs for a 2-token response"):
        scorer.score([[1]], [[2, 3]])
    assert scorer.score([[1], [1]], [[], [2]])[0].shape == (0,)  # empty continuations are not sent
    with pytest.raises(ValueError, match="max_rows must be >= 1"):
        RowScorer(tok, lambda p, r: [], max_rows=0)


def test_metrics_record_keeps_catalogued_keys_and_renames_verls():
    metrics = {
        "filter/kept_ratio": 0.5,
        "actor/pg_loss": torch.tensor(0.25),
        "timing_s/step": 3,
        "perf/throughput": 7.0,
        "diag/trajectory/regime": "template collapse",
        "rollout/success": float("nan"),
    }
    record = mirl_record(4, metrics, is_known)
    assert record["iteration"] == 4 and record["filter/kept_ratio"] == 0.5
    assert record["train/policy_loss"] == 0.25 and record["time/iteration"] == 3.0
    assert record["diag/trajectory/regime"] == "template collapse"
    assert "perf/throughput" not in record and "rollout/success" not in record  # unknown; not finite


def test_mirl_report_reads_the_metrics_file(tmp_path):
    sink = MetricsFile(tmp_path / "run")
    for step in (1, 2):
        sink.write(step, {"filter/kept_ratio": 0.25 * step, "diag/trajectory/est/mi_estimate": 0.1})
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [1, 2]
    run = read_run(tmp_path / "run")
    assert run.metrics.get("filter/kept_ratio").values.tolist() == [0.25, 0.5]
