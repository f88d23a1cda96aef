"""Reading run directories tolerantly: truncated tails, damaged lines, duplicate iterations, missing files."""

import json

import numpy as np
import pytest

from mirl.report.rundir import build_metrics, read_jsonl, read_run


def test_truncated_last_line_is_dropped_silently_and_bad_middle_line_is_noted(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1, "a": 1.0}\nnot json\n{"iteration": 2, "a": 2.0}\n{"iteration": 3, "a"')
    records, notes = read_jsonl(path)
    assert [r["iteration"] for r in records] == [1, 2]
    assert notes == ["metrics.jsonl line 2: unparsable JSON, skipped"]


def test_metrics_columns_last_duplicate_wins_and_non_numbers_are_dropped():
    records = [
        {"iteration": 2, "a": 5.0, "diag/first_turn/regime": "template_collapse"},
        {"iteration": 1, "a": 1.0, "b": None},
        {"iteration": 2, "a": 7.0, "b": float("nan")},  # a resumed run re-logs iteration 2
        {"time": 3.0},  # no iteration: ignored
        {"iteration": 3, "a": float("inf"), "b": 4},
    ]
    metrics = build_metrics(records)
    assert metrics.iterations.tolist() == [1, 2, 3]
    a = metrics.get("a")
    # iteration 2 keeps the later line (7.0); inf at iteration 3 is dropped
    assert a.iterations.tolist() == [1, 2] and a.values.tolist() == [1.0, 7.0]
    assert metrics.get("b").values.tolist() == [4.0]
    assert metrics.text == {}  # the string came from the overwritten line of iteration 2
    assert a.last == 7.0 and a.peak == 7.0 and a.peak_iteration == 2


def test_string_metrics_are_kept_apart():
    metrics = build_metrics([{"iteration": 5, "diag/trajectory/regime": "diverse_grounded", "x": 1}])
    assert metrics.text == {"diag/trajectory/regime": [(5, "diverse_grounded")]}
    assert "diag/trajectory/regime" not in metrics.numeric


def test_matching_returns_sorted_keys_with_groups():
    metrics = build_metrics([{"iteration": 1, "val/success/sokoban": 0.5, "val/success/frozenlake": 0.2}])
    found = metrics.matching(r"val/success/([^/]+)")
    assert [m.group(1) for m in found.values()] == ["frozenlake", "sokoban"]


def test_empty_directory_reads_with_a_note_per_missing_file(tmp_path):
    run = read_run(tmp_path)
    assert run.notes == (
        "config.yaml is missing",
        "summary.json is missing",
        "metrics.jsonl is missing",
        "groups.jsonl is missing",
        "rollouts/ is missing",
    )
    assert len(run.metrics) == 0 and run.groups == {} and run.rollout_files == {}
    assert run.name == tmp_path.name


def test_missing_directory_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_run(tmp_path / "nope")


def test_damaged_files_become_notes(tmp_path):
    (tmp_path / "summary.json").write_text("[1, 2]")
    (tmp_path / "config.yaml").write_text("a: [unclosed")
    (tmp_path / "metrics.jsonl").write_text("")
    good = {"iteration": 1, "returns": [[1.0, 0.0], [0.0, 0.0]]}
    ragged = {"iteration": 2, "returns": [[1.0, 0.0], [0.0]]}
    (tmp_path / "groups.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(ragged) + "\n")
    (tmp_path / "rollouts").mkdir()
    run = read_run(tmp_path)
    assert "summary.json does not hold a JSON object; ignored" in run.notes
    assert "config.yaml is not valid YAML; ignored" in run.notes
    assert "metrics.jsonl holds no complete iteration yet" in run.notes
    assert "groups.jsonl: 1 record(s) without a (P, K) returns list, skipped" in run.notes
    assert "rollouts/ holds no iteration_NNNNNN.jsonl files" in run.notes
    assert list(run.groups) == [1]


def test_synthetic_run_reads_completely(make_run):
    run = read_run(make_run(iterations=20))
    assert run.notes == ()
    assert run.name == "demo"
    assert run.config_value("filter.strategy") == "top_p"
    assert run.config_value("filter.missing", "default") == "default"
    assert list(run.rollout_files) == [1, 10, 20]
    assert sorted(run.groups) == list(range(1, 21))
    np.testing.assert_array_equal(run.metrics.get("val/success").iterations, [10, 20])
    # diagnostics at iteration 1 and every 5
    assert run.metrics.get("diag/trajectory/est/mi_estimate").iterations.tolist() == [1, 5, 10, 15, 20]
