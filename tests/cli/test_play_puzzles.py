"""`mirl play` on the puzzles: each solved from a script by its oracle, through the real command line."""

from __future__ import annotations

import io
import subprocess
import sys

from mirl.cli import main
from mirl.envs import make
from mirl.envs.puzzles.solvers import expectimax_2048, solve_rubik


def test_play_sudoku_9x9_with_placements_through_the_command_line():
    env = make("sudoku", size=9, blanks=20)
    _, info = env.reset(seed=4)
    blanks = [i for i, digit in enumerate(env.grid) if digit == 0]
    lines = ["1 1 1 1", "; ".join(f"{i // 9 + 1} {i % 9 + 1} {info['solution'][i]}" for i in blanks)]
    result = subprocess.run(
        [sys.executable, "-m", "mirl.cli", "play", "sudoku", "--seed", "4", "size=9", "blanks=20"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = result.stdout
    assert out.startswith("== sudoku (seed 4) ==\n") and "'row column digit'" in out
    assert "actions: 1/10  (invalid action: nothing happened)" in out  # four numbers: no placement
    assert out.endswith("episode over: success=True, return=1, actions=2\n")


def test_play_rubiks_with_the_solver_moves(monkeypatch, capsys):
    env = make("rubiks2x2", scramble_depth=4)
    env.reset(seed=7)
    moves = solve_rubik(env.state, max_moves=4)
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(moves) + "\n"))
    assert main(["play", "rubiks2x2", "--seed", "7", "scramble_depth=4"]) == 0
    out = capsys.readouterr().out
    assert "Actions: U, U', D, D', F, F', B, B', R, R', L, L'. Action budget: 10." in out
    assert out.endswith(f"episode over: success=True, return=1, actions={len(moves)}\n")


def test_play_2048_with_arrow_keys_and_words(monkeypatch, capsys):
    env = make("game2048", target=16)
    env.reset(seed=1)
    moves = []
    while max(env.board) < 16:
        moves.append(expectimax_2048(env.board, env.size))
        env.step(moves[-1])
    arrows = {"Up": "\x1b[A", "Down": "\x1b[B", "Right": "\x1b[C", "Left": "\x1b[D"}
    lines = [arrows[m] if i % 2 else m.lower() for i, m in enumerate(moves)]  # alternate keys and typed words
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["play", "game2048", "--seed", "1", "target=16"]) == 0
    out = capsys.readouterr().out
    assert f"actions: {len(moves)}/50\n" in out
    assert "episode over: success=True" in out


def test_play_refuses_a_mistyped_puzzle_option(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["play", "sudoku", "size=big"]) == 2
    assert "option size of environment 'sudoku' must be an int" in capsys.readouterr().err
