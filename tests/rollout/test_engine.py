"""Engine transcripts on the corridor env (cells 0..3, goal at 3, -0.1 per move, +1 at the goal)."""

import dataclasses
import threading
import time

import pytest

from mirl.policy.scripted import ScriptedPolicy
from mirl.rollout import run_episodes
from mirl.rollout.parsing import decode
from mirl.types import EnvSpec

from .helpers import config, reply

PENALTY = -0.1


def play(tok, script, *, groups=1, group_size=1, options=None, **overrides):
    policy = ScriptedPolicy(tok, script)
    specs = [EnvSpec("corridor", seed=p, options=options or {}) for p in range(groups)]
    episodes = run_episodes(policy, specs, group_size, config(**overrides))
    return policy, episodes


def user_texts(tok, policy):
    """The decoded context of every prompt, per generate call."""
    return [[decode(tok, ids) for ids in call] for call in policy.calls]


def test_valid_turns_reach_the_goal(corridor, tok):
    policy, [ep] = play(tok, [reply("Right || right"), reply("RIGHT")])
    first, second = ep.turns
    assert first.observation == "P__G" and second.observation == "__PG"
    assert first.actions == ("Right", "Right") and second.actions == ("Right",)
    assert first.reward == pytest.approx(-0.2, abs=1e-12)  # two moves at -0.1
    assert second.reward == pytest.approx(0.9, abs=1e-12)  # -0.1 + 1 at the goal
    assert ep.total_reward == pytest.approx(0.7, abs=1e-12)
    assert ep.success and ep.end_reason == "success"
    second_prompt = user_texts(tok, policy)[1][0]
    assert "Turn 2." in second_prompt and "Reward of the last turn: -0.2" in second_prompt
    assert "Actions left: 4." in second_prompt  # budget 6 - 2 moves
    assert "unchanged" not in second_prompt


def test_invalid_and_unparsable_turns_are_penalised_and_leave_the_state(corridor, tok):
    policy, [ep] = play(tok, [reply("Jump"), "no tags at all", reply("Right")], max_turns=3)
    jump, garbled, right = ep.turns
    assert jump.format_valid and not jump.actions_valid and jump.actions == ("Jump",)
    assert not garbled.format_valid and not garbled.actions_valid and garbled.actions == ()
    assert jump.reward == PENALTY and garbled.reward == PENALTY
    assert right.actions_valid and right.reward == pytest.approx(-0.1, abs=1e-12)
    assert jump.observation == garbled.observation == right.observation == "P__G"
    prompts = user_texts(tok, policy)
    assert "state is unchanged" in prompts[1][0] and "state is unchanged" in prompts[2][0]
    assert "Actions left: 6." in prompts[2][0]  # rejected actions spend no budget
    assert ep.end_reason == "max_turns" and not ep.success
    assert sum(not turn.actions_valid for turn in ep.turns) == 2  # format penalty count
    assert ep.total_reward == pytest.approx(-0.3, abs=1e-12)  # -0.1 - 0.1 - 0.1


def test_mixed_turn_executes_legal_actions_and_is_penalised(corridor, tok):
    policy, [ep] = play(tok, [reply("Right || Jump"), reply("Right")], max_turns=2)
    mixed = ep.turns[0]
    assert mixed.actions == ("Right", "Jump") and mixed.format_valid and not mixed.actions_valid
    assert mixed.reward == pytest.approx(-0.2, abs=1e-12)  # one move -0.1, penalty -0.1
    assert ep.turns[1].observation == "_P_G"  # the legal move happened
    assert "unchanged" not in user_texts(tok, policy)[1][0]


def test_actions_past_the_per_turn_cap_are_not_executed(corridor, tok):
    # config cap 2, env cap 3: min is 2, so the third Right is dropped without penalty
    _, [ep] = play(tok, [reply("Right || Right || Right")], max_turns=1)
    assert ep.turns[0].actions == ("Right", "Right") and ep.turns[0].actions_valid
    assert ep.turns[0].reward == pytest.approx(-0.2, abs=1e-12)


