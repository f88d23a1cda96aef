"""The ``mirl`` command.

Each sub-command lives in its own module with a ``register(subparsers)`` function that adds its parser and sets
``func``; heavy imports (torch, transformers) happen inside the command, so ``mirl --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import mirl

COMMAND_MODULES = ("envs", "train", "diagnose", "report")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mirl",
        description="Multi-turn RL for LLM agents that measures and prevents template collapse.",
    )
    parser.add_argument("--version", action="version", version=f"mirl {mirl.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"mirl.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    from mirl.safeio import RunDirError

    try:
        return int(args.func(args) or 0)
    except RunDirError as error:  # a refused run directory or output path: one line, no traceback
        print(f"mirl {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
