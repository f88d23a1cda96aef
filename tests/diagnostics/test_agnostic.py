"""The agnostic share (mirl.diagnostics.agnostic) and the alarm (mirl.diagnostics.alarm) on constructed inputs."""

from __future__ import annotations

import math

import pytest
import torch

from mirl.diagnostics.agnostic import agnostic_share, own_ranks
from mirl.diagnostics.alarm import Alarm, first_alarm


def mixture(rows: int, templated: int, generator: torch.Generator) -> torch.Tensor:
    """An (rows, rows) score matrix, reasoning i from prompt i: the first ``templated`` rows score alike under every
    prompt (i.i.d. noise, the matched cell included); the others score their own prompt 2 nats above the rest."""
    logp = -3.0 + 0.5 * torch.randn(rows, rows, generator=generator, dtype=torch.float64)
    grounded = torch.arange(templated, rows)
    logp[grounded, grounded] = -1.0
    return logp


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_k_of_n_templated_rows_read_about_k_over_n(share):
    rows = 32
    templated = round(share * rows)
    covered, errors = 0, []
    for seed in range(200):
        out = agnostic_share(mixture(rows, templated, torch.Generator().manual_seed(seed)), torch.arange(rows))
        covered += out["agnostic_share_ci_low"] <= share <= out["agnostic_share_ci_high"]
        errors.append(abs(out["agnostic_share"] - share))
    # a 95 % interval: at least 90 % of 200 batches (a binomial 95 % would fall under 90 % with p < 0.001)
    assert covered >= 180
    # templated ranks are uniform on 32 places: SD of the share = 2 sqrt(k / 12) / 32 <= 0.06 at k = 32
    assert sum(errors) / len(errors) < 0.08
    first = agnostic_share(mixture(rows, templated, torch.Generator().manual_seed(0)), torch.arange(rows))
    assert first["agnostic_share_ci_low"] <= share <= first["agnostic_share_ci_high"]


def test_ranks_match_a_loop_over_rows_and_count_a_repeated_prompt_once():
    generator = torch.Generator().manual_seed(3)
    logp = torch.randn(6, 5, generator=generator, dtype=torch.float64).round(decimals=1)  # ties happen
    group = torch.tensor([0, 1, 1, 2, 3])  # columns 1 and 2 hold the same prompt
    logp[:, 2] = logp[:, 1]  # equal prompts score equally
    true_col = torch.tensor([0, 1, 2, 3, 4, 0])
    expected = []
    for i in range(6):
        per_prompt = {int(g): float(logp[i, j]) for j, g in enumerate(group)}
        own = int(group[true_col[i]])
        others = [s for g, s in per_prompt.items() if g != own]
        matched = per_prompt[own]
        expected.append((sum(s < matched for s in others) + 0.5 * sum(s == matched for s in others)) / len(others))
    assert own_ranks(logp, true_col, group).tolist() == pytest.approx(expected, abs=1e-15)


def test_power_correction_reads_a_fully_dependent_batch_as_zero():
    # every row ranks its own prompt 2nd of 5 (q = 3/4): with d = 1 that reads as half agnostic, with d = 3/4 as 0
    logp = torch.zeros(5, 5)
    for i in range(5):
        logp[i, i] = -1.0
        logp[i, (i + 1) % 5] = 0.5
        logp[i, [j for j in range(5) if j not in (i, (i + 1) % 5)]] = -2.0
    assert agnostic_share(logp, torch.arange(5))["agnostic_share"] == pytest.approx(0.5)  # (1 - 3/4) / (1 - 1/2)
    assert agnostic_share(logp, torch.arange(5), dependent_rank=0.75)["agnostic_share"] == 0.0


def test_undefined_without_two_prompts_and_bad_settings_are_refused():
    out = agnostic_share(torch.zeros(3, 2), torch.tensor([0, 1, 0]), col_group=torch.tensor([4, 4]))
    assert all(math.isnan(v) for v in out.values())
    with pytest.raises(ValueError, match="dependent_rank must be in"):
        agnostic_share(torch.zeros(2, 2), torch.arange(2), dependent_rank=0.5)


def test_alarm_fires_after_two_rises_beyond_the_baseline_and_not_on_noise_or_degeneration():
    # baseline: the first upper bound, 0.6
    rising = ([0.3, 0.4, 0.65, 0.7, 0.8], [0.6, 0.7, 0.9, 0.95, 1.0], [True] * 5)
    assert first_alarm(*rising) == 3  # 0.65 and 0.7 are the first two lower bounds above 0.6
    flat = ([0.3, 0.5, 0.3, 0.55, 0.3, 0.59], [0.6, 0.8, 0.6, 0.85, 0.6, 0.9], [True] * 6)
    assert first_alarm(*flat) is None  # lower bounds never above 0.6
    broken = ([0.3, 0.7, 0.8, 0.9], [0.6, 1.0, 1.0, 1.0], [True, True, False, True])
    assert first_alarm(*broken) is None  # the malformed batch resets the streak: 1, 0, 1
    alarm = Alarm()
    for low, high in ((0.1, 0.3), (0.4, 0.5), (0.5, 0.6)):
        alarm.update(low, high, True)
    restored = Alarm()
    restored.load_state_dict(alarm.state_dict())
    assert restored == alarm and alarm.fired
    assert alarm.update(math.nan, math.nan, True) is True  # stays on; NaN changes nothing