def test_budget_exhaustion_stops_mid_turn(corridor, tok):
    # budget 3: turn 1 spends 2, turn 2 may step only one of its two moves
    _, [ep] = play(tok, [reply("Right || Right"), reply("Right || Right")], options={"length": 10}, action_budget=3)
    assert ep.end_reason == "action_budget" and ep.num_turns == 2
    assert ep.turns[1].reward == pytest.approx(-0.1, abs=1e-12)  # the second move was never stepped
    assert ep.turns[1].actions_valid  # not a bad turn: the budget, not the reply, stopped it
    assert ep.total_reward == pytest.approx(-0.3, abs=1e-12)


def test_env_termination_without_success_and_truncation(corridor, tok):
    _, [fell] = play(tok, [reply("Left || Right")])
    assert fell.end_reason == "terminated" and not fell.success
    assert fell.turns[0].reward == pytest.approx(-0.1, abs=1e-12)  # Right after the fall is not stepped
    _, [cut] = play(tok, [reply("Right")], options={"max_steps": 1})
    assert cut.end_reason == "truncated" and cut.num_turns == 1


def test_group_layout_and_one_generate_call_per_turn(corridor, tok):
    # P=2 groups x K=2; turn 1 replies go to (0,0), (0,1), (1,0), (1,1) in order
    turn1 = [reply("Right || Right"), reply("Jump"), reply("Left"), reply("Right")]
    turn2 = [reply("Right"), reply("Right"), reply("Right")]  # (0,0) wins, (0,1), (1,1) continue; (1,0) fell
    policy, episodes = play(tok, turn1 + turn2[:2] + [reply("Right")], groups=2, group_size=2, max_turns=2)
    assert [(ep.group, ep.sample) for ep in episodes] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [ep.spec.seed for ep in episodes] == [0, 0, 1, 1]
    assert [len(call) for call in policy.calls] == [4, 3]
    assert [ep.end_reason for ep in episodes] == ["success", "max_turns", "terminated", "max_turns"]
    assert [ep.num_turns for ep in episodes] == [2, 2, 1, 2]


def test_generation_is_chunked_by_batch_size(corridor, tok):
    policy, _ = play(tok, lambda context: reply("Jump"), groups=5, max_turns=2, generation_batch_size=2)
    assert [len(call) for call in policy.calls] == [2, 2, 1, 2, 2, 1]


def test_sampling_seed_is_derived_per_turn_and_chunk(corridor, tok):
    specs = [EnvSpec("corridor", 0)]
    runs = []
    for _ in range(2):
        policy = ScriptedPolicy(tok, lambda context: reply("Jump"))
        run_episodes(policy, specs, 3, config(max_turns=2, generation_batch_size=2), sampling_seed=7)
        runs.append([sampling.seed for sampling in policy.samplings])
    assert runs[0] == runs[1] and len(set(runs[0])) == 4  # 2 turns x 2 chunks, all different
    policy = ScriptedPolicy(tok, lambda context: reply("Jump"))
    run_episodes(policy, specs, 1, config(max_turns=1))
    assert policy.samplings[0].seed is None
    assert policy.samplings[0].stop == ("</answer>",) and policy.samplings[0].max_new_tokens == 64


def test_reply_cut_at_the_length_limit_is_unparsable(corridor, tok):
    _, [ep] = play(tok, [reply("Right", think="a long thought " * 20)], max_turns=1, max_new_tokens=8)
    turn = ep.turns[0]
    assert turn.finish_reason == "length" and len(turn.response_ids) == 8
    assert not turn.format_valid and turn.reward == PENALTY


def test_context_that_cannot_fit_ends_the_episode(corridor, tok):
    policy, [ep] = play(tok, [], max_context_tokens=20)
    assert ep.end_reason == "context_length" and ep.num_turns == 0 and policy.calls == []


def test_single_turn_env_plays_one_turn(corridor, tok, monkeypatch):
    monkeypatch.setattr(corridor, "multi_turn", False)
    _, [ep] = play(tok, [reply("Right")])
    assert ep.num_turns == 1 and ep.end_reason == "max_turns"


def test_bad_inputs_fail_loudly(corridor, tok):
    policy = ScriptedPolicy(tok, [])
    with pytest.raises(ValueError, match="group_size must be >= 1"):
        run_episodes(policy, [EnvSpec("corridor", 0)], 0, config())
    with pytest.raises(ValueError, match="context_mode"):
        run_episodes(policy, [EnvSpec("corridor", 0)], 1, config(context_mode="summary"))
    with pytest.raises(ValueError, match="at least one EnvSpec"):
        run_episodes(policy, [], 1, config())


