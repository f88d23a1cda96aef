"""Plots and a self-contained HTML report from a run directory, and comparisons of several runs.

``build_report(run_dir)`` writes ``RUN_DIR/report.html`` (images embedded as data URIs, opens offline) and its
PNGs under ``RUN_DIR/report/``; ``build_comparison([a, b])`` overlays the headline curves of several runs.
Both read run directories tolerantly (:func:`read_run`): a missing or half-written file becomes a visible note,
never an error.
"""

from mirl.report.build import ReportResult, build_report
from mirl.report.compare import build_comparison
from mirl.report.rundir import Metrics, RunData, Series, read_run

__all__ = ["Metrics", "ReportResult", "RunData", "Series", "build_comparison", "build_report", "read_run"]
