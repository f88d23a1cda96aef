"""MirlTrainer's diagnostics on CPU: the actor's log-prob round trip through TransferQueue and the diagnostics hook
against the native diagnostics. Needs veRL (``bash scripts/test-verl.sh``). The metrics hook runs inside veRL's real
``_compute_metrics`` in ``test_end_to_end.py``.

The actor worker group (FSDP workers on GPUs in veRL) is the conftest's ``ActorWorkers``: the same
``compute_log_prob(KVBatchMeta)`` contract, computed by the tiny model.
"""

import math

import pytest

pytest.importorskip("verl", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from mirl.config import DiagnosticsConfig  # noqa: E402
from mirl.diagnostics.run import DiagnosticsState, run_diagnostics  # noqa: E402
from mirl.integrations.verl.groups import StepSelection  # noqa: E402
from mirl.integrations.verl.metrics_file import MetricsFile  # noqa: E402
from mirl.integrations.verl.scoring import policy_logprob_fn  # noqa: E402
from mirl.integrations.verl.settings import read_settings  # noqa: E402
from mirl.integrations.verl.trainer import PARTITION, MirlTrainer, actor_logprob_fn  # noqa: E402
from mirl.policy.tiny import tiny_policy  # noqa: E402


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


def test_actor_log_probs_round_trip_through_transfer_queue(transfer_queue, actor_workers, policy):
    workers = actor_workers(policy)
    prompts, responses = [[5, 6, 7], [8, 9], [10, 11, 12, 13]], [[20, 21], [22, 23, 24], [25]]
    got = actor_logprob_fn(workers, dp_size=2)(prompts, responses)
    want = policy_logprob_fn(policy)(prompts, responses)
    assert workers.rows_seen == [4]  # 3 rows padded to a multiple of dp size 2
    assert [g.shape for g in got] == [(2,), (3,), (1,)]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w.float(), rtol=0, atol=1e-6)
    assert not (transfer_queue.kv_list() or {}).get(PARTITION)  # the scoring rows are cleared


def bare_trainer(tmp_path, tok, workers, episodes, every=5):
    """A MirlTrainer with only what its diagnostics hook reads (test_end_to_end.py builds one with veRL's __init__)."""
    config = OmegaConf.create(
        {
            "data": {"train_batch_size": 3},
            "trainer": {"default_local_dir": str(tmp_path)},
            "actor_rollout_ref": {"rollout": {"n": 2, "temperature": 1.0, "top_p": 1.0}},
            "mirl": {"diagnostics": {"enabled": True, "every": every, "num_pairs": 8}},
        }
    )
    trainer = MirlTrainer.__new__(MirlTrainer)
    trainer.mirl = read_settings(config)
    trainer.metrics_file = MetricsFile(trainer.mirl.run_dir)
    trainer.diagnostics_state = DiagnosticsState.from_config(trainer.mirl.diagnostics)
    trainer.pending_diagnostics = {}
    trainer.tokenizer, trainer.actor_rollout_wg = tok, workers
    trainer.replay_buffer = type(
        "Buffer",
        (),
        {"last": StepSelection(keep_keys=(), drop_keys=(), uids=(), returns=torch.zeros(3, 2), episodes=episodes)},
    )()
    return trainer


def test_diagnostics_hook_equals_the_native_diagnostics(actor_workers, policy, tok, verl_episodes, tmp_path):
    trainer = bare_trainer(tmp_path, tok, actor_workers(policy), verl_episodes)
    got = trainer.diagnose(5)
    generator = torch.Generator().manual_seed(trainer.mirl.config.trainer.seed * 1_000_003 + 5)
    want = run_diagnostics(
        policy, verl_episodes, DiagnosticsConfig(num_pairs=8), DiagnosticsState(), generator=generator
    )
    assert got.keys() == want.keys() and "diag/first_turn/columns" in got
    for key, value in want.items():  # rel_tol: a first z-score divides by a tiny EMA spread (values ~ -660)
        close = isinstance(value, float) and math.isclose(got[key], value, rel_tol=1e-5, abs_tol=1e-5)
        same = got[key] == value or close
        assert same, (key, got[key], value)
    assert trainer.diagnose(6) == {}  # not scheduled (every 5: steps 1, 5, 10, ...)
