"""The permutation null of the MI proxies: parity with mi_proxies per shuffle, coverage at an exact zero."""

import doctest
import math

import pytest
import torch

from mirl.diagnostics import null as null_module
from mirl.diagnostics.info import mi_proxies
from mirl.diagnostics.null import _null_draws, permutation_null


def test_doctests():
    assert doctest.testmod(null_module).failed == 0


def test_each_vectorised_draw_equals_mi_proxies_on_the_shuffled_attribution():
    gen = torch.Generator().manual_seed(3)
    logp = torch.randn(12, 6, dtype=torch.float64, generator=gen)
    true_col = torch.randint(0, 6, (12,), generator=gen)
    col_group = torch.tensor([0, 1, 1, 2, 3, 3])  # duplicate prompts count as one for retrieval
    draws = _null_draws(logp, true_col, col_group, 5, torch.Generator().manual_seed(7))
    replay = torch.Generator().manual_seed(7)
    orders = [torch.randperm(12, generator=replay) for _ in range(5)]
    for d, order in enumerate(orders):
        expected = mi_proxies(logp, true_col[order], col_group=col_group, ks=(1,))
        mi = float(draws["mi_estimate"][d]) - expected["marginal_mean"]
        acc = float(draws["retrieval_above_chance"][d]) - expected["retrieval_chance"]
        assert mi == pytest.approx(expected["mi_estimate"], rel=1e-12, abs=1e-12)
        assert acc == pytest.approx(expected["retrieval_above_chance"], rel=1e-12, abs=1e-12)


def test_at_an_exact_zero_the_corrected_interval_holds_zero_and_the_raw_value_is_biased_low():
    # reasonings whose scores do not depend on which prompt produced them: I(X; Z) = 0 exactly
    gen = torch.Generator().manual_seed(0)
    batches, covered_mi, covered_ret, raw_mi, corrected_mi = 200, 0, 0, [], []
    for _ in range(batches):
        logp = torch.randn(16, 8, dtype=torch.float64, generator=gen)
        true_col = torch.arange(16) % 8
        out = permutation_null(logp, true_col, draws=200, generator=gen)
        covered_mi += out["mi_contrast_ci_low"] <= 0.0 <= out["mi_contrast_ci_high"]
        covered_ret += out["retrieval_above_chance_ci_low"] <= 0.0 <= out["retrieval_above_chance_ci_high"]
        raw_mi.append(out["mi_contrast"] + out["mi_estimate_null_mean"])
        corrected_mi.append(out["mi_contrast"])
    # nominal 95 %: over 200 batches the binomial sd is 1.5 points, so 0.90 is > 3 sd below
    assert covered_mi / batches >= 0.90 and covered_ret / batches >= 0.90
    raw, corrected = torch.tensor(raw_mi), torch.tensor(corrected_mi)
    se = float(corrected.std()) / batches**0.5
    assert float(raw.mean()) < -5 * se  # the raw estimate is biased below 0 under independence
    assert abs(float(corrected.mean())) < 3 * se  # the corrected one is not


def test_a_grounded_batch_sits_far_above_its_null():
    gen = torch.Generator().manual_seed(1)
    logp = torch.randn(16, 16, dtype=torch.float64, generator=gen) + 4.0 * torch.eye(16, dtype=torch.float64)
    out = permutation_null(logp, torch.arange(16), draws=200, generator=gen)
    assert out["mi_contrast_ci_low"] > 0 and out["retrieval_above_chance_ci_low"] > 0.5


def test_the_mi_contrast_is_not_bounded_by_log_n_while_raw_mi_estimate_is():
    # 8 reasonings, each scoring 0 under its own prompt and -3 under the 7 others: raw MI-Est is
    # 0 - (logsumexp([0, -3 x 7]) - log 8) = log 8 - log(1 + 7 e^-3) = 2.079 - 0.301 = 1.778 <= log 8, while the
    # contrast is mean matched - mean shuffled matched = 0 - (-3 x 7 / 8) = 2.625 in expectation, above log 8
    logp = 3.0 * torch.eye(8, dtype=torch.float64) - 3.0
    out = permutation_null(logp, torch.arange(8), draws=4000, generator=torch.Generator().manual_seed(0))
    raw = out["mi_contrast"] + out["mi_estimate_null_mean"]
    assert raw == pytest.approx(math.log(8) - math.log(1 + 7 * math.exp(-3)), rel=1e-9)
    assert raw <= math.log(8) < out["mi_contrast"]
    assert out["mi_contrast"] == pytest.approx(2.625, abs=0.02)  # 4000 shuffles: sd of the null mean about 0.006


def test_arguments_are_checked():
    logp, col = torch.zeros(2, 2), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="draws must be an int >= 2"):
        permutation_null(logp, col, draws=1, generator=torch.Generator())
    with pytest.raises(ValueError, match="level must be in"):
        permutation_null(logp, col, level=1.0, generator=torch.Generator())
    out = permutation_null(torch.zeros(1, 2), torch.tensor([0]), generator=torch.Generator())
    assert all(value != value for value in out.values())  # one row: nothing to shuffle, NaN
