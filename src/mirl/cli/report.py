"""``mirl report RUN_DIR`` and ``mirl compare RUN_A RUN_B ...``: HTML reports from run directories.

``mirl compare`` writes ``compare.html`` (and its PNGs under ``compare/``) into the current folder unless ``--out``
says where, as :func:`mirl.report.build_comparison` does: beside a run it would land in a results folder that may
be under version control. Both commands print where they wrote, every piece of data they could not find, and how long
they took; they exit 0 with a partial report when files are missing or lines are malformed (each listed with its
line number), and 2 when a path is not a run directory or ``--out`` cannot be a file.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def _iterations(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated iterations such as 1,50,100, got {text!r}"
        ) from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative iterations such as 1,50,100, got {text!r}")
    return values


def _count(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def register(subparsers) -> None:
    report = subparsers.add_parser(
        "report",
        help="write a self-contained HTML report (and PNGs) for one run directory",
        description="Write RUN_DIR/report.html (images embedded) and its PNGs under RUN_DIR/report/.",
    )
    report.add_argument("run_dir", metavar="RUN_DIR", help="run directory (runs/<name>)")
    report.add_argument("--out", metavar="FILE", help="HTML file to write (default RUN_DIR/report.html)")
    report.add_argument(
        "--iterations",
        type=_iterations,
        metavar="I,J,...",
        help="iterations for reward matrices and transcripts (default: first, middle, last available)",
    )
    report.add_argument(
        "--family", default="est", help="diagnostics score family: est (per token, default), seq, za_est, ..."
    )
    report.add_argument("--episodes", type=_count, default=2, help="transcripts shown per chosen iteration")
    report.set_defaults(func=run_report)

    compare = subparsers.add_parser(
        "compare",
        help="overlay the headline curves of several runs in one HTML file",
        description="Overlay success, return, val success, MI-Est, retrieval-acc, entropy and kept ratio.",
    )
    compare.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories to compare")
    compare.add_argument(
        "--out", metavar="FILE", help="HTML file to write (default compare.html in the current folder)"
    )
    compare.add_argument("--labels", nargs="+", metavar="LABEL", help="one legend label per run (default: run names)")
    compare.add_argument("--scope", default="trajectory", help="diagnostics scope for MI curves (default trajectory)")
    compare.add_argument("--family", default="est", help="diagnostics score family (default est)")
    compare.set_defaults(func=run_compare)


def _print_result(result, what: str) -> None:
    print(f"{what}: {result.html_path} ({len(result.png_paths)} PNG) in {result.seconds:.2f} s")
    if result.missing:
        print(f"missing data ({len(result.missing)} notes, also shown in the report):")
        for note in result.missing:
            print(f"  - {note}")


def run_report(args: argparse.Namespace) -> int:
    from mirl.cli.paths import check_output_file, check_run_directory
    from mirl.errors import UserError
    from mirl.report import build_report

    check_run_directory(args.run_dir)
    check_output_file(args.out)
    try:
        result = build_report(
            args.run_dir, args.out, iterations=args.iterations, family=args.family, episodes=args.episodes
        )
    except FileNotFoundError as error:  # one line from mirl.cli.main, or the traceback with --debug
        raise UserError(f"{error}; pass the path of a run directory such as runs/<name>") from error
    _print_result(result, "report")
    from mirl.report import read_run
    from mirl.report.verdict import verdict

    print(verdict(read_run(args.run_dir)).line())  # the run's health in one line (the report's verdict strip)
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from mirl.cli.paths import check_output_file, check_run_directory
    from mirl.report import build_comparison

    for run_dir in args.run_dirs:
        check_run_directory(run_dir)
    # printed in full: where the page went is never a guess; absolute, not resolved, so a link planted at the page's
    # own name is replaced, never followed
    out = Path(os.path.abspath(args.out or "compare.html"))
    check_output_file(out)
    # a FileNotFoundError or ValueError is a user error: one line from mirl.cli.main, the traceback with --debug
    result = build_comparison(args.run_dirs, out, labels=args.labels, scope=args.scope, family=args.family)
    _print_result(result, "comparison")
    if len(args.run_dirs) == 1:
        print(f"note: one run given, so nothing is compared; `mirl report {args.run_dirs[0]}` shows its every curve")
    return 0
