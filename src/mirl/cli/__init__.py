"""The ``mirl`` command.

Each sub-command lives in its own module with a ``register(subparsers)`` function that adds its parser and sets
``func``; heavy imports (torch, transformers) happen inside the command, so ``mirl --help`` stays instant.

User errors (a bad key or value, a missing or malformed file, a bad option, an unavailable device: the types in
:data:`mirl.errors.USER_ERRORS`) print one line ``mirl <command>: <message>`` on stderr and exit with status 2;
``--debug`` (before or after the command) shows the traceback instead. Argument-parsing errors take the same
one-line form.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from mirl.version import __version__

COMMAND_MODULES = ("envs", "train", "diagnose", "drift", "report", "sweep", "verl", "serve")
USAGE_ERROR = 2


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line ``<prog>: <message>; see <prog> --help`` and exit 2."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"{self.prog}: {message}; see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="mirl",
        description=(
            "Multi-turn RL for LLM agents that measures the input dependence of reasoning, detects its near-total"
            " loss (template collapse) and filters by reward spread."
        ),
    )
    parser.add_argument("--version", action="version", version=f"mirl {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMAND_MODULES:
        importlib.import_module(f"mirl.cli.{name}").register(subparsers)
    parser.commands = subparsers.choices
    for sub in subparsers.choices.values():
        # SUPPRESS: a sub-command that was not given --debug leaves the top-level value in place
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def report_error(command: str, error: BaseException) -> str:
    """The one line shown for a user error: ``mirl <command>: <message>`` (newlines folded into the line).

    >>> report_error("train", FileNotFoundError(2, "No such file or directory", "x.yaml"))
    "mirl train: No such file or directory: 'x.yaml'"
    """
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        message = f"{error.strerror}: {str(error.filename)!r}"
    else:
        message = str(error) or type(error).__name__
    return f"mirl {command}: {' '.join(message.split())}"


def main(argv: list[str] | None = None) -> int:
    from mirl.errors import USER_ERRORS

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the sub-command's parser, so the line starts with ``mirl <command>:``
        command = parser.commands.get(getattr(args, "command", None) or "", parser)
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as error:
        if args.debug:
            raise
        print(report_error(args.command, error), file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        if args.debug:
            raise
        hint = getattr(sys.exc_info()[1], "resume_hint", "")  # set by the trainer: how to go on
        print(f"mirl {args.command}: interrupted" + (f"; {hint}" if hint else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
