"""The lead-lag analysis on series with a known answer: onsets, leads, lagged correlation, and the files."""

import math

import numpy as np
import pytest

from mirl.experiments import KINDS, read_sweep, write_analysis
from mirl.experiments.leadlag import decline_onset, lagged_correlation, ordering

from .test_analyses import make_sweep


def test_onset_is_the_first_iteration_of_a_lasting_fall():
    # range 0.8 - 0.0 = 0.8, half of it 0.4; the dip at it. 3 (0.8 -> 0.3) recovers to 0.8, so it is no onset;
    # the fall at it. 6 (0.8 -> 0.2) lasts
    its = [1, 2, 3, 4, 5, 6, 7]
    values = [0.5, 0.8, 0.3, 0.8, 0.7, 0.2, 0.0]
    assert decline_onset(its, values, frac=0.5) == 6
    assert decline_onset(its, values, frac=1.0) == 7  # only the full range counts: 0.8 -> 0.0
    assert decline_onset(its, [0.3] * 7) is None
    assert decline_onset(its, sorted(values)) is None
    with pytest.raises(ValueError, match="frac"):
        decline_onset(its, values, frac=0.0)


def test_lagged_correlation_finds_a_known_shift():
    rng = np.random.default_rng(0)
    leading = [np.cumsum(rng.normal(size=40)) for _ in range(3)]
    following = [np.concatenate([[0.0, 0.0], x[:-2]]) for x in leading]  # the same walk, two iterations later
    by_lag = {lag: lagged_correlation(leading, following, lag=lag)[0] for lag in range(-3, 4)}
    assert max(by_lag, key=by_lag.get) == 2
    assert by_lag[2] == pytest.approx(1.0, abs=0.05)  # the first two differences of each shifted run are 0
    r, pairs = lagged_correlation([[1.0, 1.0, 1.0]], [[0.0, 1.0, 2.0]], lag=0)
    assert math.isnan(r) and pairs == 0


def test_ordering_labels():
    assert ordering(2.0, True, True) == "MI first"
    assert ordering(-1.0, True, True) == "success first"
    assert ordering(0.0, True, True) == "together"
    assert ordering(math.nan, True, False) == "only MI fell"
    assert ordering(math.nan, False, False) == "neither fell"


def _line(mi, success):
    return {"diag/trajectory/est/mi_estimate": mi, "rollout/success": success}


def test_leadlag_over_a_sweep(tmp_path):
    # run a: MI falls at it. 3, success at it. 5 -> lead 2; run b: both flat -> neither fell
    a = [_line(m, s) for m, s in zip([0.9, 0.9, 0.2, 0.1, 0.1, 0.1], [0.6, 0.6, 0.6, 0.6, 0.1, 0.0], strict=True)]
    b = [_line(0.5, 0.3) for _ in range(6)]
    sweep = make_sweep(tmp_path / "s", [("a_s1", {"case": "a"}, 1, {}, a), ("b_s1", {"case": "b"}, 1, {}, b)])
    table = KINDS["leadlag"](read_sweep(sweep))
    rows = {row["run"]: row for row in table.rows}
    assert (rows["a_s1"]["mi_onset"], rows["a_s1"]["success_onset"], rows["a_s1"]["lead"]) == (3.0, 5.0, 2.0)
    assert rows["a_s1"]["order"] == "MI first" and rows["b_s1"]["order"] == "neither fell"
    assert [p[0] for p in table.series["xcorr|all runs"]] == [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]
    paths = write_analysis(sweep, table)
    text = paths["md"].read_text()
    assert "MI first: 1" in text and "mean ± standard error" not in text
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


def test_leadlag_without_dense_diagnostics_says_how_to_get_them(tmp_path):
    sweep = make_sweep(tmp_path / "s", [("a_s1", {"case": "a"}, 1, {}, [{"rollout/success": 0.1}] * 4)])
    with pytest.raises(Exception, match="diagnostics.every=1"):
        KINDS["leadlag"](read_sweep(sweep))
