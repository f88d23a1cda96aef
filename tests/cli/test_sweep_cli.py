"""``mirl sweep --dry-run``: every run's whole name and cell, whatever the width of the output."""

from pathlib import Path

from mirl.cli import main
from mirl.experiments import load_spec

SPEC = Path(__file__).resolve().parents[2] / "configs" / "sweeps" / "cpu" / "table.yaml"


def test_a_piped_dry_run_lists_whole_run_names_one_per_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "80")  # an 80-column pipe: a table there cut names to "preset-grpo_strategy-n…"
    monkeypatch.chdir(tmp_path)  # the sweep directory is relative: nothing of it is made by a dry run anyway
    assert main(["sweep", str(SPEC), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    planned = load_spec(SPEC).runs()
    assert lines[1] == "run\tcell\tseed\titerations\tstate" and len(lines) == 2 + len(planned)
    for line, plan in zip(lines[2:], planned, strict=True):
        name, cell, seed, _, state = line.split("\t")
        assert name == plan.name and cell == " ".join(f"{k}={v}" for k, v in plan.cell.items())
        assert seed == str(plan.seed) and state == "new"
    assert "…" not in "\n".join(lines)
