"""JSONL round trip of episodes and the append-by-replace write."""

import json

import pytest

from mirl.policy.scripted import ScriptedPolicy
from mirl.rollout import read_episodes, read_records, run_episodes, write_episodes
from mirl.types import EnvSpec

from .helpers import config, reply


@pytest.fixture
def episodes(corridor, tok):
    replies = [
        reply("Right || Jump", think="√ é: two moves"),  # mixed turn, multi-byte text
        "no format<|im_end|>",  # eos, unparsable, no reasoning span
        reply("Right"),
        reply("Left"),
    ]
    policy = ScriptedPolicy(tok, replies + [reply("Right")] * 8)
    specs = [EnvSpec("corridor", 4, {"length": 5}), EnvSpec("corridor", 5)]
    return run_episodes(policy, specs, 2, config(max_turns=3), sampling_seed=1)


def test_round_trip_equals_the_original(tmp_path, episodes):
    path = write_episodes(tmp_path / "rollouts" / "iter_0003.jsonl", episodes, iteration=3)
    assert read_episodes(path) == episodes
    assert any(turn.reasoning_span is None for ep in episodes for turn in ep.turns)
    assert any(turn.finish_reason == "eos" for ep in episodes for turn in ep.turns)


def test_records_hold_the_documented_keys(tmp_path, episodes):
    path = write_episodes(tmp_path / "r.jsonl", episodes, iteration=3)
    records = read_records(path)
    assert len(records) == len(episodes)
    first = records[0]
    assert set(first) == {
        "schema", "env", "seed", "options", "group", "sample", "iteration", "success", "end_reason",
        "return", "system_prompt_ids", "turns",
    }  # fmt: skip
    assert set(first["turns"][0]) == {
        "context_ids", "response_ids", "response_logprobs", "response_text", "observation", "reasoning_span",
        "actions", "reward", "format_valid", "actions_valid", "finish_reason", "state_key",
    }  # fmt: skip
    assert first["iteration"] == 3 and first["options"] == {"length": 5}
    assert first["return"] == episodes[0].total_reward


def test_writes_append_and_leave_no_temporary_files(tmp_path, episodes):
    path = tmp_path / "r.jsonl"
    write_episodes(path, episodes[:1], iteration=0)
    write_episodes(path, episodes[1:], iteration=1)
    assert read_episodes(path) == episodes
    assert [r["iteration"] for r in read_records(path)] == [0, 1, 1, 1]
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]


def test_bad_lines_fail_with_the_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"schema": 1}) + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_records(path)
    path.write_text(json.dumps({"schema": 99}) + "\n")
    with pytest.raises(ValueError, match="expected rollout schema 1"):
        read_episodes(path)


def test_a_link_planted_at_the_target_is_replaced_not_followed(tmp_path, episodes):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    path = tmp_path / "r.jsonl"
    path.symlink_to(victim)
    write_episodes(path, episodes[:1], iteration=0)
    assert victim.read_text() == "keep me\n" and not path.is_symlink()
    assert read_episodes(path) == episodes[:1]  # the link's target was neither read nor kept


def test_lines_that_are_not_objects_fail_with_the_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"schema": 1}) + "\n[1]\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*\(not a JSON object\)"):
        read_records(path)


def test_turns_keep_their_rewards_and_state_keys_through_a_file(tmp_path, tok):
    policy = ScriptedPolicy(tok, [reply("Up"), reply("Jump")] + [reply("Left")] * 4)
    episodes = run_episodes(policy, [EnvSpec("sokoban", 3)], 2, config(max_turns=2), sampling_seed=0)
    read = read_episodes(write_episodes(tmp_path / "r.jsonl", episodes))
    assert read == episodes
    first = read[0]
    # turn 0 starts from the reset state; turn 1 from the state after Up (player (1, 2))
    assert [turn.state_key for turn in first.turns] == ["P2,2 B2,3", "P1,2 B2,3"]
    assert first.turn_rewards == (-0.1, -0.1) and first.total_reward == sum(first.turn_rewards)


def test_files_written_before_state_keys_read_back_with_none(tmp_path, episodes):
    path = write_episodes(tmp_path / "r.jsonl", episodes)
    old = []
    for record in read_records(path):
        for turn in record["turns"]:
            del turn["state_key"]
        old.append(json.dumps(record))
    path.write_text("\n".join(old) + "\n")
    read = read_episodes(path)
    assert all(turn.state_key is None for episode in read for turn in episode.turns)
    assert [e.turn_rewards for e in read] == [e.turn_rewards for e in episodes]


def test_a_state_key_that_is_not_a_string_is_refused(tmp_path, episodes):
    path = write_episodes(tmp_path / "r.jsonl", episodes[:1])
    record = read_records(path)[0]
    record["turns"][0]["state_key"] = [1, 2]
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match="state_key must be a string or null"):
        read_episodes(path)
