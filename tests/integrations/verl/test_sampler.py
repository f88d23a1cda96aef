"""SNRFilterSampler against veRL's own ReplayBuffer and TransferQueue on a local CPU Ray.

TransferQueue needs Ray with at least 3 logical CPUs (it hangs with 2), so Ray starts with num_cpus=4. One Ray
and one TransferQueue (conftest) serve the whole session. Each test writes fresh prompt groups through veRL's own
code: ``PPOTrainer._submit_batch_to_rollout`` registers the prompts, veRL's ``AgentLoopWorkerTQ`` (in process)
splits the batch and runs ``rollout.n`` sessions per prompt (``_run_prompt``, which sets each prompt's status), and
its ``_agent_loop_postprocess`` writes every row and its tags. Only the agent loop is the test's: each session
returns the reward the test chose (``RETURNS[p, k]``) and a one-turn mirl record, where the ``mirl`` agent loop
would play an episode (``test_end_to_end.py`` runs that one). Needs veRL.
"""

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("verl", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transfer_queue as tq  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput  # noqa: E402
from verl.trainer.ppo.v1 import AgentLoopWorkerTQ, PPOTrainer  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from mirl.catalogue import unknown_keys  # noqa: E402
from mirl.filtering import select_groups  # noqa: E402
from mirl.integrations.verl.launch import compose  # noqa: E402
from mirl.integrations.verl.sampler import SNRFilterSampler  # noqa: E402

PARTITION, SAMPLES = "train", 4
SETTING = Path(__file__).resolve().parents[3] / "configs/verl/sokoban-grpo-topp09-0.5b-1gpu.yaml"


@pytest.fixture(autouse=True)
def empty_partition(transfer_queue):  # the session's Ray and TransferQueue (conftest)
    yield
    listed = (tq.kv_list() or {}).get(PARTITION, {})
    if listed:
        tq.kv_clear(keys=list(listed), partition_id=PARTITION)


def record(reward: float, action: str) -> dict:
    turn = {
        "start": 3,
        "length": 2,
        "reasoning": [0, 1],
        "reward": reward,
        "format_valid": True,
        "actions_valid": True,
        "finish_reason": "stop",
        "actions": [action],
    }
    return {
        "env": "bandit",
        "seed": 1,
        "options": "{}",
        "success": reward >= 1.0,
        "end_reason": "success",
        "turns": [turn],
    }


class FixedReturnsWorker(AgentLoopWorkerTQ.__ray_actor_class__):
    """veRL's AgentLoopWorkerTQ whose sessions return chosen rewards instead of playing an agent loop."""

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        k, returns = kwargs["session_id"], kwargs.pop("returns")
        out = AgentLoopOutput(
            prompt_ids=[1, 2, 3],
            response_ids=[4, 5, 6 + k],
            response_mask=[1, 1, 1],
            response_logprobs=[0.0] * 3,
            reward_score=float(returns[k]),
            num_turns=2,
            metrics=AgentLoopMetrics(),
            extra_fields={
                "mirl": record(float(returns[k]), f"arm{k % 2}"),
                "min_global_steps": 0,
                "max_global_steps": 0,
            },
        )
        return await self._agent_loop_postprocess(out, trajectory["validate"], **kwargs)


@pytest.fixture(scope="module")
def rollout(model_dir, transfer_queue, in_process):
    config = compose(SETTING, [f"actor_rollout_ref.model.path={model_dir}", f"actor_rollout_ref.rollout.n={SAMPLES}"])
    OmegaConf.resolve(config)
    return in_process(FixedReturnsWorker(config, llm_client=None))


def put_groups(rollout, returns: torch.Tensor) -> list[str]:
    """Submit one prompt per row of ``returns`` (P, K) through veRL's trainer and worker; returns the uids."""
    uids = [str(uuid.uuid4()) for _ in range(returns.shape[0])]
    batch = tu.get_tensordict(
        {
            "uid": np.array(uids, dtype=object),
            "index": np.arange(len(uids)),
            "returns": np.array([row.tolist() for row in returns] + [None], dtype=object)[:-1],
        }
    )
    tu.assign_non_tensor_data(batch, "global_steps", 1)
    assert returns.shape[1] == SAMPLES, "the worker runs actor_rollout_ref.rollout.n sessions per prompt"
    trainer = SimpleNamespace(trainer_mode="sync", global_steps=1, agent_loop_manager=rollout)
    PPOTrainer._submit_batch_to_rollout(trainer, batch)  # veRL's method; it reads only these three attributes
    return uids


def sampler(refill=None, **filter_block):
    kwargs = OmegaConf.create({"filter": filter_block, "max_empty_steps": filter_block.pop("max_empty_steps", 5)})
    return SNRFilterSampler(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs=kwargs,
        refill_fn=refill or (lambda n: n),
        poll_interval=0.05,
    )


def stored_keys() -> set[str]:
    return set((tq.kv_list() or {}).get(PARTITION, {}))


def kept_uids(batch) -> list[str]:
    return sorted({key.split("_")[0] for key in batch.keys})


RETURNS = torch.tensor(
    [
        [0.0, 1.0, 1.0, 0.0],
        [1.0, 1.0, 1.0, 1.0],
        [0.0, 0.0, 0.0, 0.1],
        [0.0, 0.0, 0.0, 0.0],
        [0.2, 1.0, 0.0, 1.0],
        [0.5, 0.5, 0.5, 0.5],
    ],
    dtype=torch.float64,
)  # (P=6, K=4)


def test_keeps_exactly_the_groups_select_groups_keeps_and_clears_the_rest(rollout):
    uids = put_groups(rollout, RETURNS)
    batch, metrics = sampler(strategy="top_p", value=0.9, include_zero=False).sample(1, PARTITION, len(uids))
    want = select_groups(RETURNS, strategy="top_p", value=0.9, include_zero=False).keep
    assert kept_uids(batch) == sorted(u for u, keep in zip(uids, want.tolist(), strict=True) if keep)
    assert len(batch.keys) == len(set(batch.keys)) == 4 * int(want.sum())  # whole groups, no row twice
    assert stored_keys() == set(batch.keys)  # dropped rows and every prompt tag are gone before any compute
    assert metrics["filter/kept_count"] == float(want.sum())
    assert metrics["filter/kept_trajectories"] == len(batch.keys)
    # zero spread: group 1 all succeed (too easy); groups 3 and 5 fail with two different arms (too coarse)
    assert metrics["filter/groups_too_easy"] == 1.0 and metrics["filter/groups_too_coarse"] == 2.0
    assert metrics["filter/groups_mixed"] == 3.0 and metrics["rollout/episodes"] == 24.0
    assert unknown_keys([k for k in metrics if k.startswith(("filter/", "rollout/"))]) == []


def test_filter_off_keeps_every_group(rollout):
    uids = put_groups(rollout, RETURNS)
    batch, metrics = sampler(strategy="none").sample(1, PARTITION, len(uids))
    assert kept_uids(batch) == sorted(uids) and len(batch.keys) == RETURNS.numel()
    assert metrics["filter/kept_ratio"] == 1.0


def test_dapo_exact_zero_std_rule_is_a_special_case(rollout):
    uids = put_groups(rollout, RETURNS)
    dapo = ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        refill_fn=lambda n: n,
        filter_groups_metric="reward",
        train_batch_size=len(uids),
        gen_batch_size=1,
    )
    dapo._sync_metadata_from_transfer_queue()
    evicted, _ = dapo._dapo_filtered_keys(PARTITION)  # veRL: groups whose rewards have exactly zero std
    batch, _ = sampler(strategy="min_p", value=0.0, include_zero=False).sample(1, PARTITION, len(uids))
    assert set(kept_uids(batch)) == set(uids) - evicted
    assert len(evicted) == 3  # groups 1, 3, 5 of RETURNS


def test_an_empty_selection_is_refilled_with_fresh_prompts(rollout):
    put_groups(rollout, torch.zeros(2, SAMPLES, dtype=torch.float64))  # no group has spread
    fresh = []
    refill = lambda n: fresh.extend(put_groups(rollout, RETURNS[:n]))  # noqa: E731
    batch, metrics = sampler(refill, strategy="top_p").sample(1, PARTITION, 2)
    assert kept_uids(batch) == sorted(fresh[:1])  # of RETURNS[:2] only group 0 has spread
    assert stored_keys() == set(batch.keys) and metrics["filter/empty_streak"] == 0.0


def test_consecutive_empty_selections_stop_training(rollout):
    put_groups(rollout, torch.zeros(2, SAMPLES, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="kept no group in 1 consecutive"):
        sampler(strategy="top_p", include_zero=False, max_empty_steps=1).sample(1, PARTITION, 2)
    assert stored_keys() == set()