def test_progress_reports_each_turn(corridor, tok):
    seen = []
    policy = ScriptedPolicy(tok, [reply("Right || Right"), reply("Jump"), reply("Right"), reply("Left")])
    run_episodes(policy, [EnvSpec("corridor", 0)], 2, config(max_turns=2), progress=lambda *a: seen.append(a))
    assert seen == [(0, 2, 2), (1, 2, 2)]


def test_envs_with_concurrent_steps_are_stepped_on_threads_with_the_same_result(corridor, tok, monkeypatch):
    def transcripts(episodes):
        return [[(t.observation, t.reward, t.actions) for t in ep.turns] + [ep.end_reason] for ep in episodes]

    script = lambda context: reply("Right || Right")  # noqa: E731
    _, sequential = play(tok, script, groups=2, group_size=3, max_turns=2)
    threads: set[int] = set()
    active = [0, 0]  # steps in flight now, most ever in flight at once
    lock = threading.Lock()
    step = corridor.step

    def slow_step(self, action):
        with lock:
            threads.add(threading.get_ident())
            active[0] += 1
            active[1] = max(active)
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return step(self, action)

    monkeypatch.setattr(corridor, "step", slow_step)
    monkeypatch.setattr(corridor, "concurrent_steps", True, raising=False)
    _, concurrent = play(tok, script, groups=2, group_size=3, max_turns=2)
    # steps overlap (the speed-up itself is measured by benchmarks/remote_envs.py, not timed here)
    assert active[1] > 1 and len(threads) > 1
    assert transcripts(concurrent) == transcripts(sequential)


def test_reply_is_bounded_by_the_context_budget(corridor, tok):
    # the first context has n tokens; with a budget of n + 5 the reply gets 5 tokens, not max_new_tokens = 64
    probe, [first] = play(tok, [reply("Right")], max_turns=1)
    n = len(first.turns[0].context_ids)
    policy, [ep] = play(tok, [reply("Right", think="a long thought " * 20)], max_turns=1, max_context_tokens=n + 5)
    turn = ep.turns[0]
    assert len(turn.response_ids) == 5 and turn.finish_reason == "context"
    assert policy.samplings[0].max_total_tokens == n + 5
    assert len(turn.context_ids) + len(turn.response_ids) == n + 5


def test_a_policy_that_ignores_the_budget_is_cut(corridor, tok):
    class Greedy(ScriptedPolicy):  # ignores max_total_tokens
        def generate(self, prompts, sampling):
            return super().generate(prompts, dataclasses.replace(sampling, max_total_tokens=None))

    n = len(play(tok, [reply("Right")], max_turns=1)[1][0].turns[0].context_ids)
    policy = Greedy(tok, [reply("Right", think="a long thought " * 20)])
    [ep] = run_episodes(policy, [EnvSpec("corridor", 0)], 1, config(max_turns=1, max_context_tokens=n + 3))
    assert len(ep.turns[0].response_ids) == 3 and ep.turns[0].finish_reason == "context"


def test_the_model_positions_cap_the_budget_with_a_warning(corridor, tok):
    n = len(play(tok, [reply("Right")], max_turns=1)[1][0].turns[0].context_ids)
    policy = ScriptedPolicy(tok, [reply("Right", think="a long thought " * 20)])
    policy.max_positions = n + 4
    with pytest.warns(UserWarning, match=f"exceeds the model's {n + 4} positions"):
        [ep] = run_episodes(policy, [EnvSpec("corridor", 0)], 1, config(max_turns=1))
    assert len(ep.turns[0].context_ids) + len(ep.turns[0].response_ids) == n + 4


def test_a_huge_observation_is_rejected_before_it_is_tokenized(corridor, tok, monkeypatch):
    monkeypatch.setattr(corridor, "render", lambda self: "_" * 500_000)
    lengths = []
    encode = type(tok).encode

    def counting(self, text, *args, **kwargs):
        lengths.append(len(text))
        return encode(self, text, *args, **kwargs)

    monkeypatch.setattr(type(tok), "encode", counting)
    policy, [ep] = play(tok, [], max_context_tokens=1000)
    assert ep.end_reason == "context_length" and ep.num_turns == 0 and policy.calls == []
    assert max(lengths) < 100_000  # only the system prompt was tokenized
