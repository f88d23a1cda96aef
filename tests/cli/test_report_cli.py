"""``mirl report`` and ``mirl compare`` through their argparse registration, as a user calls them."""

import importlib.util
from pathlib import Path

import pytest

from mirl.cli import main


def _fake_runs():
    # the synthetic run generator lives in tests/report/conftest.py; load it by path (tests are not a package)
    path = Path(__file__).resolve().parents[1] / "report" / "conftest.py"
    spec = importlib.util.spec_from_file_location("mirl_report_fake_runs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


write_run = _fake_runs().write_run


def cli(*argv: str) -> int:
    """The ``mirl`` entry point, which turns a user error into one line on stderr and exit status 2."""
    return main(list(argv))


def test_report_writes_html_and_lists_what_is_missing(tmp_path, capsys):
    run = write_run(tmp_path, "r", iterations=6, omit=("grad", "groups", "diag", "filter"))
    assert cli("report", str(run)) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"report: {run / 'report.html'} (")
    assert "  - Reward matrices: groups.jsonl is missing or empty" in out
    assert "  - Gradient norms: no grad/<bucket>/<component>/norm metrics" in out
    assert (run / "report.html").is_file()
    last = out.strip().splitlines()[-1]  # the verdict's summary line, as mirl train prints it
    assert last.startswith("summary: check | status finished | iterations 6 of 6 |")
    assert "no MI diagnostics logged: input dependence and regime unknown" in last


def test_report_options(tmp_path, capsys):
    run = write_run(tmp_path, "r", iterations=10, omit=("grad", "diag", "filter"))
    out_file = tmp_path / "elsewhere" / "x.html"
    assert cli("report", str(run), "--out", str(out_file), "--iterations", "1,10", "--episodes", "1") == 0
    page = out_file.read_text()
    assert "<h3>Iteration 1</h3>" in page and "<h3>Iteration 10</h3>" in page
    assert page.count('<div class="episode">') == 2  # one episode for each of the two iterations
    assert (tmp_path / "elsewhere" / "x" / "reward_matrix.png").is_file()


def test_report_on_a_missing_directory_exits_2(tmp_path, capsys):
    assert cli("report", str(tmp_path / "nope")) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bad_iterations_are_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli("report", str(tmp_path), "--iterations", "1,x")
    assert exit_info.value.code == 2
    assert "expected comma-separated iterations" in capsys.readouterr().err


def test_compare_with_labels(tmp_path, capsys):
    a = write_run(tmp_path, "a", iterations=5, omit=("groups", "rollouts"))
    b = write_run(tmp_path, "b", iterations=5, omit=("groups", "rollouts"), seed=3)
    out_file = tmp_path / "cmp.html"
    assert cli("compare", str(a), str(b), "--out", str(out_file), "--labels", "base", "snr") == 0
    assert capsys.readouterr().out.startswith(f"comparison: {out_file} (1 PNG)")
    assert "base vs snr" in out_file.read_text()


def test_compare_label_mismatch_exits_2(tmp_path, capsys):
    a = write_run(tmp_path, "a", iterations=3)
    assert cli("compare", str(a), "--out", str(tmp_path / "c.html"), "--labels", "x", "y") == 2
    assert "expected 1, got 2" in capsys.readouterr().err


def test_report_through_the_mirl_entry_point(tmp_path, capsys):
    try:
        from mirl.cli import build_parser

        build_parser()
    except ModuleNotFoundError as error:
        pytest.skip(f"another mirl sub-command is not importable yet: {error}")
    from mirl.cli import main

    run = write_run(tmp_path, "r", iterations=3, omit=("grad", "diag", "filter", "groups"))
    assert main(["report", str(run)]) == 0
    assert (run / "report.html").is_file()


def test_compare_of_one_run_says_there_is_nothing_to_compare(tmp_path, capsys):
    a = write_run(tmp_path / "runs", "a", iterations=3)
    assert cli("compare", str(a), "--out", str(tmp_path / "c.html")) == 0
    assert f"note: one run given, so nothing is compared; `mirl report {a}` shows its every curve" in (
        capsys.readouterr().out
    )
