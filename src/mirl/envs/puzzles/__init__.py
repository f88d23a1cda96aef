"""Puzzles: Sudoku, 2048 and Rubik's 2x2, each with a generator whose instances are solvable by construction, and
the exact solvers (:mod:`mirl.envs.puzzles.solvers`) that prove it in the tests."""
