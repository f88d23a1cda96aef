"""Build the model organism's initial policy (docs/organism.md) and, with --check, run its swap test.

    .venv/bin/python scripts/build_organism.py            # into the mirl cache (model.name=keysum-organism)
    .venv/bin/python scripts/build_organism.py --out DIR  # into DIR, an ordinary Hugging Face model directory
    .venv/bin/python scripts/build_organism.py --check    # then: success from its own, the solver's, a fixed
                                                          # template's and another instance's reasoning

The build is deterministic (same recipe, same weights) and takes about two minutes on 2 cores. ``mirl train`` builds
it on first use anyway; this script is for building it ahead of time, elsewhere, or again (``--force``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="target directory (default: the mirl cache)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the target exists")
    parser.add_argument("--check", action="store_true", help="run the swap test on the built policy")
    args = parser.parse_args()
    from mirl.lab.organism import NAME, VERSION, Recipe, build_organism
    from mirl.policy.sources import cache_root

    target = args.out or cache_root() / "models" / f"{NAME}-v{VERSION}"
    if args.force and target.exists():
        shutil.rmtree(target)
    if (target / "config.json").is_file():
        print(f"{target} exists (use --force to rebuild)")
    else:
        started = time.perf_counter()
        build_organism(target, Recipe(), log=print)
        print(f"built {target} in {time.perf_counter() - started:.0f} s")
    if args.check:
        from mirl.lab.swap import MODES, swap_success
        from mirl.policy.hf import HFPolicy

        policy = HFPolicy.load(str(target), device="cpu")
        for mode in MODES:
            print(f"success per question with {mode} reasoning: {swap_success(policy, mode):.3f} (chance 0.125)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
