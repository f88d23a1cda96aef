"""studies/regimes/calibrate_e1.py on a constructed pool: rows that retrieve their own prompt perfectly and donor
rows that prefer no column read as the template share they hold."""

import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("calibrate_e1", ROOT / "studies" / "regimes" / "calibrate_e1.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_constructed_pool_reads_its_template_share(monkeypatch):
    from studies.evidence.analysis import Pool

    module = _module()
    rng = np.random.default_rng(0)
    n_eval, donors = 48, 48
    grounded = rng.normal(0.0, 0.01, (n_eval, n_eval)) - 2.0 + 3.0 * np.eye(n_eval)  # own prompt far ahead
    donor = rng.normal(0.0, 0.01, (donors, n_eval)) - 2.0  # no prompt preferred
    pool = Pool(
        scores=np.vstack([grounded, donor]),
        kind=np.array(["grounded"] * n_eval + ["donor"] * donors),
        prompt=np.concatenate([np.arange(n_eval), -np.ones(donors, dtype=np.int64)]),
        donor_own=np.zeros(donors),
    )
    monkeypatch.setattr(module, "DRAWS", 20)
    for row in module.cells([pool]):
        # perfect grounded rows pass at rate 1 against the power 0.93: the estimate sits a little below the truth
        assert abs(row["mean_estimate"] - row["template_share"]) <= 0.15, row
