"""mirl's turn-level estimators through veRL 0.9.1's own advantage-estimator lookup and ``compute_advantage``, on
episodes laid out by the agent loop's ``output_fields``; parity with veRL's GRPO and with the native trainer; and
one training step's rows through veRL's worker, replay buffer, batch balancing and advantage stage (below)."""

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")

import transfer_queue as tq  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.checkpoint_engine.base import CheckpointEngineManager  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.trainer.ppo.v1 import AgentLoopWorkerTQ, get_trainer_cls  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

import mirl.integrations.verl.plugin  # noqa: E402,F401  (what veRL's entry point imports)
from mirl.algorithms import get_preset  # noqa: E402
from mirl.integrations.verl import credit  # noqa: E402
from mirl.integrations.verl.episode import output_fields  # noqa: E402
from mirl.integrations.verl.launch import check, compose  # noqa: E402
from mirl.rollout import collate  # noqa: E402
from mirl.trainer import credit as native  # noqa: E402
from mirl.trainer import stages  # noqa: E402
from mirl.types import EnvSpec, Episode, Turn  # noqa: E402

# (group, sample) -> turn rewards; group 1 ties on the episode return (0.75) but not per turn. Binary fractions:
# veRL carries rewards in float32, where 0.9 - 0.1 and 0.3 + 0.3 + 0.2 differ in the last bit, and a group std of
# 1e-8 against GRPO's eps 1e-6 would turn that rounding into advantages of a few hundredths (in veRL's GRPO too).
REWARDS = {
    (0, 0): [-0.125, -0.125, 1.0],
    (0, 1): [-0.125, 0.0],
    (0, 2): [0.5],
    (1, 0): [-0.125, 0.875],
    (1, 1): [0.875, -0.125],
    (1, 2): [0.25, 0.25, 0.25],
}
KEYS = {(1, 0): ["s", "a"], (1, 1): ["s", "b"], (1, 2): ["s", "a", "c"]}  # state keys of group 1's turns


def episode(group, sample, rewards, keys=None):
    turns, context = [], [1, 2, 3]
    for u, reward in enumerate(rewards):
        reply = [10 + u, 20 + u, 30 + u][: 1 + (u + sample) % 3]
        key = keys[u] if keys else None
        turns.append(Turn(tuple(context), tuple(reply), (-0.5,) * len(reply), "", "", None, (), reward, True, True,
                          state_key=key))  # fmt: skip
        context = context + reply + [4, 5]
    return Episode(EnvSpec("sokoban", 0), group, sample, tuple(turns), success=False, end_reason="max_turns")


EPISODES = [episode(p, k, rewards, KEYS.get((p, k))) for (p, k), rewards in REWARDS.items()]


def verl_batch(episodes, per_turn_rewards: bool, padding: int = 0) -> tuple[DataProto, list[dict]]:
    """The agent loop's rows as veRL batches them: right-padded responses, the reward on the last response token
    (what veRL does with ``reward_score``) or each turn's reward on its last token (:func:`place_turn_rewards`);
    then ``padding`` rows like veRL's ``is_padding`` rows (no sampled token, reward 0, a uid of their own)."""
    fields = [output_fields(e) for e in episodes]
    length = max(len(f["response_ids"]) for f in fields)
    mask = torch.zeros(len(fields) + padding, length, dtype=torch.long)
    rewards = torch.zeros(len(fields) + padding, length)
    for b, f in enumerate(fields):
        mask[b, : len(f["response_mask"])] = torch.tensor(f["response_mask"])
        rewards[b, len(f["response_ids"]) - 1] = f["reward_score"]
    records = [f["extra_fields"]["mirl"] for f in fields]
    if per_turn_rewards:
        rewards[: len(fields)] = credit.place_turn_rewards(records, length)
    uids = np.array([f"uid{e.group}" for e in episodes] + ["pad"] * padding, dtype=object)
    batch = DataProto.from_single_dict(
        {"response_mask": mask, "token_level_rewards": rewards, "responses": mask.clone(), "uid": uids}
    )
    return batch, records


