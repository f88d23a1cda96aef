"""``mirl verl-data`` (parquet files for veRL's trainer; no veRL needed) and ``mirl verl-config`` (dry run: compose
a ``configs/verl`` setting with veRL's config loader, check it, print the resolved config; needs veRL).

See docs/scale-out.md for the whole launch.
"""

from __future__ import annotations

import argparse
import json
import sys

MAX_ROWS = 1_000_000  # instances per file, built in memory first: 200,000 sokoban rows peaked at 0.77 GB


def register(subparsers) -> None:
    data = subparsers.add_parser(
        "verl-data",
        help="write train.parquet and val.parquet of an environment for veRL's trainer",
        description="One row per env instance (env name, seed, options); train and validation seeds are disjoint.",
    )
    data.add_argument("env", metavar="ENV", help="a registered environment name (see `mirl envs`)")
    data.add_argument("out_dir", metavar="OUT_DIR", help="directory for train.parquet and val.parquet")
    data.add_argument("--train", type=int, required=True, metavar="N", help="training instances (1 to 1,000,000)")
    data.add_argument("--val", type=int, required=True, metavar="M", help="validation instances (1 to 1,000,000)")
    data.add_argument("--options", default="{}", metavar="JSON", help="env options as a JSON object")
    data.add_argument("--seed", type=int, default=0, help="run seed of the training instance seeds (default 0)")
    data.set_defaults(func=run_data)

    config = subparsers.add_parser(
        "verl-config",
        help="dry run: compose a configs/verl setting with veRL's loader, check it, print the resolved config",
        description="Compose FILE with veRL's ppo_trainer and the overrides, run veRL's validate_config and mirl's "
        "checks (the sampler's filter, the local model's config.json), print notes on what cannot be checked here "
        "(a hub-id model, relative data paths with several nodes), and print the resolved YAML. Needs veRL "
        '(pip install "mirl[verl]").',
    )
    config.add_argument("file", metavar="FILE", help="a setting such as configs/verl/sokoban-grpo-topp09.yaml")
    config.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="veRL/Hydra overrides")
    config.add_argument("--quiet", action="store_true", help="check only; print one line")
    config.set_defaults(func=run_config)


def run_data(args: argparse.Namespace) -> int:
    from mirl.integrations.verl.data import write_dataset

    try:
        options = json.loads(args.options)
        if not isinstance(options, dict):
            raise ValueError(f"--options must be a JSON object, got {args.options!r}")
        if args.val < 1:
            raise ValueError(f"--val must be >= 1, got {args.val}")
        for flag, count in (("--train", args.train), ("--val", args.val)):
            if count > MAX_ROWS:  # every row is built in memory before the file is written
                raise ValueError(f"{flag} must be at most {MAX_ROWS:,} instances, got {count:,}")
        paths = write_dataset(
            args.env, args.out_dir, train=args.train, val=args.val, options=options, run_seed=args.seed
        )
    except (ValueError, ImportError) as error:  # json.JSONDecodeError is a ValueError
        print(f"mirl verl-data: {error}", file=sys.stderr)
        return 2
    print(f"wrote {paths['train']} ({args.train} rows) and {paths['validation']} ({args.val} rows)")
    return 0


def run_config(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from mirl.config import ConfigError
    from mirl.integrations.verl.launch import check, compose, notes

    try:
        config = check(compose(args.file, args.overrides))
    except ConfigError as error:
        print(f"mirl verl-config: {error}", file=sys.stderr)
        return 2
    for note in notes(config):
        print(f"mirl verl-config: note: {note}", file=sys.stderr)
    if args.quiet:
        print(f"{args.file}: veRL's validate_config and mirl's checks passed")
    else:
        print(OmegaConf.to_yaml(config), end="")
    return 0
