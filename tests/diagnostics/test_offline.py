"""Offline diagnosis: reading mirl and generic chat JSONL, and the summary the CLI prints."""

import dataclasses
import json
import math

import pytest

from mirl.catalogue import unknown_keys
from mirl.diagnostics.offline import diagnose, read_rollouts, summary_rows
from mirl.diagnostics.records import load_records
from mirl.errors import InputFileError
from mirl.policy.tiny import tiny_policy
from mirl.rollout import write_episodes

from .helpers import TOK, grid_episodes

SYSTEM = {"role": "system", "content": "You solve grid puzzles."}


def chat(user: str, *replies: str, **extra) -> dict:
    messages = [SYSTEM]
    for t, reply in enumerate(replies):
        messages += [{"role": "user", "content": f"{user} turn {t + 1}"}, {"role": "assistant", "content": reply}]
    return {"messages": messages, **extra}


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def chat_file(tmp_path):
    return write_jsonl(
        tmp_path / "chat.jsonl",
        [
            chat(
                "Grid A",
                "<think>I see grid A</think><answer>Up</answer>",
                "then down</think><answer>Down</answer>",
                group="seed-1",
                success=True,
                reward=1.0,
            ),
            chat("Grid A", "<think>maybe left</think><answer>Left</answer>", group="seed-1"),
            chat("Grid B", "<think>grid B here</think><answer>Right</answer>"),
            chat("Grid B", "<think></think><answer>Right</answer>"),
        ],
    )


def test_chat_records_become_episodes_with_exact_contexts(chat_file):
    episodes = read_rollouts(chat_file, TOK)
    assert [(e.group, e.sample, e.num_turns) for e in episodes] == [(0, 0, 2), (0, 1, 1), (1, 0, 1), (1, 1, 1)]
    first, second = episodes[0].turns
    rendered = TOK.apply_chat_template(
        [SYSTEM, {"role": "user", "content": "Grid A turn 1"}], tokenize=False, add_generation_prompt=True
    )
    assert first.context_ids == tuple(TOK.encode(rendered + "<think>"))
    assert TOK.decode(first.response_ids) == "I see grid A</think><answer>Up</answer>"
    assert TOK.decode(first.reasoning_ids).startswith("I see grid A")
    # turn 2's history shows turn 1 as the model saw it; its own reply had no <think>, which is pre-filled
    history = TOK.decode(second.context_ids)
    assert "<think>I see grid A</think><answer>Up</answer>" in history and history.endswith("assistant\n<think>")
    assert second.response_text == "<think>then down</think><answer>Down</answer>"
    assert second.actions == ("Down",) and second.format_valid
    assert (first.reward, second.reward, episodes[0].success) == (0.0, 1.0, True)
    assert all(math.isnan(lp) for lp in first.response_logprobs)
    assert episodes[3].turns[0].reasoning_ids == ()  # empty Z: the samplers skip and count it


def test_mirl_records_are_read_with_groups_kept_apart_per_iteration(tmp_path):
    episodes = grid_episodes(num_groups=2, samples=2, num_turns=1)
    path = tmp_path / "rollouts.jsonl"
    write_episodes(path, episodes, iteration=1)
    write_episodes(path, episodes, iteration=2)
    read = read_rollouts(path, TOK)
    assert [e.group for e in read] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [dataclasses.replace(e, group=o.group) for e, o in zip(read[4:], episodes, strict=True)] == episodes


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "holds no JSON lines"),
        (["{not json"], "not valid JSON"),
        (["[1, 2]"], "expected a JSON object"),
        (['{"steps": []}'], "neither 'turns'"),
        (['{"messages": [{"role": "robot", "content": "hi"}]}'], "bad.jsonl:1: message 0: expected"),
        (['{"messages": []}'], "'messages' must be a non-empty list"),
    ],
)
def test_unreadable_files_say_what_is_wrong(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_rollouts(path, TOK)


def _record(**changes) -> dict:
    """One valid mirl episode record with ``changes`` applied to it (``turn__key`` changes its first turn)."""
    from mirl.rollout.io import episode_to_record

    record = episode_to_record(grid_episodes(num_groups=1, samples=1, num_turns=1)[0], iteration=1)
    for key, value in changes.items():
        target, key = (record["turns"][0], key[len("turn__") :]) if key.startswith("turn__") else (record, key)
        if value is _DROP:
            del target[key]
        else:
            target[key] = value
    return record


_DROP = object()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (_record(turns=_DROP), "field 'turns' is missing"),
        ({"schema": 1, "turns": []}, "field 'env' is missing"),
        (_record(schema=2), "field 'schema' must be 1"),
        (_record(turn__reasoning_span=_DROP), "field 'turns\\[0\\].reasoning_span' is missing"),
        (_record(turn__reasoning_span=[0, 999]), "field 'turns\\[0\\].reasoning_span' must satisfy 0 <= start <= end"),
        (_record(turn__reward=None), "field 'turns\\[0\\].reward' must be a finite number, got null"),
        (_record(turn__response_logprobs=[0.0]), "field 'turns\\[0\\].response_logprobs' must have one entry"),
        (_record(turn__context_ids=["a"]), "field 'turns\\[0\\].context_ids' must be a non-empty list of token ids"),
        (_record(group="g"), "field 'group' must be an integer"),
        (_record(turns=[1]), "field 'turns\\[0\\]' must be a turn object"),
        (_record(iteration="one"), "field 'iteration' must be an integer or null"),
    ],
)
def test_mirl_records_are_checked_with_line_and_field(tmp_path, bad, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [_record(), _record(), bad])
    with pytest.raises(InputFileError, match=f"bad.jsonl:3: {message}"):
        load_records(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"group": [1, 2]}, "field 'group' must be a string, a number, true/false or null"),
        ({"group": {"a": 1}}, "field 'group' must be"),
        ({"reward": None}, "field 'reward' must be a finite number, got null"),
        ({"reward": "1"}, "field 'reward' must be a finite number"),
        ({"success": "yes"}, "field 'success' must be true or false"),
    ],
)
def test_chat_records_are_checked_with_line_and_field(tmp_path, extra, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [chat("A", "<think>a</think>"), chat("B", "<think>b</think>", **extra)])
    with pytest.raises(InputFileError, match=f"bad.jsonl:2: {message}"):
        load_records(path)


