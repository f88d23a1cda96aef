"""Reading other frameworks' rollout files: veRL's dump and TRL's completions (written by their own code, see
tests/fixtures/diagnose/README.md), RAGEN's export, chat and prompt/completion JSONL; detection, --format
mismatches, groups, the reasoning regex and the readers' bounds."""

import json
import math
import os
import sys
import time
from pathlib import Path

import pytest

from mirl.diagnostics import reasoning as reasoning_module
from mirl.diagnostics import records as records_module
from mirl.diagnostics.formats import detect
from mirl.diagnostics.offline import read_rollouts
from mirl.diagnostics.reasoning import ReasoningRegex, with_reasoning, with_reasoning_regex
from mirl.diagnostics.records import load_records
from mirl.errors import InputFileError, UserError
from mirl.rollout.parsing import decode
from mirl.rollout.prompts import render_chat

from .helpers import TOK, grid_episodes

FIXTURES = Path(__file__).parents[1] / "fixtures" / "diagnose"
VERL_DUMP = FIXTURES / "verl" / "1.jsonl"
TRL_COMPLETIONS = FIXTURES / "trl" / "completions" / "completions_00001.parquet"


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def pc(prompt, completion, **extra) -> dict:
    return {"prompt": prompt, "completion": completion, **extra}


def test_verl_dump_is_read_as_veRL_wrote_it():
    fmt, records = load_records(VERL_DUMP)
    assert fmt == "verl" and len(records) == 12
    assert set(records[0]) == {"input", "output", "gts", "score", "step", "acc"}  # acc: a reward extra info
    episodes = read_rollouts(VERL_DUMP, TOK)
    # no uid in the dump: the 2 completions of each of the 6 prompts share the decoded prompt text
    assert [(e.group, e.sample) for e in episodes] == [(g, k) for g in range(6) for k in range(2)]
    for episode, record in zip(episodes, records, strict=True):
        (turn,) = episode.turns
        assert turn.context_ids == tuple(TOK.encode(record["input"]))  # as written: no template, no <think>
        assert turn.response_ids == tuple(TOK.encode(record["output"], add_special_tokens=False))
        assert turn.reward == record["score"] and all(math.isnan(lp) for lp in turn.response_logprobs)
        assert turn.reasoning_span is None  # the tiny model's noise closes no </think>
    assert "<|im_start|>" not in records[0]["input"] and records[0]["input"].endswith("assistant\n")
    (opened,) = with_reasoning(episodes[:1], "open", TOK)[0].turns
    assert decode(TOK, opened.reasoning_ids) == records[0]["output"].strip()


def test_trl_completions_parquet_is_read_with_the_chat_template():
    pytest.importorskip("pyarrow")
    fmt, rows = load_records(TRL_COMPLETIONS)
    assert fmt == "trl" and len(rows) == 12 and set(rows[0]) == {"prompt", "completion", "step"}
    episodes = read_rollouts(TRL_COMPLETIONS, TOK)
    assert len({e.group for e in episodes}) == 6 and {e.sample for e in episodes} == {0, 1}
    for episode, row in zip(episodes, rows, strict=True):
        (turn,) = episode.turns
        # TRL did not pre-fill <think>: X is the template with the generation prompt, as TRL rendered it
        assert turn.context_ids == tuple(TOK.encode(render_chat(TOK, row["prompt"]), add_special_tokens=False))
        assert decode(TOK, turn.response_ids) == row["completion"][0]["content"]


@pytest.mark.parametrize(
    ("record", "fmt"),
    [
        ({"schema": 1, "turns": []}, "mirl"),
        ({"messages": []}, "chat"),
        ({"custom_id": "traj_0", "messages": [], "metadata": {"group_id": 0}}, "ragen"),
        ({"input": "q", "output": "a", "gts": None, "score": 1.0, "step": 2}, "verl"),
        ({"prompt": "q", "completion": "a"}, "prompt-completion"),
        ({"steps": []}, None),
    ],
)
def test_the_format_is_told_by_the_first_records_keys(record, fmt):
    assert detect(record) == fmt


def test_parquet_is_told_by_its_bytes_whatever_its_name(tmp_path):
    pytest.importorskip("pyarrow")
    renamed = tmp_path / "rollouts.jsonl"
    renamed.write_bytes(TRL_COMPLETIONS.read_bytes())
    assert load_records(renamed)[0] == "trl"


