"""The agnostic share on SmolLM2 batches of known template share: E1's swap construction, held out from the
organism calibration that chose the power (studies/regimes/calibrate_graded.py).

    python studies/evidence/e1_swap.py --task countdown --gen-seed 1 --out studies/runs/evidence-e1   # the pool
    python studies/regimes/calibrate_e1.py studies/runs/evidence-e1/countdown_g1 [more pools ...]
    # -> studies/results/regimes/graded_smollm2.md and graded_smollm2.json

Each batch: N evaluation prompts of the frozen SmolLM2-135M-Instruct's pool; a share t of them get a donor reasoning
(written for another prompt) attributed to them, so those rows are input-agnostic by construction, the others keep
their own reasoning (``studies.evidence.analysis.draw_mixture``). The estimate is the one training logs
(``mirl.diagnostics.agnostic.agnostic_share`` over ``mi_proxies``' retrieval curve, power 0.93 chosen on the
organism). Truth: t. A reasoning the model wrote for its own prompt need not depend on it detectably, so the truth is
an upper bound on what can be detected on the grounded rows: the error here measures the estimator and the model
together, which is what a user of SmolLM2 would read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from studies.evidence.analysis import draw_mixture, load_pool  # noqa: E402

from mirl.diagnostics.agnostic import POWER, agnostic_share  # noqa: E402
from mirl.diagnostics.info import mi_proxies  # noqa: E402

OUT = ROOT / "studies" / "results" / "regimes"
SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
COLUMNS = (16, 32)
DRAWS = 200


def estimate(scores: np.ndarray, true_col: np.ndarray) -> dict[str, float]:
    proxies = mi_proxies(torch.from_numpy(scores), torch.from_numpy(true_col), ks=(1, 2, 4, 8))
    return agnostic_share(proxies, rows=len(true_col), power=POWER)


def cells(pools, *, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for n in COLUMNS:
        for share in SHARES:
            values, covered = [], 0
            for pool in pools:
                for _ in range(DRAWS):
                    got = estimate(*draw_mixture(pool, n, 1.0 - share, rng))
                    values.append(got["agnostic_share"])
                    covered += got["agnostic_share_ci_low"] <= share <= got["agnostic_share_ci_high"]
            values = np.asarray(values)
            out.append({
                "columns": n, "template_share": share, "batches": len(values), "mean_estimate": float(values.mean()),
                "mae": float(np.abs(values - share).mean()), "interval_covers": covered / len(values),
            })  # fmt: skip
    return out


def render(rows: list[dict], pools: list[str]) -> str:
    lines = [
        "# Agnostic share on SmolLM2 batches of known template share (E1 construction, held out)",
        "",
        f"Pools: {', '.join(pools)}. Power {POWER} (chosen on the organism). Command: "
        "`python studies/regimes/calibrate_e1.py POOL ...`.",
        "",
        "| columns N | true template share | batches | mean estimate | MAE | interval covers |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['columns']} | {r['template_share']:.2f} | {r['batches']} | {r['mean_estimate']:.3f} | "
            f"{r['mae']:.3f} | {r['interval_covers']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python studies/regimes/calibrate_e1.py POOL_DIR [POOL_DIR ...] (made by e1_swap.py)")
        return 2
    pools = [load_pool(Path(p)) for p in argv]
    rows = cells(pools)
    names = [Path(p).name for p in argv]
    (OUT / "graded_smollm2.json").write_text(json.dumps({"pools": names, "power": POWER, "cells": rows}, indent=1))
    (OUT / "graded_smollm2.md").write_text(render(rows, names))
    print(render(rows, names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
