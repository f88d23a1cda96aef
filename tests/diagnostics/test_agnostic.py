"""The agnostic share (mirl.diagnostics.agnostic) and the alarm (mirl.diagnostics.alarm) on constructed inputs."""

from __future__ import annotations

import doctest
import math

import pytest
import torch

from mirl.diagnostics import agnostic, alarm, graded
from mirl.diagnostics.agnostic import agnostic_share, cut, wilson
from mirl.diagnostics.alarm import Alarm, first_alarm
from mirl.diagnostics.info import mi_proxies


def test_doctests():
    for module in (agnostic, alarm, graded):
        assert doctest.testmod(module).failed == 0


def mixture(rows: int, templated: int, generator: torch.Generator, miss: int = 0) -> torch.Tensor:
    """An (rows, rows) score matrix, reasoning i from prompt i: the first ``templated`` rows score alike under every
    prompt (i.i.d. noise, the matched cell included); the others score their own prompt 2 nats above the rest,
    except the last ``miss`` of them, which score it 2 nats below (dependent rows the test misses)."""
    logp = -3.0 + 0.5 * torch.randn(rows, rows, generator=generator, dtype=torch.float64)
    grounded = torch.arange(templated, rows - miss)
    logp[grounded, grounded] = -1.0
    missed = torch.arange(rows - miss, rows)
    logp[missed, missed] = -5.0
    return logp


def share_of(logp: torch.Tensor, power: float = 1.0) -> dict[str, float]:
    proxies = mi_proxies(logp, torch.arange(logp.shape[0]))
    return agnostic_share(proxies, rows=logp.shape[0], power=power)


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_k_of_n_templated_rows_read_about_k_over_n(share):
    rows = 32
    templated = round(share * rows)
    covered, errors = 0, []
    for seed in range(200):
        out = share_of(mixture(rows, templated, torch.Generator().manual_seed(seed)))
        assert out["agnostic_share_cut"] == 8.0  # chance@8 = 8/32 = 1/4 <= 1/2 < chance@16
        covered += out["agnostic_share_ci_low"] <= share <= out["agnostic_share_ci_high"]
        errors.append(abs(out["agnostic_share"] - share))
    # a 95 % interval: at least 90 % of 200 batches (a binomial 95 % would fall under 90 % with p < 0.001)
    assert covered >= 180
    # a templated row passes at k = 8 with chance 1/4: SD of the share = sqrt(k 3/16) / 8 / 32 * 4 <= 0.14
    assert sum(errors) / len(errors) < 0.13
    first = share_of(mixture(rows, templated, torch.Generator().manual_seed(0)))
    assert first["agnostic_share_ci_low"] <= share <= first["agnostic_share_ci_high"]


def test_the_power_setting_corrects_for_dependent_rows_the_test_misses():
    # 16 dependent rows of 32, 2 of them ranking their prompt last (power 14/16), no templated row: at p = 1 the
    # misses read as agnostic rows, at p = 7/8 the batch reads as fully dependent
    logp = mixture(16, 0, torch.Generator().manual_seed(1), miss=2)
    assert share_of(logp)["agnostic_share"] == pytest.approx((1 - 14 / 16) / (1 - 8 / 16))  # k = 8 of 16
    assert share_of(logp, power=14 / 16)["agnostic_share"] == 0.0


def test_the_cut_is_the_largest_logged_k_with_chance_at_most_one_half():
    assert cut({"retrieval_chance": 1 / 8, "retrieval_chance@2": 0.25, "retrieval_chance@4": 0.5}) == 4
    assert cut({"retrieval_chance": 0.6}) is None
    assert agnostic_share({"retrieval_acc": 1.0, "retrieval_chance": 0.6}, rows=4) == {}
    # Wilson by hand: 8 of 16 -> centre 0.5, half z sqrt(1/64 + z^2/1024) / (1 + z^2/16) = 0.220004 (z = 1.959964)
    assert wilson(8, 16) == pytest.approx((0.279996, 0.720004), abs=1e-6)
    with pytest.raises(ValueError, match="power must be in"):
        agnostic_share({"retrieval_acc": 1.0, "retrieval_chance": 0.1}, rows=4, power=0.0)


def test_alarm_fires_after_three_rises_beyond_the_baseline_and_not_on_noise_or_degeneration():
    # baseline: the first share, 0.4; the lower bounds 0.45, 0.5, 0.55 are the first three above it
    rising = ([0.4, 0.5, 0.7, 0.75, 0.8], [0.2, 0.3, 0.45, 0.5, 0.55], [True] * 5)
    assert first_alarm(*rising) == 4
    flat = ([0.4, 0.6, 0.3, 0.6, 0.5, 0.6], [0.2, 0.45, 0.1, 0.45, 0.3, 0.45], [True] * 6)
    assert first_alarm(*flat) is None  # lower bounds above 0.4 never three in a row
    broken = ([0.4, 0.8, 0.8, 0.9, 0.9], [0.2, 0.6, 0.6, 0.7, 0.7], [True, True, True, False, True])
    assert first_alarm(*broken) is None  # the malformed batch resets the streak: 1, 2, 0, 1
    alarm = Alarm()
    for share, low in ((0.1, 0.0), (0.4, 0.2), (0.5, 0.3), (0.5, 0.3)):
        alarm.update(share, low, True)
    restored = Alarm()
    restored.load_state_dict(alarm.state_dict())
    assert restored == alarm and alarm.fired
    assert alarm.update(math.nan, math.nan, True) is True  # stays on; NaN changes nothing