@pytest.mark.parametrize(
    ("given", "fmt", "message"),
    [
        ("chat", "verl", r"--format verl reads veRL's rollout dump \('input', 'output'\), but this file holds chat"),
        ("verl", "mirl", r"--format mirl reads mirl episodes \('turns'\), but this file holds veRL's rollout dump"),
        ("verl", "prompt-completion", "pass --format verl or leave --format out"),
        ("chat", "ragen", "--format ragen reads RAGEN's JSONL export"),
    ],
)
def test_a_named_format_the_file_does_not_hold_is_an_error(tmp_path, given, fmt, message):
    examples = {
        "chat": {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
        "verl": {"input": "q", "output": "a", "score": 0.0, "step": 1},
    }
    path = write_jsonl(tmp_path / "f.jsonl", [examples[given]])
    with pytest.raises(InputFileError, match=f"f.jsonl:1: .*{message}"):
        load_records(path, fmt)


def test_a_parquet_file_under_a_jsonl_format_is_an_error():
    with pytest.raises(InputFileError, match="is a parquet file .* --format chat reads JSONL; pass --format trl"):
        load_records(TRL_COMPLETIONS, "chat")


def test_formats_that_share_keys_may_be_named_for_each_other(tmp_path):
    """A RAGEN export is chat JSONL too: named as chat it is grouped by prompts instead of group_id."""
    messages = [{"role": "user", "content": "state A"}, {"role": "assistant", "content": "<think>a</think>"}]
    ragen = [{"custom_id": f"traj_{i}", "messages": messages, "metadata": {"group_id": i}} for i in range(2)]
    path = write_jsonl(tmp_path / "ragen.jsonl", ragen)
    assert [e.group for e in read_rollouts(path, TOK)] == [0, 1]  # RAGEN's group_id
    assert [e.group for e in read_rollouts(path, TOK, "chat")] == [0, 0]  # identical prompts
    assert load_records(write_jsonl(tmp_path / "p.jsonl", [pc("q", "a")]), "trl")[0] == "trl"


def test_ragen_export_fields_give_groups_rewards_and_success(tmp_path):
    """Records with the fields RAGEN's export writes (agent_proxy._save_as_jsonl): custom_id, user/assistant
    messages without a system message, metadata.group_id / total_reward / success."""

    def traj(i, group, state, reply, reward, success):
        messages = [{"role": "user", "content": state}, {"role": "assistant", "content": reply}]
        metadata = {"env_id": i, "group_id": group, "num_turns": 1, "total_reward": reward, "success": success}
        return {"custom_id": f"traj_{i}", "messages": messages, "metadata": metadata}

    path = write_jsonl(
        tmp_path / "val_rollouts.jsonl",
        [traj(0, 7, "A", "<think>go</think><answer>Up</answer>", 1.0, True), traj(1, 7, "B", "x</think>", 0.0, False)],
    )
    first, second = read_rollouts(path, TOK)
    assert first.group == second.group == 0 and (first.sample, second.sample) == (0, 1)  # one group_id
    assert (first.turns[-1].reward, first.success, second.success) == (1.0, True, False)
    assert first.turns[0].context_ids == tuple(
        TOK.encode(render_chat(TOK, [{"role": "user", "content": "A"}]) + "<think>")
    )
    assert decode(TOK, second.turns[0].reasoning_ids) == "x"  # <think> pre-filled, as RAGEN's agents do


def test_prompt_completion_groups_from_ids_else_identical_prompts_per_step(tmp_path):
    records = [
        pc("Grid A\n", "<think>a1</think>", reward=1.0),
        pc("Grid A\n", "<think>a2</think>"),
        pc("Grid B\n", "<think>b</think>"),
        pc("Grid A\n", "<think>a3</think>", step=2),  # another step: another group
        pc("Grid C\n", "<think>c</think>", uid="u1"),
        pc("Grid D\n", "<think>d</think>", uid="u1"),  # the file's uid wins over the prompt
    ]
    episodes = read_rollouts(write_jsonl(tmp_path / "pc.jsonl", records), TOK)
    assert [(e.group, e.sample) for e in episodes] == [(0, 0), (0, 1), (1, 0), (2, 0), (3, 0), (3, 1)]
    assert [decode(TOK, e.turns[0].reasoning_ids) for e in episodes] == ["a1", "a2", "b", "a3", "c", "d"]
    # the text rule: the lead up to <think> joins X, which is the prompt as written
    assert episodes[0].turns[0].context_ids == tuple(TOK.encode("Grid A\n<think>"))
    assert episodes[0].turns[0].reward == 1.0


def test_conversational_prompt_completion_is_rendered_with_the_template(tmp_path):
    prompt = [{"role": "user", "content": "Grid A"}]
    completion = [{"role": "assistant", "content": [{"type": "text", "text": "ok <think>z</think>"}]}]
    (episode,) = read_rollouts(write_jsonl(tmp_path / "c.jsonl", [pc(prompt, completion)]), TOK)
    (turn,) = episode.turns
    assert turn.context_ids == tuple(TOK.encode(render_chat(TOK, prompt) + "ok <think>", add_special_tokens=False))
    assert decode(TOK, turn.reasoning_ids) == "z"


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (pc("q", [{"role": "assistant", "content": "a"}]), "must both be strings or both be message lists"),
        (pc([{"role": "user", "content": "q"}], [{"role": "robot", "content": "a"}]), "completion\\[0\\]: expected"),
        (pc([{"role": "user", "content": [{"type": "image"}]}], []), "prompt\\[0\\]: 'content' must be a string"),
        (pc("q", "a", reward=float("nan")), "field 'reward' must be a finite number"),
        (pc("q", "a", uid=[1]), "field 'uid' must be a string, a number"),
        ({"input": "q", "output": 3}, "field 'output' must be a string, got 3"),
        ({"input": "q", "output": "a", "score": None}, "field 'score' must be a finite number"),
        ({"custom_id": "t", "messages": [{"role": "user", "content": "q"}], "metadata": {}}, "metadata.group_id"),
    ],
)
def test_records_of_other_formats_are_checked_with_line_and_field(tmp_path, record, message):
    good = {"input": "q", "output": "a"} if "input" in record else record
    if "prompt" in record:
        good = pc("q", "a")
    if "custom_id" in record:
        good = {**record, "metadata": {"group_id": 1}}
    path = write_jsonl(tmp_path / "bad.jsonl", [good, record])
    with pytest.raises(InputFileError, match=f"bad.jsonl:2: .*{message}"):
        load_records(path)