def test_token_ids_past_the_scorers_vocabulary_are_named_with_their_line(tmp_path):
    """Rollouts written with a bigger tokenizer would index past the embedding table; the error comes first."""
    vocab = len(TOK)
    bad = _record(turn__response_ids=[vocab], turn__response_logprobs=[0.0], turn__reasoning_span=None)
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps(_record()) + "\n\n" + json.dumps(bad) + "\n", encoding="utf-8")  # a blank line 2
    message = f"other.jsonl:3: field 'turns\\[0\\].response_ids' holds token id {vocab}, but the scorer's tokenizer"
    with pytest.raises(InputFileError, match=message):
        read_rollouts(path, TOK)
    edge = _record(turn__response_ids=[vocab - 1], turn__response_logprobs=[0.0], turn__reasoning_span=None)
    assert len(read_rollouts(write_jsonl(tmp_path / "ok.jsonl", [edge]), TOK)) == 1  # the last id is fine


def test_a_good_file_loads_without_a_tokenizer(tmp_path, chat_file):
    assert load_records(chat_file)[0] == "chat" and len(load_records(chat_file)[1]) == 4
    path = write_episodes(tmp_path / "r.jsonl", grid_episodes(num_groups=2, samples=2, num_turns=2))
    fmt, records = load_records(path)
    assert fmt == "mirl" and len(records) == 4


def test_diagnose_reports_catalogue_keys_and_a_summary_row_per_scope(chat_file):
    policy = tiny_policy(seed=4)
    episodes = read_rollouts(chat_file, TOK)
    out = diagnose(policy, episodes, scopes=("first_turn", "trajectory"), num_pairs=6, seed=3)
    assert unknown_keys(out) == []
    assert out["time/scoring"] > 0
    assert out["diag/first_turn/empty_reasoning"] == 1.0 and out["diag/first_turn/columns"] == 2.0
    rows = summary_rows(out)
    assert [row["scope"] for row in rows] == ["first_turn", "trajectory"]
    first = rows[0]
    assert first["mi_estimate"] == out["diag/first_turn/est/mi_estimate"]
    assert first["retrieval@1"] == out["diag/first_turn/est/retrieval_acc"]
    assert first["chance@8"] == out["diag/first_turn/est/retrieval_chance@8"] == 1.0  # min(1, 8 * 1/2)
    est = "diag/first_turn/est"
    assert first["mi_contrast"] == out[f"{est}/mi_contrast"]
    assert first["mi_contrast_interval"] == (out[f"{est}/mi_contrast_ci_low"], out[f"{est}/mi_contrast_ci_high"])
    assert first["agnostic_share"] == out[f"{est}/agnostic_share"]
    # chat replies are re-parsed, not written in mirl's reply format: their validity is not judged
    assert "diag/invalid_frac" not in out and "invalid_frac" not in first
    again = diagnose(policy, episodes, scopes=("first_turn", "trajectory"), num_pairs=6, seed=3)
    assert {k: v for k, v in again.items() if k != "time/scoring"} == {
        k: v for k, v in out.items() if k != "time/scoring"
    }
