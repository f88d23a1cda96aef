"""mirl envs through TRL's rollout_func on real GRPOTrainers: masks, sampling settings, stop strings, a short run."""

from __future__ import annotations

import itertools
import math

import pytest

trl = pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

import torch  # noqa: E402

from mirl.catalogue import unknown_keys  # noqa: E402
from mirl.integrations.trl import (  # noqa: E402
    CollapseDiagnosticsCallback,
    MirlRollout,
    SNRFilterGRPOTrainer,
    dataset,
    episode_return,
    parse_instance,
)
from mirl.integrations.trl.diagnostics import batch_episodes  # noqa: E402
from mirl.integrations.trl.envs import first_observation, instance_spec  # noqa: E402
from mirl.policy.scripted import ScriptedPolicy  # noqa: E402
from mirl.policy.tiny import tiny_model, tiny_tokenizer  # noqa: E402

MOVES = ("Down", "Jump", "Right", "Left", "Up", "Down || Down", "Right || Down")  # "Jump": format penalty
ROLLOUT = {"max_turns": 3}


def _mover():
    """Replies whose reasoning quotes the state and whose move cycles, so the K samples of a group differ."""
    calls = itertools.count()

    def reply(context: str) -> str:
        state = "".join(context.rsplit("State:", 1)[-1].split())[:6]
        move = MOVES[next(calls) % len(MOVES)]
        return f"{state} {move}</think><answer>{move}</answer>"

    return reply


def _scripted(rollout=ROLLOUT, **kwargs) -> MirlRollout:
    mover = _mover()
    return MirlRollout(rollout, policy=lambda t: ScriptedPolicy(t.processing_class, mover), **kwargs)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture
def grpo_args(trl_args):
    return trl_args


def _trainer(grpo_args, tmp_path, rollout, *, cls=None, filter=None, prompts=2, dtype=torch.float32, **overrides):
    overrides = {"per_device_train_batch_size": 4 * prompts, "max_completion_length": 48, **overrides}
    return (cls or trl.GRPOTrainer)(
        model=tiny_model(seed=0, dtype=dtype),
        reward_funcs=episode_return,
        args=grpo_args(tmp_path, filter=filter, **overrides),
        train_dataset=dataset("frozenlake", prompts),
        processing_class=tiny_tokenizer(),
        rollout_func=rollout,
    )


def test_dataset_keys_seeds_observations_and_errors():
    rows = dataset("frozenlake", 3, "validation", first=2)
    assert [parse_instance(p) for p in rows["prompt"]] == [("frozenlake", "validation", s) for s in (5, 7, 9)]
    for prompt in rows["prompt"]:  # the key, then the state the episode starts from (TRL's completion tables)
        key, shown = prompt.split("\n", 1)
        assert shown == first_observation(instance_spec(key)) and len(shown) > 0
    with pytest.raises(ValueError, match="registered"):
        dataset("frozenlak", 2)
    with pytest.raises(ValueError, match="split"):
        dataset("frozenlake", 2, "test")
    with pytest.raises(ValueError, match="instance key"):
        parse_instance("What is 2 + 2?")


def test_env_mask_excludes_every_env_token(tmp_path, grpo_args):
    rollout = _scripted()
    trainer = _trainer(grpo_args, tmp_path, rollout)
    keys = [k for k in dataset("frozenlake", 2)["prompt"] for _ in range(2)]
    out = rollout(keys, trainer)
    episodes = rollout.last_episodes
    eos = trainer.processing_class.eos_token_id
    assert [e.group for e in episodes] == [0, 0, 1, 1] and [e.sample for e in episodes] == [0, 1, 0, 1]
    env_tokens = 0
    for row, episode in enumerate(episodes):
        ids, mask = out["completion_ids"][row], out["env_mask"][row]
        assert len(ids) == len(mask) == len(out["logprobs"][row])
        assert tuple(out["prompt_ids"][row]) == episode.turns[0].context_ids
        model_ids = [t for t, m in zip(ids, mask, strict=True) if m == 1]
        env_ids = [t for t, m in zip(ids, mask, strict=True) if m == 0]
        # trained tokens are exactly the sampled replies; masked ones exactly the env's next user messages, and
        # the eos closing a reply that ended on </answer>
        assert model_ids == [t for turn in episode.turns for t in turn.response_ids]
        bridges = [
            t
            for previous, turn in zip(episode.turns, episode.turns[1:], strict=False)
            for t in turn.context_ids[len(previous.context_ids) + len(previous.response_ids) :]
        ]
        assert episode.turns[-1].finish_reason == "stop" and env_ids == [*bridges, eos] and ids[-1] == eos
        sampled = [lp for lp, m in zip(out["logprobs"][row], mask, strict=True) if m == 1]
        assert sampled == pytest.approx([lp for turn in episode.turns for lp in turn.response_logprobs])
        assert out["episode_return"][row] == pytest.approx(episode.total_reward)
        env_tokens += len(env_ids)
    assert env_tokens > len(episodes)  # multi-turn: there were env tokens besides the closing eos
    assert episode_return(None, out["episode_return"]) == out["episode_return"]


