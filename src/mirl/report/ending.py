"""How a run ends, the same from ``mirl train`` and from ``mirl.train``: the report, the closing lines, the
never-updated warning.

The closing lines (stdout) name the run directory and its files, the report (when built), and last the run's
health in one line (:mod:`mirl.report.verdict`)::

    run directory: runs/quickstart
      metrics:  runs/quickstart/metrics.jsonl
      rollouts: runs/quickstart/rollouts
      report:   runs/quickstart/report.html  (built in 2.1 s)
    summary: healthy | iterations 4 of 4 | ...

A run that never updated its policy (the filter kept no group in any iteration, so no optimiser step was taken)
adds one line on stderr saying why (:func:`no_update_reason`); its run directory and report are written as usual.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


@dataclass(frozen=True)
class Ending:
    """What :func:`finish` did: the report it built (None when not asked), the health line, and why the run never
    updated its policy (None when it did)."""

    report: Path | None
    summary: str
    no_update: str | None


def finish(
    result, *, report: bool = True, prog: str = "mirl train", strict: bool = False, out: TextIO | None = None,
    err: TextIO | None = None,
) -> Ending:  # fmt: skip
    """Build ``report.html`` (unless ``report=False``) and print the closing lines of ``result`` (a
    :class:`~mirl.trainer.RunResult`) on ``out`` and the never-updated line, prefixed ``prog``, on ``err`` (default:
    stdout and stderr): a warning, or an error's wording under ``strict`` (the caller picks the exit status)."""
    from mirl.report.build import build_report
    from mirl.report.rundir import read_run
    from mirl.report.verdict import verdict

    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    run_dir = Path(result.run_dir)
    lines = [
        f"\nrun directory: {run_dir}",
        f"  metrics:  {run_dir / 'metrics.jsonl'}",
        f"  rollouts: {run_dir / 'rollouts'}",
    ]
    if result.stop_reason:
        lines.append(f"  stopped early: {result.stop_reason}")
    built = build_report(run_dir) if report else None
    if built is not None:
        lines.append(f"  report:   {built.html_path}  (built in {built.seconds:.1f} s)")
    summary = verdict(read_run(run_dir)).line()  # the run's health in one line, last
    print("\n".join([*lines, summary]), file=out, flush=True)
    reason = no_update_reason(run_dir)
    if reason:
        print(f"{prog}: {'' if strict else 'warning: '}{reason}", file=err, flush=True)
    return Ending(built.html_path if built is not None else None, summary, reason)


def no_update_reason(run_dir: Path) -> str | None:
    """None when some iteration of the run updated the policy; else why none did, from its ``metrics.jsonl``."""
    from mirl.trainer.rundir import read_records

    records = read_records(Path(run_dir) / "metrics.jsonl")
    if not records or any(record.get("filter/kept_trajectories", 0) > 0 for record in records):
        return None
    count = len(records)
    zero_spread = all(record.get("filter/spread_mean_before", 0.0) == 0.0 for record in records)
    success = sum(record.get("rollout/success", 0.0) for record in records) / count
    if zero_spread:
        tone = "all failed" if success == 0.0 else "all succeeded" if success == 1.0 else "had equal returns"
        why = (
            f"every group's samples {tone} (reward spread 0), so the filter kept no group; raise "
            "rollout.group_size or rollout.temperature, or pick an easier env setting"
        )
    else:
        why = "the filter kept no group; loosen it (filter.value) or use filter.strategy=none"
    return f"no update happened in {count} iteration{'s' * (count != 1)}: {why}"
