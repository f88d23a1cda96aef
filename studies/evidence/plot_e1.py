"""Figure of E1: the MI contrast (MI-Est minus its permutation null's mean) and retrieval above chance against the
grounded fraction, one line per N.

    python studies/evidence/plot_e1.py [studies/results/evidence/e1.json]

Writes ``e1_<task>.png`` beside the JSON: the mean over the 1,000 mixtures of each cell and the band holding 95 %
of them (2.5-97.5 % quantiles).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MEASURES = {"mi": "MI contrast (nats)", "retrieval": "retrieval above chance"}


def plot_task(task: str, cells: dict, out: Path) -> None:
    by_n: dict[int, list[tuple[float, dict]]] = {}
    for name, cell in cells.items():
        n, fraction = re.fullmatch(r"N=(\d+) f=([\d.]+)", name).groups()
        by_n.setdefault(int(n), []).append((float(fraction), cell))
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, (measure, label) in zip(axes, MEASURES.items(), strict=True):
        for n, points in sorted(by_n.items()):
            points.sort(key=lambda p: p[0])
            xs = [f for f, _ in points]
            axis.plot(xs, [c[measure]["mean"] for _, c in points], marker="o", label=f"N = {n}")
            low, high = [c[measure]["low"] for _, c in points], [c[measure]["high"] for _, c in points]
            axis.fill_between(xs, low, high, alpha=0.12)
        axis.axhline(0.0, color="grey", linewidth=0.8)
        axis.set_xlabel("grounded fraction of the rows")
        axis.set_ylabel(label)
        axis.legend()
    figure.suptitle(f"E1 swap test, {task}: mean and 95 % of 1,000 mixtures per cell")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else Path("studies/results/evidence/e1.json")
    for task, result in json.loads(path.read_text()).items():
        plot_task(task, result["cells"], path.parent / f"e1_{task}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