def test_reply_cut_at_the_token_cap_stays_truncated(tmp_path, grpo_args):
    rollout = _scripted({"max_turns": 1})
    trainer = _trainer(grpo_args, tmp_path, rollout, max_completion_length=3)  # every scripted reply is longer
    out = rollout(dataset("frozenlake", 2)["prompt"], trainer)
    assert [e.turns[-1].finish_reason for e in rollout.last_episodes] == ["length", "length"]
    assert all(len(ids) == 3 and ids[-1] != trainer.processing_class.eos_token_id for ids in out["completion_ids"])


def test_sampling_settings_come_from_the_grpo_config(tmp_path, grpo_args):
    config = MirlRollout({"max_turns": 2}).sampling_config(
        grpo_args(tmp_path, temperature=0.7, top_p=0.9, max_completion_length=20)
    )
    assert (config.temperature, config.top_p, config.max_new_tokens, config.max_turns) == (0.7, 0.9, 20, 2)
    same = MirlRollout({"temperature": 0.7}).sampling_config(grpo_args(tmp_path, temperature=0.7))
    assert same.temperature == 0.7  # an explicit setting that agrees is fine
    with pytest.raises(ValueError, match=r"rollout temperature=0.7 differs from GRPOConfig.temperature=1.0"):
        MirlRollout({"temperature": 0.7}).sampling_config(grpo_args(tmp_path))
    with pytest.raises(ValueError, match="rollout max_new_tokens=64 differs from GRPOConfig.max_completion_length"):
        MirlRollout({"max_new_tokens": 64}).sampling_config(grpo_args(tmp_path))
    with pytest.raises(ValueError, match="no top_k"):
        MirlRollout().sampling_config(grpo_args(tmp_path, top_k=5))


def test_first_update_ratio_is_one(tmp_path, grpo_args):
    # the tiny model samples at the GRPOConfig's temperature and top-p; TRL's own log-probs of the sampled tokens
    # (its fused lm head at GRPOConfig.temperature) must equal the sampling log-probs: ratio 1 at the first update
    trainer = _trainer(
        grpo_args, tmp_path, MirlRollout({"max_turns": 2}), dtype=torch.float64, temperature=0.7, top_p=0.9,
        max_completion_length=6, learning_rate=0.0,
    )  # fmt: skip
    trainer.train()
    checked = 0
    for batch in trainer._buffered_inputs:
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad():
            trl_logp, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, attention, batch["completion_ids"].shape[1]
            )
        mask = (batch["completion_mask"] * batch["tool_mask"]).bool()
        log_ratio = (trl_logp - batch["sampling_per_token_logps"])[mask]
        # float64 model, fused lm head at float32 precision: ~1e-6; sampling at another temperature: ~1
        assert float(log_ratio.abs().max()) < 1e-4, float(log_ratio.abs().max())
        checked += int(mask.sum())
    assert checked >= 8 * 2  # every row sampled at least two tokens


