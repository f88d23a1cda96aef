"""Torch's intra-op threads against the cores actually free, for commands that score on the CPU (``mirl diagnose``).

Torch starts one OpenMP thread per core it sees and keeps that number whatever else runs. On a machine that other
work already keeps busy, those threads outnumber the free cores: at each parallel region's barrier the threads that
did get a core spin-wait for the ones that did not, so the same scoring burns several times the CPU and takes far
longer (benchmarks/diagnose_load.py measures it). :func:`fit_threads` lowers the count to the cores this process may
use (``os.sched_getaffinity``) less the one-minute load average, at least 1; it never raises it, and leaves it alone
when the user set ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``. A different thread count may change the scores in the
last bits of float32 (a different summation order); the CLI says when it lowered the count.
"""

from __future__ import annotations

import os

USER_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def free_cores(cores: int | None = None, load: float | None = None) -> int:
    """Cores this process may use that other work is not using: ``cores`` (default: the affinity set) less the
    one-minute ``load`` average (default: the system's), rounded, at least 1.

    >>> free_cores(8, 3.4), free_cores(2, 5.0), free_cores(4, 0.2)
    (5, 1, 4)
    """
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    load = os.getloadavg()[0] if load is None else load
    return max(1, cores - round(load))


def fit_threads() -> str | None:
    """Lower torch's intra-op threads to :func:`free_cores` when it would use more; the sentence saying so, or
    None when the count is kept (enough free cores, or set by the user's environment)."""
    import torch

    if any(os.environ.get(name) for name in USER_SETTINGS):
        return None
    threads, cores, load = torch.get_num_threads(), len(os.sched_getaffinity(0)), os.getloadavg()[0]
    free = free_cores(cores, load)
    if free >= threads:
        return None
    torch.set_num_threads(free)
    return (
        f"scoring with {free} torch thread{'s' * (free != 1)}, not {threads}: the load average {load:.1f} leaves "
        f"{free} of {cores} cores free (more threads than free cores spin-wait on each other); "
        "OMP_NUM_THREADS=N chooses"
    )