def trained(advantages: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """Per row, the advantages of its trained tokens in order."""
    return [advantages[b][mask[b].bool()].tolist() for b in range(mask.shape[0])]


def test_veRL_finds_the_registered_estimators():
    assert get_adv_estimator_fn("mirl_turn") is credit.turn_advantage
    assert get_adv_estimator_fn("mirl_step_groups") is credit.step_group_advantage


@pytest.mark.parametrize("estimator", ["mirl_turn", "mirl_step_groups"])
def test_with_the_return_on_the_last_token_both_equal_veRLs_grpo(estimator):
    data, _ = verl_batch(EPISODES, per_turn_rewards=False)
    ours = compute_advantage(data, estimator, config=AlgoConfig(adv_estimator=estimator))
    theirs = compute_advantage(verl_batch(EPISODES, False)[0], "grpo", config=AlgoConfig(adv_estimator="grpo"))
    mask = data.batch["response_mask"]
    torch.testing.assert_close(ours.batch["advantages"] * mask, theirs.batch["advantages"] * mask)
    assert ours.batch["advantages"].abs().sum() > 0


def native_advantages(preset):
    batch = collate(EPISODES, pad_id=0)
    returns = stages.group_returns(EPISODES, 2, 3)
    turns = native.turn_table(EPISODES, 2, 3)
    return trained(native.advantages(preset, batch, returns, EPISODES, None, turns)[0], batch.response_mask)


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_mirl_turn_on_per_turn_rewards_equals_the_native_turn_credit(gamma):
    data, _ = verl_batch(EPISODES, per_turn_rewards=True)
    config = AlgoConfig(adv_estimator="mirl_turn", gamma=gamma)
    ours = compute_advantage(data, "mirl_turn", gamma=gamma, config=config)
    expected = native_advantages(get_preset("grpo", credit="turn", credit_gamma=gamma))
    got = trained(ours.batch["advantages"], data.batch["response_mask"])
    for row, want in zip(got, expected, strict=True):
        assert row == pytest.approx(want, rel=1e-6, abs=1e-7)


def test_mirl_step_groups_with_state_keys_equals_the_native_step_groups():
    data, records = verl_batch(EPISODES, per_turn_rewards=True)
    assert [[t["state_key"] for t in r["turns"]] for r in records] == [[t.state_key for t in e.turns] for e in EPISODES]
    fn = get_adv_estimator_fn("mirl_step_groups")
    advantages, returns = fn(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=AlgoConfig(adv_estimator="mirl_step_groups"),
        non_tensor_batch={"mirl": np.array(records, dtype=object)},
    )
    expected = native_advantages(get_preset("grpo", credit="step_groups"))
    for row, want in zip(trained(advantages, data.batch["response_mask"]), expected, strict=True):
        assert row == pytest.approx(want, rel=1e-6, abs=1e-7)
    assert torch.equal(advantages, returns)
    # group 1 ties (0.75 each): its advantages come from the step group of state "s" and of state "a" only
    assert any(abs(a) > 1e-3 for row in expected[3:] for a in row)


@pytest.mark.parametrize("estimator", ["mirl_turn", "mirl_step_groups"])
def test_padding_rows_get_nothing_and_change_nothing(estimator):
    # veRL pads a batch to a multiple of the data-parallel size with rows of no sampled token under a fresh uid
    # (here 8 of them, more than a group's 3 samples); their layouts are copies of the first row's
    data, records = verl_batch(EPISODES, per_turn_rewards=True, padding=8)
    with credit.row_records(records + [records[0]] * 8):
        out = compute_advantage(data, estimator, config=AlgoConfig(adv_estimator=estimator))
    got = trained(out.batch["advantages"], data.batch["response_mask"])
    expected = native_advantages(get_preset("grpo", credit=estimator.removeprefix("mirl_")))
    for row, want in zip(got[:6], expected, strict=True):
        assert row == pytest.approx(want, rel=1e-6, abs=1e-7)
    assert out.batch["advantages"][6:].abs().sum() == 0


def test_response_turns_and_placed_rewards_follow_the_layout():
    data, records = verl_batch(EPISODES[:1], per_turn_rewards=True)
    mask = data.batch["response_mask"]
    turns = credit.response_turns(mask)
    assert turns[mask.bool()].tolist() == [0, 1, 1, 2, 2, 2]  # replies of 1, 2 and 3 tokens
    placed = data.batch["token_level_rewards"][0]
    assert placed[mask[0].bool()].tolist() == [-0.125, 0.0, -0.125, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="outside"):
        credit.place_turn_rewards(records, 3)


def test_docstring_examples():
    import doctest

    assert doctest.testmod(credit).failed == 0


# A veRL training step's own path on CPU: the rows go through veRL's AgentLoopWorkerTQ (its
# ``_agent_loop_postprocess`` writes them and their ``rm_scores`` into TransferQueue), the registered ``mirl``
# trainer samples them with its replay buffer (mirl's sampler, filter off), runs ``on_sample_end``,
# ``_balance_batch`` (four data-parallel ranks: 6 rows are padded to 12 with veRL's ``is_padding`` rows) and
# ``_compute_advantage``, which looks the estimator up in veRL's registry. Only the agent loop is the test's: each
# session returns the ``output_fields`` of one of EPISODES where the ``mirl`` agent loop would play one.
SETTING = "configs/verl/sokoban-grpo-topp09-0.5b-1gpu.yaml"


class LayoutWorker(AgentLoopWorkerTQ.__ray_actor_class__):
    """veRL's AgentLoopWorkerTQ whose session k of prompt p returns the agent loop's fields of EPISODES[3p + k]."""

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        fields = output_fields(EPISODES[3 * int(kwargs["group"]) + int(kwargs["session_id"])])
        fields["extra_fields"] |= {"min_global_steps": 0, "max_global_steps": 0}
        out = AgentLoopOutput(metrics=AgentLoopMetrics(), **fields)
        return await self._agent_loop_postprocess(out, trajectory["validate"], **kwargs)


class FourRanks:
    """The actor worker group as ``_balance_batch`` asks it (GPU workers in veRL): four data-parallel ranks."""

    _dispatch_info: dict = {}

    def _query_dispatch_info(self, _role):
        return [0, 1, 2, 3]


def run_step(estimator: str, model_dir: str, run_dir, in_process) -> tuple[list[list[float]], list[list[float]]]:
    """One step's sampled rows through veRL's stages; per episode (EPISODES order) the trained tokens' rewards
    and advantages as veRL's ``_compute_advantage`` stored them."""
    config = check(compose(Path(__file__).resolve().parents[3] / SETTING, [
        f"actor_rollout_ref.model.path={model_dir}", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=3",
        f"algorithm.adv_estimator={estimator}", "mirl.filter.strategy=none", "mirl.diagnostics.enabled=false",
        f"trainer.default_local_dir={run_dir}",
    ]))  # fmt: skip
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config)
    trainer._init_tokenizer()
    trainer.actor_rollout_wg, trainer.global_steps, trainer.curr_step_profile = FourRanks(), 1, False
    trainer.checkpoint_manager = CheckpointEngineManager(
        config=omega_conf_to_dataclass(config.actor_rollout_ref.rollout.checkpoint_engine), actor_wg=None, replicas=[]
    )
    trainer.agent_loop_manager = in_process(LayoutWorker(config, llm_client=None))
    prompts = tu.get_tensordict({"uid": np.array(["p0", "p1"], dtype=object), "index": np.arange(2),
                                 "group": np.arange(2)})  # fmt: skip
    tu.assign_non_tensor_data(prompts, "global_steps", 1)
    trainer._submit_batch_to_rollout(prompts)
    batch, _ = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    trainer.on_sample_end()
    batch = trainer._balance_batch(batch, metrics={})
    assert len(batch.keys) == 12 and sum(tag.get("is_padding", False) for tag in batch.tags) == 6
    logprobs = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["rollout_log_probs"])
    tq.kv_batch_put(
        keys=batch.keys,
        partition_id="train",  # what _compute_old_log_prob writes (bypass mode)
        fields=TensorDict({"old_log_probs": logprobs["rollout_log_probs"]}, batch_size=len(batch)),
    )
    batch = trainer._compute_advantage(batch, metrics={})
    data = tq.kv_batch_get(
        keys=batch.keys,
        partition_id="train",
        select_fields=["uid", "session_id", "rm_scores", "advantages", "response_mask"],
    )
    rows = {}
    for i in range(len(batch.keys)):
        uid, session = (getattr(data[name][i], "data", data[name][i]) for name in ("uid", "session_id"))
        mask = data["response_mask"][i].bool()
        if uid in ("p0", "p1"):
            rows[3 * int(uid[1]) + int(session)] = (
                data["rm_scores"][i][mask].tolist(),
                data["advantages"][i][mask].tolist(),
            )
    tq.kv_clear(keys=batch.keys, partition_id="train")
    return [rows[b][0] for b in range(6)], [rows[b][1] for b in range(6)]


