"""``mirl train`` and ``mirl eval``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    train = subparsers.add_parser(
        "train",
        help="train a policy (rollout, filter, update, diagnostics, report)",
        description="Train with a YAML config from configs/ and key.sub=value overrides.",
    )
    train.add_argument("config", nargs="?", help="YAML config, e.g. configs/quickstart.yaml (or --defaults)")
    train.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. rollout.group_size=8")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    train.add_argument(
        "--restart", action="store_true", help="with --resume: start again from iteration 0 when there is no checkpoint"
    )
    train.add_argument("--strict", action="store_true", help="exit with status 1 when the run never updated the policy")
    train.add_argument("--defaults", action="store_true", help="train with the built-in defaults (no config file)")
    train.add_argument("--no-report", action="store_true", help="do not build report.html at the end")
    train.add_argument("--help-config", action="store_true", help="list every config key with its documentation")
    train.set_defaults(func=run_train)

    evaluate = subparsers.add_parser(
        "eval",
        help="validate a model or a run's last checkpoint on fixed instances",
        description="Run validation (success, return, pass@K, action validity per env) and print the results.",
    )
    evaluate.add_argument(
        "target", help="a run directory, RUN/checkpoints/iteration_N, a hub id, a local model directory or a .gguf file"
    )
    evaluate.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. validation.num_instances=64")
    evaluate.add_argument("--config", help="YAML config for envs and validation (default: the run's own)")
    evaluate.add_argument("--out", help="write the metrics as JSON here")
    evaluate.set_defaults(func=run_eval)


def _split(config: str | None, overrides: list[str]) -> tuple[str | None, list[str]]:
    """argparse cannot tell an optional CONFIG from the first override: a token with '=' is an override."""
    if config is not None and "=" in config:
        return None, [config, *overrides]
    return config, overrides


def run_train(args: argparse.Namespace) -> int:
    """Check the config first (light imports only, so a bad key fails in about a second), then import torch and
    the trainer and run."""
    from mirl.cli.train_checks import NO_UPDATE

    if args.help_config:
        from mirl.cli.config_help import print_config_help

        print_config_help()
        return 0
    config = _checked_config(args)
    import torch

    from mirl.policy.sources import resolve_device
    from mirl.report.ending import finish
    from mirl.trainer import train

    resolve_device(config.model.device)  # an unavailable device fails before the run directory is made
    torch.manual_seed(config.trainer.seed)  # the one global seed; library code uses its own generators
    result = train(config, run_dir=args.resume, resume=bool(args.resume))
    ending = finish(result, report=not args.no_report, strict=args.strict)  # report, closing lines, warning
    return NO_UPDATE if ending.no_update and args.strict else 0


def _checked_config(args: argparse.Namespace):
    """The run's config, after the checks that need no torch: the config itself, that there is one (or
    ``--defaults``), that a run to resume has a checkpoint (or ``--restart``), that a model path exists."""
    from mirl.cli.paths import check_run_directory
    from mirl.cli.train_checks import (
        has_checkpoint,
        require_checkpoint,
        require_config,
        require_output_dir,
        require_resumable_overrides,
    )
    from mirl.config_files import load_config
    from mirl.errors import UserError
    from mirl.run_dirs import check_model_name

    path, overrides = _split(args.config, args.overrides)
    if args.restart and not args.resume:
        raise UserError("--restart goes with --resume RUN_DIR: it starts that run again from iteration 0")
    if args.resume:
        if path is not None:
            raise UserError("--resume takes the run's own config.yaml; pass only key=value overrides")
        path = check_run_directory(args.resume) / "config.yaml"
        if has_checkpoint(Path(args.resume)) or not args.restart:  # a start from iteration 0 may change anything
            require_resumable_overrides(list(overrides), Path(args.resume))
    config = load_config(path, overrides, saved=bool(args.resume))
    require_config(path, args.defaults, args.resume)
    if args.resume:
        require_checkpoint(Path(args.resume), args.restart)
    else:
        require_output_dir(config.trainer.output_dir)
    check_model_name(config.model.name, probe_hub=False)  # a missing path fails before torch is imported
    return config


def run_eval(args: argparse.Namespace) -> int:
    """Check ``--out`` and the config with light imports only, then import torch, load the model and validate."""
    from mirl.cli.paths import check_output_file
    from mirl.config_files import load_config
    from mirl.run_dirs import check_model_name, find_run_weights

    check_output_file(args.out)
    found = find_run_weights(args.target)
    config_path = args.config or (found.run_dir / "config.yaml" if found else None)
    overrides = list(args.overrides) if found else [f"model.name={args.target}", *args.overrides]
    config = load_config(config_path, overrides, saved=found is not None and args.config is None)
    if not found:
        check_model_name(config.model.name, probe_hub=False)  # a missing path fails before torch is imported
    import torch
    from rich.console import Console
    from rich.table import Table

    from mirl.cli.models import load_run_policy
    from mirl.cli.progress import work_bar
    from mirl.policy.sources import resolve_device
    from mirl.trainer.setup import load_policy
    from mirl.trainer.validation import validate

    resolve_device(config.model.device)  # an unavailable device fails before any weights are read
    torch.manual_seed(config.trainer.seed)
    policy = load_run_policy(found.run_dir, found.checkpoint, config) if found else load_policy(config)
    episodes = len(config.envs) * config.validation.num_instances * config.validation.group_size
    turns = config.rollout.max_turns
    each = f"at most {turns} turn{'s' if turns > 1 else ''} each"
    plan = f"validating {episodes} episodes (group size {config.validation.group_size}, {each})"
    with work_bar("validation", "episode turns", plan) as progress:
        metrics = validate(policy, config, progress=progress)
    table = Table(title=f"validation of {args.target}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        table.add_row(key, f"{value:.4f}")
    Console().print(table)
    if args.out:
        from mirl.safeio import atomic_write_text

        atomic_write_text(Path(args.out), json.dumps(metrics, indent=2) + "\n")
    return 0