# ------------------------------------------------------------------------------------------ --reasoning-regex


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("<r>(.*?</r>", "does not compile"),
        ("<r>.*?</r>", "exactly one capture group .* has 0"),
        ("(<r>)(.*?)</r>", "exactly one capture group .* has 2; make other groups non-capturing"),
        ("", "must hold 1 to 1000 characters"),
        ("a" * 1001, "must hold 1 to 1000 characters, got 1001"),
    ],
)
def test_a_bad_regex_is_refused_with_the_fix(pattern, message):
    with pytest.raises(UserError, match=message):
        ReasoningRegex.compile(pattern)


def test_a_regex_that_backtracks_without_end_is_stopped_and_the_reply_counted(monkeypatch):
    monkeypatch.setattr(reasoning_module, "SEARCH_TIMEOUT_S", 0.05)
    rule = ReasoningRegex.compile(r"((?:x+x+)+)y")
    start = time.perf_counter()
    assert rule.span("x" * 5000) is None and rule.span("xxy") == (0, 2)
    assert time.perf_counter() - start < 1.0 and rule.budget.skipped == ["a reply"]
    assert "ran past its time share on 1 reply (a reply)" in rule.budget.note()


def test_the_think_regex_on_mirl_episodes_equals_the_recorded_spans():
    """Parity: mirl's closed rule written as a regex finds the same token spans the rollout recorded."""
    episodes = grid_episodes(num_groups=3, samples=2, num_turns=2)
    again = with_reasoning_regex(episodes, ReasoningRegex.compile(r"<think>(.*?)</think>"), TOK)
    assert [t.reasoning_span for e in again for t in e.turns] == [t.reasoning_span for e in episodes for t in e.turns]
    assert all(t.reasoning_span is not None for e in again for t in e.turns)
    none = with_reasoning_regex(episodes, ReasoningRegex.compile(r"<plan>(.*?)</plan>"), TOK)
    assert all(t.reasoning_span is None for e in none for t in e.turns)