def test_reward_functions_receive_each_turns_reward_and_state_key(tmp_path, grpo_args):
    # one step of TRL's GRPOTrainer: its scoring passes the rollout's extra columns to every reward function
    seen = []

    def turn_sum(completions, turn_rewards, turn_state_keys, **kwargs):
        seen.append((turn_rewards, turn_state_keys))
        return [sum(rewards) for rewards in turn_rewards]

    rollout = _scripted()
    trainer = trl.GRPOTrainer(
        model=tiny_model(seed=0), reward_funcs=[episode_return, turn_sum],
        args=grpo_args(tmp_path, per_device_train_batch_size=8, max_completion_length=48),
        train_dataset=dataset("frozenlake", 2), processing_class=tiny_tokenizer(), rollout_func=rollout,
    )  # fmt: skip
    trainer.train()
    ((turn_rewards, state_keys),) = seen
    episodes = rollout.last_episodes
    assert turn_rewards == [[turn.reward for turn in e.turns] for e in episodes]
    assert state_keys == [[turn.state_key for turn in e.turns] for e in episodes]
    assert all(key is not None for keys in state_keys for key in keys)  # FrozenLake keys the player's cell
    assert [sum(r) for r in turn_rewards] == pytest.approx([e.total_reward for e in episodes])
    assert any(len(r) > 1 for r in turn_rewards)


def test_use_vllm_is_refused_in_one_line(tmp_path, grpo_args):
    args = grpo_args(tmp_path, filter={"strategy": "none"})
    args.use_vllm = True  # set after construction: on this CPU machine vllm is not installed
    with pytest.raises(ValueError, match="set use_vllm=False") as caught:
        SNRFilterGRPOTrainer(
            model=tiny_model(seed=0),
            reward_funcs=episode_return,
            args=args,
            train_dataset=dataset("frozenlake", 2),
            processing_class=tiny_tokenizer(),
            rollout_func=MirlRollout(),
        )
    assert "\n" not in str(caught.value)


def test_answer_stop_is_not_truncated(tmp_path, grpo_args):
    trainer = _trainer(grpo_args, tmp_path, _scripted(), mask_truncated_completions=True, max_steps=1)
    trainer.train()
    assert trainer.state.log_history[0]["completions/clipped_ratio"] == 0.0
    for batch in trainer._buffered_inputs:  # no row lost its loss mask to mask_truncated_completions
        assert bool(((batch["completion_mask"] * batch["tool_mask"]).sum(dim=1) > 0).all())


def test_observation_of_other_env_options_is_refused(tmp_path, grpo_args):
    rollout = _scripted(env_options={"frozenlake": {"size": 5}})  # the dataset was built with size 4
    trainer = _trainer(grpo_args, tmp_path, rollout)
    with pytest.raises(ValueError, match="env_options"):
        rollout(dataset("frozenlake", 2)["prompt"], trainer)


def test_batch_episodes_groups_rows_by_prompt():
    inputs = {
        "prompt_ids": torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6]]),
        "prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1]]),
        "completion_ids": torch.tensor([[11, 12, 0], [13, 0, 0], [14, 15, 16]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
    }
    episodes = batch_episodes(inputs, tiny_tokenizer())
    assert [e.group for e in episodes] == [0, 1, 0]
    assert episodes[0].turns[0].context_ids == (5, 6) and episodes[2].turns[0].response_ids == (14, 15, 16)
    assert episodes[1].turns[0].reasoning_ids == (13,)  # no </think>: Z is the whole completion


def test_short_run_logs_finite_filter_and_diag_metrics(tmp_path, grpo_args):
    trainer = _trainer(
        grpo_args, tmp_path, _scripted(), cls=SNRFilterGRPOTrainer, prompts=8, per_device_train_batch_size=8,
        max_steps=2, learning_rate=1e-3, optim="adamw_torch",
        filter={"strategy": "top_p", "value": 0.9, "include_zero": True},
    )  # fmt: skip
    callback = CollapseDiagnosticsCallback(
        trainer, {"every": 1, "num_pairs": 8, "scopes": ["first_turn", "trajectory"]}
    )
    trainer.add_callback(callback)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    for entry in logs:
        keys = [k for k in entry if k.startswith(("filter/", "diag/"))]
        assert any(k.startswith("filter/") for k in keys) and any(k.startswith("diag/") for k in keys)
        assert unknown_keys(keys) == []
        assert all(math.isfinite(entry[k]) for k in keys), {k: entry[k] for k in keys}
    assert "diag/first_turn/est/mi_estimate" in logs[0] and "diag/trajectory/regime_id" in logs[0]
    assert isinstance(callback.last_metrics["diag/trajectory/regime"], str)
    assert any(entry["filter/kept_count"] > 0 for entry in logs)  # the filter kept groups with spread
    # TRL's completion table: the prompt column shows the state each episode started from, under its key
    assert all(p.startswith("mirl/frozenlake/train/") and "\n" in p for p in trainer._logs["prompt"])
