"""`mirl diagnose` on other frameworks' files through the real argument parser: veRL's dump and TRL's completions
as those libraries wrote them (tests/fixtures/diagnose), prompt/completion JSONL, --format and --reasoning-regex."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from mirl.cli import diagnose as diagnose_cli
from mirl.cli import main
from mirl.diagnostics.formats import CHOICES
from mirl.policy.tiny import tiny_policy

FIXTURES = Path(__file__).parents[1] / "fixtures" / "diagnose"


@pytest.fixture
def tiny_scorer(monkeypatch):
    calls = []

    def load(model, **options):
        calls.append(model)
        return tiny_policy(seed=5)

    monkeypatch.setattr(diagnose_cli, "load_policy", load)
    return calls


def one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def diagnose(tmp_path, *args) -> dict:
    out = tmp_path / "diag.json"
    assert main(["diagnose", *map(str, args), "--model", "tiny-test", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_a_veRL_rollout_data_dir_is_diagnosed_and_said_to_be_re_tokenised(tmp_path, tiny_scorer, capsys):
    report = diagnose(tmp_path, FIXTURES / "verl", "--reasoning", "open", "--pairs", "12")
    assert report["rollouts"] == str(FIXTURES / "verl" / "1.jsonl")
    assert (report["format"], report["tokens"], report["episodes"]) == ("verl", "re-tokenised", 12)
    metrics = report["metrics"]
    # 6 prompts x 2 completions, grouped by identical prompts: 6 first-turn columns, every completion a Z
    assert (metrics["diag/first_turn/pairs"], metrics["diag/first_turn/columns"]) == (12.0, 6.0)
    assert metrics["diag/first_turn/empty_reasoning"] == 0.0
    assert "diag/first_turn/est/mi_estimate" in metrics
    err, out = capsys.readouterr()[::-1]
    assert "12 trajectories of veRL's rollout dump, in 6 groups from identical prompts" in err
    assert "re-tokenised with the scoring model's tokenizer, so X and Z are not the exact sampled ids" in err
    assert "input: 12 trajectories of veRL's rollout dump" in out


def test_the_closed_rule_finds_no_reasoning_in_untagged_completions_and_names_the_options(
    tmp_path, tiny_scorer, capsys
):
    report = diagnose(tmp_path, FIXTURES / "verl" / "1.jsonl", "--pairs", "12")
    metrics = report["metrics"]
    assert metrics["diag/first_turn/pairs"] == 0.0 and metrics["diag/first_turn/empty_reasoning"] == 12.0
    assert metrics["diag/first_turn/regime"] == "no_reasoning"
    hint = "12 of 12 replies hold no closed <think>...</think> span, so they have no reasoning to score; "
    assert report["hint"].startswith(hint) and "--reasoning open" in report["hint"]
    assert "--reasoning-regex PATTERN" in report["hint"]
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"mirl diagnose: {report['hint']}"
    # the option it names finds the reasoning, and then nothing is hinted
    opened = diagnose(tmp_path, FIXTURES / "verl" / "1.jsonl", "--pairs", "12", "--reasoning", "open")
    assert opened["metrics"]["diag/first_turn/pairs"] == 12.0 and opened["hint"] is None


def test_a_trl_output_dir_means_its_newest_completions_file(tmp_path, tiny_scorer, capsys):
    pytest.importorskip("pyarrow")
    run = tmp_path / "trl-run" / "completions"
    run.mkdir(parents=True)
    for step in (2, 10):  # by number, not by name
        shutil.copy(FIXTURES / "trl" / "completions" / "completions_00001.parquet", run / f"completions_{step}.parquet")
    report = diagnose(tmp_path, run.parent, "--reasoning", "open", "--pairs", "12")
    assert report["rollouts"] == str(run / "completions_10.parquet")
    assert (report["format"], report["episodes"], report["metrics"]["diag/first_turn/columns"]) == ("trl", 12, 6.0)
    assert "TRL's logged completions, in 6 groups" in capsys.readouterr().err
    assert "tokenizer and chat template" in report["input"]


def test_veRL_step_files_are_taken_by_number(tmp_path, tiny_scorer):
    dump = tmp_path / "dump"
    dump.mkdir()
    for step in (9, 10):
        shutil.copy(FIXTURES / "verl" / "1.jsonl", dump / f"{step}.jsonl")
    assert diagnose(tmp_path, dump, "--pairs", "4")["rollouts"] == str(dump / "10.jsonl")


def test_prompt_completion_with_a_reasoning_regex(tmp_path, tiny_scorer):
    records = [
        {"prompt": f"Grid {g}\n", "completion": f"<reasoning>grid {g} try {k}</reasoning> Up", "reward": 1.0}
        for g in "ABCD"
        for k in range(2)
    ]
    path = tmp_path / "pc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = diagnose(tmp_path, path, "--reasoning-regex", "<reasoning>(.*?)</reasoning>", "--pairs", "8")
    assert report["format"] == "prompt-completion" and report["reasoning"] == "regex <reasoning>(.*?)</reasoning>"
    metrics = report["metrics"]
    assert (metrics["diag/first_turn/pairs"], metrics["diag/first_turn/columns"]) == (8.0, 4.0)
    plain = diagnose(tmp_path, path, "--pairs", "8")["metrics"]  # no <think>: nothing to score without the regex
    assert plain["diag/first_turn/empty_reasoning"] == 8.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "mirl"], "--format mirl reads mirl episodes ('turns'), but this file holds veRL's rollout"),
        (["--reasoning-regex", "(a"], "--reasoning-regex '(a' does not compile"),
        (["--reasoning-regex", "a"], "--reasoning-regex must have exactly one capture group"),
        (["--reasoning-regex", "(a)", "--reasoning", "open"], "pass one of them"),
    ],
)
def test_user_errors_are_one_line_before_any_model_is_loaded(tiny_scorer, capsys, args, message):
    assert main(["diagnose", str(FIXTURES / "verl" / "1.jsonl"), *args]) == 2
    assert message in one_line_error(capsys)
    assert tiny_scorer == []


def test_parquet_without_pyarrow_is_one_line_naming_the_extra(tiny_scorer, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert main(["diagnose", str(FIXTURES / "trl" / "completions" / "completions_00001.parquet")]) == 2
    assert "needs pyarrow; pip install 'mirl[data]'" in one_line_error(capsys)


def test_a_directory_of_nothing_known_names_the_files_it_looks_for(tmp_path, tiny_scorer, capsys):
    (tmp_path / "notes.jsonl").write_text("{}\n")
    assert main(["diagnose", str(tmp_path)]) == 2
    assert "is a directory without rollout files (mirl's iteration_000001.jsonl, veRL's" in one_line_error(capsys)


def test_the_command_offers_every_format():
    parser = __import__("argparse").ArgumentParser()
    diagnose_cli.register(parser.add_subparsers())
    action = next(a for a in parser._subparsers._group_actions[0].choices["diagnose"]._actions if a.dest == "format")
    assert sorted(action.choices) == sorted(CHOICES)


# ------------------------------------------------------------------------------------------- --fields, CSV

QUERY_RECORDS = [
    {"query": f"Grid {g}\n", "response": f"<think>grid {g} try {k}</think> Up", "prompt_id": g, "reward": k * 0.5}
    for g in "ABCD"
    for k in range(2)
]


def test_a_log_of_other_names_is_refused_with_its_keys_and_a_suggested_mapping(tmp_path, tiny_scorer, capsys):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in QUERY_RECORDS))
    assert main(["diagnose", str(path)]) == 2
    line = one_line_error(capsys)
    assert "got keys prompt_id, query, response, reward" in line
    assert "--fields prompt=query,completion=response,group=prompt_id,reward=reward" in line


def test_a_field_mapping_reads_the_same_log_as_prompt_completion_records(tmp_path, tiny_scorer):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in QUERY_RECORDS))
    same = tmp_path / "same.jsonl"
    renamed = [
        {"prompt": r["query"], "completion": r["response"], "group": r["prompt_id"], "reward": r["reward"]}
        for r in QUERY_RECORDS
    ]
    same.write_text("".join(json.dumps(r) + "\n" for r in renamed))
    fields = "prompt=query,completion=response,group=prompt_id,reward=reward"
    mapped = diagnose(tmp_path, path, "--fields", fields, "--pairs", "8")
    plain = diagnose(tmp_path, same, "--pairs", "8")
    assert mapped["format"] == "prompt-completion" and mapped["episodes"] == 8
    assert mapped["metrics"] == {**plain["metrics"], "time/scoring": mapped["metrics"]["time/scoring"]}
    assert "in 4 groups from the records' 'group'" in mapped["input"]


def test_a_csv_log_is_read_with_or_without_a_mapping(tmp_path, tiny_scorer):
    import csv

    path = tmp_path / "log.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["query", "response", "prompt_id", "reward"])
        writer.writeheader()
        writer.writerows(QUERY_RECORDS)
    mapped = diagnose(tmp_path, path, "--fields", "prompt=query,completion=response,group=prompt_id", "--pairs", "8")
    same = tmp_path / "same.jsonl"
    same.write_text(
        "".join(
            json.dumps({"prompt": r["query"], "completion": r["response"], "group": r["prompt_id"]}) + "\n"
            for r in QUERY_RECORDS
        )
    )
    plain = diagnose(tmp_path, same, "--pairs", "8")
    assert mapped["metrics"] == {**plain["metrics"], "time/scoring": mapped["metrics"]["time/scoring"]}


def test_a_csv_without_a_mapping_names_its_columns(tmp_path, tiny_scorer, capsys):
    path = tmp_path / "log.csv"
    path.write_text("question,answer\nWhat?,<think>x</think> y\n")
    assert main(["diagnose", str(path)]) == 2
    line = one_line_error(capsys)
    assert "got keys answer, question" in line and "--fields prompt=question,completion=answer" in line


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("prompt", "--fields takes FIELD=KEY pairs"),
        ("answer=x", "FIELD one of prompt, completion, group, reward, success, step, got 'answer=x'"),
        ("prompt=a,prompt=b", "--fields names 'prompt' twice"),
    ],
)
def test_a_bad_mapping_is_one_line(tiny_scorer, capsys, fields, message):
    assert main(["diagnose", str(FIXTURES / "verl" / "1.jsonl"), "--fields", fields]) == 2
    assert message in one_line_error(capsys)


def test_a_mapped_csv_cell_that_is_no_number_names_its_row(tmp_path, tiny_scorer, capsys):
    path = tmp_path / "log.csv"
    path.write_text("q,r,score\nA,<think>x</think>,1.0\nB,<think>y</think>,lots\n")
    assert main(["diagnose", str(path), "--fields", "prompt=q,completion=r,reward=score"]) == 2
    line = one_line_error(capsys)
    assert "log.csv: row 2: field 'reward' must be a finite number, got \"lots\"" in line