def test_a_regex_moves_the_lead_into_x_and_takes_its_group_as_z(tmp_path):
    path = write_jsonl(
        tmp_path / "r.jsonl",
        [pc("Grid A\n", "Plan: <reasoning> go down </reasoning> Down"), pc("Grid A\n", "no tags here")],
    )
    rule = ReasoningRegex.compile(r"<reasoning>(.*?)</reasoning>")
    tagged, untagged = read_rollouts(path, TOK, regex=rule)
    assert tagged.turns[0].context_ids == tuple(TOK.encode("Grid A\nPlan: <reasoning>"))
    # the smallest token span covering "go down": the token " go" straddles the stripped space
    assert decode(TOK, tagged.turns[0].reasoning_ids) == " go down"
    assert untagged.turns[0].reasoning_span is None and tagged.group == untagged.group


def test_a_regex_in_a_conversation_keeps_the_history_as_written(tmp_path):
    messages = [
        {"role": "user", "content": "Grid A"},
        {"role": "assistant", "content": "<r>first</r> Up"},
        {"role": "user", "content": "Grid B"},
        {"role": "assistant", "content": "<r>second</r> Down"},
    ]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": messages}])
    (episode,) = read_rollouts(path, TOK, regex=ReasoningRegex.compile(r"<r>(.*?)</r>"))
    first, second = episode.turns
    assert [decode(TOK, t.reasoning_ids) for t in episode.turns] == ["first", "second"]
    history = decode(TOK, second.context_ids)
    assert "<r>first</r> Up" in history and "<think>" not in history and history.endswith("assistant\n<r>")


# ---------------------------------------------------------------------------------------------------- bounds


def test_parquet_without_pyarrow_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"needs pyarrow; pip install 'mirl\[data\]'"):
        load_records(TRL_COMPLETIONS)


def test_a_damaged_or_foreign_parquet_file_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(b"PAR1" + b"\0" * 64)
    with pytest.raises(InputFileError, match="is not a readable parquet file"):
        load_records(damaged)
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"text": ["a"]}), other)
    with pytest.raises(InputFileError, match="needs columns 'prompt' and 'completion'"):
        load_records(other)


def test_files_past_the_record_and_line_limits_are_refused(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "many.jsonl", [pc("q", "a")] * 3)
    monkeypatch.setattr(records_module, "MAX_RECORDS", 2)
    with pytest.raises(InputFileError, match="holds more than 2 records; split it"):
        load_records(path)
    pytest.importorskip("pyarrow")
    with pytest.raises(InputFileError, match="holds 12 rows \\(at most 2\\)"):
        load_records(TRL_COMPLETIONS)
    monkeypatch.setattr(records_module, "MAX_RECORDS", 10)
    monkeypatch.setattr(records_module, "MAX_LINE_BYTES", 10)
    with pytest.raises(InputFileError, match="many.jsonl:1: longer than 10 bytes"):
        load_records(path)
    wide = tmp_path / "wide.jsonl"
    wide.write_text('{"prompt": "q", "completion": "a", "step": ' + "9" * 30 + "}\n")
    monkeypatch.setattr(records_module, "MAX_LINE_BYTES", 1 << 20)
    with pytest.raises(InputFileError, match="wide.jsonl:1: not valid JSON \\(an integer of 30 digits"):
        load_records(wide)


@pytest.mark.parametrize("module", ["formats", "retokenise", "reasoning"])
def test_doctests(module):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(f"mirl.diagnostics.{module}")).failed == 0


def test_a_parquet_log_of_other_column_names_is_read_through_fields(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from mirl.diagnostics.formats import parse_fields

    path = tmp_path / "log.parquet"
    table = pa.table({"query": ["A", "A", "B"], "response": ["x", "y", "z"], "pid": [1, 1, 2], "r": [0.5, 1.0, 0.0]})
    pq.write_table(table, path)
    fmt, records = load_records(path, fields=parse_fields("prompt=query,completion=response,group=pid,reward=r"))
    assert fmt == "prompt-completion" and records.lines == [1, 2, 3]
    assert records[1] == {"prompt": "A", "completion": "y", "group": 1, "reward": 1.0}
    with pytest.raises(InputFileError, match="needs columns 'prompt' and 'completion'.* --fields prompt=COLUMN"):
        load_records(path)


def test_a_fifo_or_a_folder_is_refused_after_it_is_opened(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError, match="is not a regular file"):
        load_records(fifo)
    with pytest.raises(InputFileError, match="is a directory"):
        load_records(tmp_path)
