"""Sweeps and the paper's analyses, above the trainer: ``mirl sweep`` runs many ``mirl train`` processes,
``mirl analyze`` turns their run directories into tables and figures.

Modules: ``spec`` (sweep specs and run planning), ``runner`` and ``sweep`` (execution, resume, progress),
``collect`` (per-run numbers), ``stats`` (mean +- standard error, Spearman, bootstrap), ``analyses`` (the kinds),
``outputs`` (markdown, CSV, PNG, index.html).
"""

from mirl.experiments.analyses import KINDS, AnalysisError
from mirl.experiments.collect import SweepDirError, read_sweep
from mirl.experiments.outputs import write_analysis
from mirl.experiments.spec import SpecError, SweepSpec, load_spec
from mirl.experiments.sweep import run_sweep

__all__ = [
    "KINDS",
    "AnalysisError",
    "SpecError",
    "SweepDirError",
    "SweepSpec",
    "load_spec",
    "read_sweep",
    "run_sweep",
    "write_analysis",
]
