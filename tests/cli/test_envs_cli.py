"""`mirl envs` and `mirl play` through the real command line (stdin-scripted play)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from mirl.cli import main
from mirl.cli.envs import coerce, parse_options, split_seed
from mirl.envs import make, registry


def test_envs_lists_every_env_with_description_and_options(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    for name, cls in registry.items():
        assert f"{name}" in out and cls.description in out
    assert "    success_rate=0.98  probability that a move goes where intended; 1.0 is deterministic." in out


def test_envs_unknown_name_is_an_error(capsys):
    assert main(["envs", "sokobn"]) == 2
    assert "registered: bandit" in capsys.readouterr().err


def test_play_sokoban_seed_3_from_a_script():
    # the optimal 8-move solution of seed 3 (see tests/envs/test_sokoban.py), with an invalid line and a blank one
    script = "Up\nRight\nRight\nDown\nfly\n\nLeft\nUp\nLeft\nDown\n"
    result = subprocess.run(
        [sys.executable, "-m", "mirl.cli", "play", "sokoban", "--seed", "3"],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = result.stdout
    initial, _ = make("sokoban").reset(seed=3)
    assert out.startswith("== sokoban (seed 3) ==\n")
    assert f"Action budget: 10. Type 'quit' to stop.\n\n{initial}\n" in out  # exactly the agent's observation
    assert "reward: -0.1  return: -0.4  actions: 4/10\n" in out
    # the valid words again, where the env has a fixed set
    invalid = "(invalid action: nothing happened; valid: Up, Down, Left, Right)"
    assert f"reward: 0  return: -0.4  actions: 5/10  {invalid}\n" in out
    # last push: -0.1 + 1 + 10 = 10.9; return = 10.9 - 7 * 0.1 = 10.2, 9 actions including the invalid one
    assert "reward: 10.9  return: 10.2  actions: 9/10\n######\n#____#\n#_P__#\n#_√###\n#_####\n######\n" in out
    assert out.endswith("episode over: success=True, return=10.2, actions=9\n")


def test_play_with_options_and_quit(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Down\nquit\nRight\n"))
    assert main(["play", "frozenlake", "--seed", "0", "success_rate=1.0", "view=coordinates"]) == 0
    out = capsys.readouterr().out
    assert "Goal: (1, 1)\nHoles: (2, 1)\nPlayer: (1, 0)\n" in out
    assert "reward: 0  return: 0  actions: 1/10\n" in out and "Player: (2, 0)" in out
    assert "actions: 2/10" not in out and "episode over" not in out  # stopped at quit


def test_play_ends_when_the_action_budget_is_spent(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("nope\nnope again\n"))
    assert main(["play", "bandit", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert out.count("(invalid action: nothing happened; valid: Venture, Bond)") == 1  # budget 1: one line read
    assert out.endswith("episode over: success=False, return=0, actions=1\n")


def test_play_unknown_option_lists_valid_ones(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["play", "sokoban", "boxes=2"]) == 2
    assert "valid options: height, width, num_boxes" in capsys.readouterr().err


def test_option_values_are_coerced():
    assert parse_options(["size=5", "success_rate=1", "view=grid", "reveal_payoffs=True", "num_numbers=3,4"]) == {
        "size": 5,
        "success_rate": 1,
        "view": "grid",
        "reveal_payoffs": True,
        "num_numbers": (3, 4),
    }
    assert coerce("1e-3") == 0.001 and coerce("None") is None


def test_seed_may_come_before_or_after_the_env(monkeypatch, capsys):
    outputs = []
    for argv in (
        ["play", "--seed", "3", "sokoban"],
        ["play", "sokoban", "--seed=3"],
        ["play", "sokoban", "--seed", "3"],
    ):
        monkeypatch.setattr(sys, "stdin", io.StringIO(""))
        assert main(argv) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] == outputs[2] and outputs[0].startswith("== sokoban (seed 3) ==")
    with pytest.raises(ValueError, match="--seed expects an integer, got 'x'"):
        split_seed(["a=1", "--seed", "x"], 0)


def test_option_without_equals_is_an_error():
    with pytest.raises(ValueError, match="key=value"):
        parse_options(["size"])


def test_play_deepcoder_takes_a_pasted_program_and_shows_each_verdict():
    env = make("deepcoder")
    env.reset(seed=3)  # max_subarray, function format (see tests/envs/test_deepcoder.py)
    half_wrong = "def max_subarray(xs):\n    return max(xs)\n"  # right only where the best part is one element
    script = f"```python\n{half_wrong}```\n"
    result = subprocess.run(
        [sys.executable, "-m", "mirl.cli", "play", "deepcoder", "--seed", "3"],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = result.stdout
    assert env.problem.statement in out and "A multi-line answer starts with a ``` line" in out
    verdicts = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("test ")]
    assert len(verdicts) == 6 and set(verdicts) <= {"passed", "wrong answer"}
    passed = verdicts.count("passed")
    assert f"Passed {passed}/6 tests." in out and f"reward: {passed / 6:g}" in out and "episode over" in out


def test_envs_reports_what_the_sandbox_can_guarantee(capsys):
    assert main(["envs", "deepcoder"]) == 0
    out = capsys.readouterr().out
    assert "source='synthetic'" in out and "\nsandbox: " in out and "programs run as" in out


def test_play_webshop_with_clicks(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("search[blanket]\nclick[buy now]\nclick[next >]\nquit\n"))
    assert main(["play", "webshop", "--seed", "2", "num_products=200"]) == 0
    out = capsys.readouterr().out
    assert "Action budget: 9." in out and "Available actions: search[<keywords>]" in out
    assert "actions: 2/9  (invalid action: nothing happened)" in out  # no buy button on a results page
    assert "page 2 of" in out and "click[< prev]" in out


def test_play_searchqa_finish_ends_the_episode(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("search[founded]\nfinish[nobody]\n"))
    assert main(["play", "searchqa", "corpus_size=200"]) == 0
    out = capsys.readouterr().out
    assert "Doc 1 (Title: " in out and "Your answer: nobody" in out
    assert out.endswith("episode over: success=False, return=0, actions=2\n")


def test_play_with_a_missing_data_directory_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["play", "webshop", "source=local", f"path={tmp_path / 'nowhere'}"]) == 2
    assert capsys.readouterr().err.startswith("mirl play: source='local' expects a directory")


def test_arrow_keys_are_moves_and_other_escape_sequences_cost_nothing(monkeypatch, capsys):
    """A terminal sends an arrow key as ESC [ A (or ESC O A): a move in an env with directions, one per arrow; a
    Page Up (ESC [ 5 ~) or an arrow in an env without directions is refused and not counted against the budget."""
    script = "\x1b[B\n\x1b[5~\n\x1bOC\x1b[A\nquit\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    assert main(["play", "frozenlake", "--seed", "1", "success_rate=1.0"]) == 0
    out = capsys.readouterr().out
    assert out.count("(not an action: a key other than an arrow; type an action such as Left)") == 1
    assert "actions: 3/10" in out and "actions: 4/10" not in out and "invalid action" not in out
    monkeypatch.setattr(sys, "stdin", io.StringIO("\x1b[A\nquit\n"))
    assert main(["play", "countdown"]) == 0
    out = capsys.readouterr().out
    assert "(not an action" in out and "actions: 1/" not in out
