"""``mirl sweep`` (plan and execute many runs) and ``mirl analyze`` (the paper's analyses over a sweep)."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    sweep = subparsers.add_parser(
        "sweep",
        help="run a grid of training runs (resumable, several at once)",
        description="Expand SPEC (a base config, a grid of overrides, cases and seeds) into runs under one sweep "
        "directory and execute them; finished runs are skipped, interrupted ones resumed. See configs/sweeps/.",
    )
    sweep.add_argument("spec", help="sweep spec YAML, e.g. configs/sweeps/cpu/filter.yaml")
    sweep.add_argument("--jobs", type=int, default=1, help="runs at once (threads per run = cores // jobs)")
    sweep.add_argument("--dry-run", action="store_true", help="list the runs and their state; run nothing")
    sweep.add_argument("--launcher", choices=("local", "ray"), default="local", help="local processes or Ray tasks")
    sweep.add_argument(
        "--ray-address",
        default="auto",
        help='Ray cluster address for --launcher ray ("auto": the running cluster; "local": start one here)',
    )
    sweep.set_defaults(func=run_sweep_command)

    analyze = subparsers.add_parser(
        "analyze",
        help="tables and figures of a sweep (table, intervention, noise, quartiles, ...)",
        description="Write <sweep>/analysis/<kind>.{md,csv,png} and an index.html.",
    )
    analyze.add_argument("sweep_dir", help="a directory made by `mirl sweep`")
    analyze.add_argument(
        "--kind",
        action="append",
        choices=(
            "table",
            "intervention",
            "noise",
            "quartiles",
            "control",
            "layout",
            "correlation",
            "regimes",
            "gradients",
            "leadlag",
        ),
        help="analysis to write (repeatable; default: table)",
    )
    analyze.add_argument("--key", help="the swept key for intervention / noise (default: the only grid key)")
    analyze.add_argument("--output", help="directory for the files (default: SWEEP_DIR/analysis)")
    analyze.set_defaults(func=run_analyze)


def run_sweep_command(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from mirl.experiments import load_spec, run_sweep
    from mirl.experiments.runner import run_state
    from mirl.experiments.spec import SpecError
    from mirl.experiments.sweep import check_runs

    if args.jobs < 1:
        raise SpecError(f"--jobs must be >= 1, got {args.jobs}; e.g. --jobs 2 on a machine with 2 cores")
    spec = load_spec(args.spec)
    if args.dry_run:
        planned = spec.runs()
        iterations = check_runs(spec, planned)
        title = f"sweep {spec.name}: {len(planned)} runs in {spec.sweep_dir}"
        header = ("run", "cell", "seed", "iterations", "state")
        rows = [
            (
                plan.name,
                " ".join(f"{k}={v}" for k, v in plan.cell.items()),
                str(plan.seed),
                str(iterations[plan.name]),
                run_state(spec.sweep_dir / "runs" / plan.name),
            )
            for plan in planned
        ]
        console = Console()
        if not console.is_terminal:  # a pipe or a file: whole names, one tab-separated line per run
            print("\n".join([title, "\t".join(header), *("\t".join(row) for row in rows)]))
            return 0
        table = Table(title=title)
        for column in header:
            # a run's name is copied whole, never cut or folded; a long cell folds rather than losing its end
            table.add_column(column, no_wrap=column == "run", overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return 0
    result = run_sweep(spec, jobs=args.jobs, launcher=args.launcher, ray_address=args.ray_address)
    return 1 if result.failed else 0


def run_analyze(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mirl.experiments import KINDS, read_sweep, write_analysis

    records = read_sweep(args.sweep_dir)
    for kind in args.kind or ["table"]:
        table = KINDS[kind](records, key=args.key)
        paths = write_analysis(Path(args.sweep_dir), table, args.output)
        print(f"{kind}: {paths['md']}  {paths['csv']}  {paths['png']}")
    print(f"index: {paths['md'].parent / 'index.html'}")
    return 0