@pytest.mark.parametrize(("estimator", "credit_name"), [("mirl_turn", "turn"), ("mirl_step_groups", "step_groups")])
def test_a_verl_step_trains_on_each_turns_reward_and_state_key(
    estimator, credit_name, transfer_queue, model_dir, tmp_path, in_process
):
    rewards, advantages = run_step(estimator, model_dir, tmp_path, in_process)
    for row, e in zip(rewards, EPISODES, strict=True):  # each turn's reward on its last sampled token
        assert row == [r for turn in e.turns for r in [0.0] * (len(turn.response_ids) - 1) + [turn.reward]]
    expected = native_advantages(get_preset("grpo", credit=credit_name))
    for row, want in zip(advantages, expected, strict=True):
        assert row == pytest.approx(want, rel=1e-6, abs=1e-7)
    assert any(abs(a) > 1e-3 for row in expected[3:] for a in row)  # group 1 ties on the return yet trains


def test_a_verl_grpo_step_keeps_the_return_on_the_last_token(transfer_queue, model_dir, tmp_path, in_process):
    rewards, advantages = run_step("grpo", model_dir, tmp_path, in_process)
    for row, e in zip(rewards, EPISODES, strict=True):
        assert row[:-1] == [0.0] * (len(row) - 1) and row[-1] == pytest.approx(e.total_reward)
    assert all(a == 0.0 for row in advantages[3:] for a in row)  # group 1 ties: GRPO gives it nothing


def test_step_groups_refuse_layouts_that_are_not_the_rows():
    data, records = verl_batch(EPISODES, per_turn_rewards=True)
    fn = get_adv_estimator_fn("mirl_step_groups")
    with credit.row_records(records[::-1]), pytest.raises(ValueError, match="not these rows"):
        fn(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            config=AlgoConfig(adv_estimator="mirl_step_groups"),
        )
