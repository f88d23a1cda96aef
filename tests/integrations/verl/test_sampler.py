"""SNRFilterSampler against veRL's own ReplayBuffer and TransferQueue on a local CPU Ray.

TransferQueue needs Ray with at least 3 logical CPUs (it hangs with 2), so Ray starts with num_cpus=4. One Ray
and one TransferQueue (conftest) serve the whole session; each test writes fresh prompt groups the way veRL's agent-loop
worker does (a prompt tag per uid, one row per session under ``{uid}_{session}_0``). Needs veRL.
"""

import uuid

import pytest

pytest.importorskip("verl", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")

import torch  # noqa: E402
import transfer_queue as tq  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

from mirl.filtering import select_groups  # noqa: E402
from mirl.integrations.verl.sampler import SNRFilterSampler  # noqa: E402
from mirl.trainer.metrics import unknown_keys  # noqa: E402

PARTITION = "train"


@pytest.fixture(autouse=True)
def empty_partition(transfer_queue):  # the session's Ray and TransferQueue (conftest)
    yield
    listed = (tq.kv_list() or {}).get(PARTITION, {})
    if listed:
        tq.kv_clear(keys=list(listed), partition_id=PARTITION)


def record(reward: float, action: str) -> dict:
    turn = {"start": 3, "length": 2, "reasoning": [0, 1], "reward": reward, "format_valid": True,
            "actions_valid": True, "finish_reason": "stop", "actions": [action]}
    return {"env": "bandit", "seed": 1, "options": "{}", "success": reward >= 1.0, "end_reason": "success",
            "turns": [turn]}


def put_groups(returns: torch.Tensor) -> list[str]:
    """Write finished groups as veRL's agent-loop worker does; returns the uids in order."""
    uids, keys, fields, tags = [], [], [], []
    for p in range(returns.shape[0]):
        uid = str(uuid.uuid4())
        uids.append(uid)
        tq.kv_put(key=uid, partition_id=PARTITION, tag={"is_prompt": True, "status": "finished", "global_steps": 1})
        for k in range(returns.shape[1]):
            reward = float(returns[p, k])
            out = AgentLoopOutput(
                prompt_ids=[1, 2, 3], response_ids=[4, 5, 6 + k], response_mask=[1, 1, 1],
                response_logprobs=[0.0] * 3, reward_score=reward, num_turns=2, metrics=AgentLoopMetrics(),
                extra_fields={"mirl": record(reward, f"arm{k % 2}")},
            )
            keys.append(f"{uid}_{k}_0")
            fields.append(out.as_dict() | {"uid": uid, "session_id": k})
            tags.append({"status": "success", "seq_len": 6, "global_steps": 1})
    tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(fields), tags=tags, partition_id=PARTITION)
    return uids


def sampler(refill=None, **filter_block):
    kwargs = OmegaConf.create({"filter": filter_block, "max_empty_steps": filter_block.pop("max_empty_steps", 5)})
    return SNRFilterSampler(
        trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
        sampler_kwargs=kwargs, refill_fn=refill or (lambda n: n), poll_interval=0.05,
    )


def stored_keys() -> set[str]:
    return set((tq.kv_list() or {}).get(PARTITION, {}))


def kept_uids(batch) -> list[str]:
    return sorted({key.split("_")[0] for key in batch.keys})


RETURNS = torch.tensor(
    [[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.1], [0.0, 0.0, 0.0, 0.0],
     [0.2, 1.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]], dtype=torch.float64)  # (P=6, K=4)


def test_keeps_exactly_the_groups_select_groups_keeps_and_clears_the_rest():
    uids = put_groups(RETURNS)
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


def test_filter_off_keeps_every_group():
    uids = put_groups(RETURNS)
    batch, metrics = sampler(strategy="none").sample(1, PARTITION, len(uids))
    assert kept_uids(batch) == sorted(uids) and len(batch.keys) == RETURNS.numel()
    assert metrics["filter/kept_ratio"] == 1.0


def test_dapo_exact_zero_std_rule_is_a_special_case():
    uids = put_groups(RETURNS)
    dapo = ReplayBuffer(
        trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
        sampler_kwargs={}, refill_fn=lambda n: n, filter_groups_metric="reward", train_batch_size=len(uids),
        gen_batch_size=1,
    )
    dapo._sync_metadata_from_transfer_queue()
    evicted, _ = dapo._dapo_filtered_keys(PARTITION)  # veRL: groups whose rewards have exactly zero std
    batch, _ = sampler(strategy="min_p", value=0.0, include_zero=False).sample(1, PARTITION, len(uids))
    assert set(kept_uids(batch)) == set(uids) - evicted
    assert len(evicted) == 3  # groups 1, 3, 5 of RETURNS


def test_an_empty_selection_is_refilled_with_fresh_prompts():
    put_groups(torch.zeros(2, 3, dtype=torch.float64))  # no group has spread
    fresh = []
    batch, metrics = sampler(lambda n: fresh.extend(put_groups(RETURNS[:n])), strategy="top_p").sample(1, PARTITION, 2)
    assert kept_uids(batch) == sorted(fresh[:1])  # of RETURNS[:2] only group 0 has spread
    assert stored_keys() == set(batch.keys) and metrics["filter/empty_streak"] == 0.0


def test_consecutive_empty_selections_stop_training():
    put_groups(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="kept no group in 1 consecutive"):
        sampler(strategy="top_p", include_zero=False, max_empty_steps=1).sample(1, PARTITION, 2)
    assert stored_keys() == set()
